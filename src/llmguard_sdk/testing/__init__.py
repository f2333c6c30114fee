"""A real, local, OpenAI-compatible HTTP server for tests and outage drills.

:class:`FakeProvider` runs a small threaded HTTP/1.1 server on a loopback port in a
background thread.  It answers ``POST /v1/chat/completions`` (plain and streamed) with
deterministic replies and can be told to misbehave in the ways real providers do: HTTP
errors with ``Retry-After`` headers, slow answers, slow streams, hung requests, connection
resets, streams cut mid-event, streams failed with the API's own in-stream error
(``Fault(stream_error_after=N)``), broken JSON, wrong content types and provider-side rate
limits (``rpm`` / ``tpm``). It refuses what the real APIs refuse (a chat message with a role
chat has not, missing or empty ``messages``) with their 400 bodies (``message``, ``type``,
``param``, ``code``); ``FakeProvider(strict=True)`` also refuses a request naming no model and tool
messages (Messages: ``tool_result`` blocks) that answer no call, or calls left unanswered.

Typical use::

    with FakeProvider() as fake:
        fake.script(Fault(status=503), None)  # first request fails, second succeeds
        client = openai.OpenAI(base_url=fake.base_url, api_key="x")
        ...

Deterministic token counting (documented so tests can assert exact numbers):

* ``input_tokens`` = sum over the request's messages of ``len(text.split()) + 4`` where
  ``text`` is the message content (a string, or the text parts of a list joined with one
  space; anything else counts as empty).
* The reply is split into *pieces*: words, every piece keeping the whitespace in front of
  it, so ``"".join(pieces) == reply``.  ``output_tokens`` = number of pieces.  A smaller
  ``max_tokens`` / ``max_completion_tokens`` truncates the pieces and gives
  ``finish_reason="length"``.

A request whose ``tool_choice`` forces a tool (chat completions' ``"required"`` or a named
function, Anthropic's ``{"type": "any"}`` or ``{"type": "tool", "name": ...}``) is answered
with a call of that tool (the first one for ``"required"`` / ``any``) on every endpoint: chat
``tool_calls`` with ``finish_reason="tool_calls"`` (streamed: the call's id and name in one
chunk, its arguments' fragments in the next ones), a Messages ``tool_use`` block with
``stop_reason="tool_use"`` (streamed: ``input_json_delta`` events, one a fragment), a
Responses ``function_call`` (streamed: ``response.function_call_arguments.delta`` events);
the batch APIs answer such requests alike. Each fragment of the arguments (JSON punctuation,
names and values apart) counts one output token, and an output limit under their number cuts
the call there, as the real APIs do: the arguments' first fragments (a Messages ``tool_use``
block's ``input``: ``{}``) with ``finish_reason="length"``, ``stop_reason="max_tokens"`` or
``status="incomplete"`` (``max_output_tokens``). Each call's id is new, drawn at random in
the API's shape: ``call_`` and 24 letters and digits (chat completions, the Responses API's
``call_id``), ``toolu_01`` and 22 base58 characters (Messages).

Request ids have each API's shape and are the same each run for a server's n-th request:
OpenAI's ``x-request-id`` ``req_`` and 32 hex digits, Anthropic's ``request-id`` ``req_011C``
and 20 base58 characters.

Only chat-completion requests are subject to faults, rate limits and :class:`ProviderStats`;
``GET /v1/models`` and ``GET /health`` always answer normally.

It also speaks Anthropic's Messages API: ``POST /v1/messages`` (it requires the
``anthropic-version`` header and ``max_tokens``), plain and streamed (``message_start``,
``content_block_*``, ``message_delta``, ``message_stop`` events), with Anthropic's error bodies
(their ``request_id`` the ``request-id`` header's; a path under ``/v1/messages/`` it does not
serve answers Anthropic's 404) and the same faults and limits.  Its
input tokens count the same way, the ``system`` prompt counting as one message and each tool
as one message holding its JSON.

With ``prefix_cache=True`` it emulates a provider's prefix cache, on the same deterministic
tokens (each message is its words framed by 4 tokens, so the counts above hold):

* OpenAI-style: ``prompt_tokens_details.cached_tokens`` is the longest prefix the request
  shares with any earlier request (tools, hashed, count as part of the first message).
* Anthropic-style: only prefixes that end at a ``cache_control`` breakpoint are cached.
  ``cache_read_input_tokens`` is the longest breakpoint prefix written by an earlier request,
  ``cache_creation_input_tokens`` what this request writes up to its last breakpoint, and
  ``input_tokens`` the rest. As Claude, it answers 400 to more than four breakpoints, to a
  1-hour one after a 5-minute one, to one on a thinking block or an empty text, and to a
  turn with empty content (but a final assistant one).

Prefixes shorter than ``prefix_cache_min_tokens`` are never cached (real providers: 1024).

It also speaks OpenAI's Responses API: ``POST /v1/responses``, plain and streamed
(``response.created`` ... ``response.completed`` events), with the same replies, token counts,
prefix cache and faults; ``reasoning.effort`` adds reasoning tokens and a ``tool_choice`` that
requires a tool answers a ``function_call`` (see ``_responses``'s notes). On every route a
forced tool call carries placeholder arguments that the tool's JSON schema takes (see
``_tool_args``'s notes). Web search tools are answered as if searched: a Messages request with
Claude's (``{"type": "web_search_20250305", ...}``) reports its ``max_uses`` searches (one
without) in ``usage.server_tool_use.web_search_requests`` (a stream in ``message_delta``), each
search's ``server_tool_use`` and ``web_search_tool_result`` blocks before its text (a stream
cut by ``cut_stream_after`` too), and a ``code_execution`` tool one ``server_tool_use`` block
of ``code_execution`` and its result; a Responses request gives a completed
``web_search_call`` item per ``web_search`` tool, a ``file_search_call`` per ``file_search``
tool and a ``code_interpreter_call`` per ``code_interpreter`` tool.

It also runs OpenAI's Batch API (``/v1/files``, ``/v1/batches``) and Anthropic's Message
Batches (``/v1/messages/batches``), answered as the endpoints answer. Constructor arguments
(attributes too, which a test may set later) steer them: ``batch_seconds`` (how long a batch
runs, 0.2 s by default; OpenAI's go ``validating``, ``in_progress``, ``finalizing``,
``completed``, Anthropic's ``in_progress``, ``ended``, a cancel through ``cancelling`` /
``canceling``), ``batch_rows`` (``batch_rows(row)`` rewrites each result row: a dict, a raw
line or ``None``; an OpenAI row with an ``error`` or a status other than 200 goes to the
error file) and
``batch_outcome`` (``"expired"`` or ``"failed"``: the next batches expire or fail).

The module is also runnable for benchmarks in a separate process::

    python -m llmguard_sdk.testing serve [--port N] [--model M]

which prints the base URL on one line and serves until SIGTERM, SIGINT or end of stdin.
"""

from __future__ import annotations

from ._faults import Fault, ProviderStats, ReceivedRequest
from ._provider import FakeProvider

__all__ = ["FakeProvider", "Fault", "ProviderStats", "ReceivedRequest"]
