"""A provider for Anthropic's Messages API (``POST /v1/messages``), over httpx.

:class:`AnthropicProvider` shares the HTTP machinery of
:class:`~llmguard_sdk.providers.OpenAICompatibleProvider` (connection pools, exact deadlines,
the sync watchdog, typed transport errors); only the wire format differs, and it is written
here as pure functions:

* requests: system messages become ``system`` blocks, OpenAI-style image parts, tool calls,
  tool results, tools and ``tool_choice`` are translated, ``max_tokens`` (which Anthropic
  requires) defaults to ``default_max_tokens``, ``stop`` becomes ``stop_sequences``, a
  ``temperature`` above 1 is sent as 1 (Anthropic's range is 0-1), a ``json_schema``
  ``response_format`` is Claude's structured output, ``output_config.format`` (its schema),
  and a function tool's ``strict`` goes on. ``seed`` and the other ``response_format`` types
  (``json_object``) have no Anthropic counterpart and are not sent; neither are
  OpenAI's own parameters in ``extra_body`` (``prompt_cache_key``, ``frequency_penalty``,
  ``logprobs`` ...: Anthropic refuses them), but ``user`` becomes ``metadata.user_id`` (other
  ``metadata`` keys are left out) and ``parallel_tool_calls=False`` the tool choice's
  ``disable_parallel_tool_use``. A ``service_tier`` goes on where Claude has it (``auto``,
  ``standard_only``); OpenAI's others (``default``, ``flex``, ``scale``, ``priority``,
  ``fast``) are left out, with a debug log (Claude then serves at its default, ``auto``).
  Everything else in ``extra_body`` is sent.
* sampling parameters a model refuses: newer Claude models answer 400 "`temperature` is
  deprecated for this model." (``top_p``, ``top_k`` alike; some 4.x models refuse
  ``temperature`` and ``top_p`` together, "cannot both be specified"). The attempt is sent
  again without the parameter Claude named (``top_p`` for the pair), and later calls to that
  model leave it out (a warning is logged once per model and parameter; the provider
  remembers the last 256 models). Nothing Claude did not name in those words is left out,
  and no other 400 is sent again.
* prompt caching: requests built by a :class:`~llmguard_sdk.prompts.PromptBuilder` get
  ``cache_control`` breakpoints at the end of their static part (see
  :func:`~llmguard_sdk.prompts.add_cache_breakpoints`); breakpoints already in a request's
  content parts or tools are sent as they are (more than :data:`MAX_CACHE_BREAKPOINTS` of
  them, which Claude answers with a 400, are a
  :class:`~llmguard_sdk.errors.RequestValidationError` before anything is sent), and
  openai's ``prompt_cache_breakpoint`` on a content part (the same mark: the end of a
  reusable prefix) is Claude's ``cache_control: {"type": "ephemeral"}`` on that block (the
  latest ones, as many as Claude takes: :data:`MAX_CACHE_BREAKPOINTS` in all, a top-level
  ``cache_control`` counted, and a PromptBuilder's static part keeping its own before them;
  none before one of the request's own with ``"ttl": "1h"``, which Claude would refuse: that
  mark is left out).
* answers: text and ``tool_use`` blocks (as OpenAI-shaped ``tool_calls``), ``stop_reason``
  mapped to OpenAI's finish reasons where they have its meaning (:data:`STOP_REASONS`; one
  they lack, ``pause_turn``, is the finish reason as Claude sent it, never ``stop``) and kept
  as it is in the response's ``metadata["stop_reason"]``, and usage with
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` (``Usage.input_tokens``
  counts them too) and the server tools' uses (:mod:`._server_tools`).
* streams: the ``message_start`` / ``content_block_*`` / ``message_delta`` / ``message_stop``
  events; an ``error`` event is the provider error its type's HTTP status is
  (``overloaded_error``: a 529, ``timeout_error``: a 504 ...; after the first text a
  :class:`~llmguard_sdk.errors.StreamInterruptedError`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from types import MappingProxyType
from typing import Any

from .._http_library import Library
from .._keys import check_api_key
from ..errors import MalformedResponseError
from ..models import ChatRequest, ChatResponse, Message, StreamChunk, Usage
from ..prompts.adapters import (
    CACHE_HISTORY_KEY,
    MOST_BREAKPOINTS,
    STATIC_MESSAGES_KEY,
    add_cache_breakpoints,
)
from ._anthropic_breakpoints import OPENAI_BREAKPOINT, convert_breakpoints
from ._anthropic_params import add_extra_body, add_output_format
from ._anthropic_sampling import RefusedSampling, SamplingRetries
from ._anthropic_tools import claude_tool, claude_tool_choice
from ._error_kinds import error_answer
from ._route_options import check_count, shown
from ._server_tools import claude_tool_uses, server_block, with_tool_uses
from .wire import (
    AnswerShape,
    StreamState,
    answer_response,
    checked_answer,
    usage_from_payload,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "MAX_CACHE_BREAKPOINTS",
    "THINKING_BLOCKS",
    "STOP_REASONS",
    "AnthropicProvider",
    "anthropic_params",
    "build_anthropic_payload",
    "parse_anthropic_message",
]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent by default."""

THINKING_BLOCKS = ("thinking", "redacted_thinking")
"""Claude's content blocks of its extended thinking: an answer's are in its response's
``metadata["thinking"]``, each block as Claude sent it (a stream's, each whole when it ends)."""

STOP_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "max_tokens": "length",
        "model_context_window_exceeded": "length",  # the output ran into the context window
        "tool_use": "tool_calls",
        "refusal": "content_filter",
    }
)
"""Claude's ``stop_reason`` -> the response's ``finish_reason`` (OpenAI's word of the same
meaning). Any other reason is the finish reason as Claude sent it: ``pause_turn`` (Claude
paused a long server-tool turn; the answer is incomplete, send it back to continue) has no
OpenAI counterpart and is no complete ``stop``. The raw reason is always in the response's
``metadata["stop_reason"]`` (a stream's, on the chunk that finishes it)."""
MAX_CACHE_BREAKPOINTS = MOST_BREAKPOINTS
"""The most blocks with ``cache_control`` Claude takes in one request (it answers 400 to more)."""
_JSON_ERRORS = (ValueError, RecursionError)


class AnthropicProvider(SamplingRetries):
    """Anthropic's Messages API, sync and async, streaming and not.

    Args:
        base_url: the API root including its version path, ``https://api.anthropic.com/v1``
            by default.
        api_key: sent as ``x-api-key``.
        model: the model this route serves; ``None`` uses each request's ``model``.
        name: the route name (default ``"anthropic"``).
        default_max_tokens: ``max_tokens`` of requests that set no output limit (Anthropic
            requires one).
        anthropic_version: the ``anthropic-version`` header.
        headers, max_connections, context_window, transport, async_transport, http_library:
            as for :class:`~llmguard_sdk.providers.OpenAICompatibleProvider`.
    """

    def __init__(
        self,
        base_url: str = "https://api.anthropic.com/v1",
        *,
        api_key: str | None = None,
        model: str | None = None,
        name: str = "anthropic",
        default_max_tokens: int = 1024,
        anthropic_version: str = ANTHROPIC_VERSION,
        headers: Mapping[str, str] | None = None,
        max_connections: int | None = None,
        context_window: int | None = None,
        transport: Any = None,
        async_transport: Any = None,
        http_library: Library | None = None,
    ) -> None:
        check_count("default_max_tokens", default_max_tokens, optional=False)
        extra = {"anthropic-version": anthropic_version, **dict(headers or {})}
        check_api_key(api_key)  # masked in every error message and telemetry export
        if api_key is not None:
            extra["x-api-key"] = api_key
        super().__init__(
            base_url,
            model=model,
            name=name,
            headers=extra,
            max_connections=max_connections,
            context_window=context_window,
            transport=transport,
            async_transport=async_transport,
            http_library=http_library,
        )
        self.default_max_tokens = default_max_tokens
        self._url = self.base_url + "/messages"

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, base_url={shown(self.base_url)!r})"

    def _asked(self, request: ChatRequest, model: str, *, stream: bool) -> dict[str, Any]:
        return build_anthropic_payload(
            request, model=model, stream=stream, default_max_tokens=self.default_max_tokens
        )

    def _payload(self, request: ChatRequest, model: str, *, stream: bool) -> dict[str, Any]:
        return claude_payload(
            request,
            model=model,
            stream=stream,
            refused=self._refused,
            default_max_tokens=self.default_max_tokens,
        )

    def _extra_headers(self, request: ChatRequest) -> dict[str, str] | None:
        return request.extra_headers  # Claude's own (anthropic-beta ...) among them


# -- requests ------------------------------------------------------------------------------


_PLAIN = {"type", "text"}  # (the keys of a text block sent as a plain string)


def anthropic_params(request: ChatRequest) -> dict[str, Any]:
    """``system``, ``messages`` and ``tools`` (and ``tool_choice``) of ``request`` in
    Anthropic's shape, with cache breakpoints after a PromptBuilder's static part."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    position: dict[int, int] = {}  # request message index -> Anthropic message index
    static = _int(request.metadata, STATIC_MESSAGES_KEY)
    static_blocks = 0
    for index, turn in enumerate(request.messages):
        if turn.role in ("system", "developer"):
            system.extend(_blocks(turn))
            if static is not None and index < static:
                static_blocks = len(system)
            continue
        role, blocks = _turn(turn)
        if not blocks:  # no text, thinking or calls (a filtered answer's ""): Claude's 400
            if messages:  # (the turns beside it, of one role now, Claude combines)
                position[index] = len(messages)
            continue
        if messages and messages[-1]["role"] == role and role == "user" and turn.role == "tool":
            messages[-1]["content"].extend(blocks)  # tool results answer one assistant turn
        else:
            messages.append({"role": role, "content": blocks})
        position[index] = len(messages)
    convert_breakpoints(
        system,
        messages,
        request.tools,
        automatic=(request.extra_body or {}).get("cache_control"),
        static=(1, static_blocks - 1, 0) if static is not None and static_blocks else None,
    )
    for message in messages:  # plain single-text turns stay plain strings
        content = message["content"]
        if len(content) == 1 and content[0].get("type") == "text" and content[0].keys() == _PLAIN:
            message["content"] = content[0]["text"]
    tools = [claude_tool(t) for t in request.tools] if request.tools else None
    history = _int(request.metadata, CACHE_HISTORY_KEY)
    if static is not None:
        add_cache_breakpoints(
            system,
            messages,
            tools,
            static_system_blocks=static_blocks,
            history_end=position.get(history - 1) if history else None,
            automatic=(request.extra_body or {}).get("cache_control"),
        )
    params: dict[str, Any] = {"messages": messages}
    if system:
        params["system"] = system
    if tools:
        params["tools"] = tools
    if request.tool_choice is not None:
        params["tool_choice"] = claude_tool_choice(request.tool_choice)
    return params


def build_anthropic_payload(
    request: ChatRequest, *, model: str, stream: bool, default_max_tokens: int = 1024
) -> dict[str, Any]:
    """The JSON body of a Messages API call for ``request``."""
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": request.output_limit or default_max_tokens,
        **anthropic_params(request),
    }
    if request.temperature is not None:
        payload["temperature"] = min(request.temperature, 1.0)  # Anthropic's range is 0-1
    if request.top_p is not None:
        payload["top_p"] = request.top_p
    if request.stop is not None:
        payload["stop_sequences"] = (
            [request.stop] if isinstance(request.stop, str) else request.stop
        )
    if stream:
        payload["stream"] = True
    add_output_format(payload, request)
    add_extra_body(payload, request)
    return payload


def claude_payload(
    request: ChatRequest,
    *,
    model: str,
    stream: bool,
    refused: RefusedSampling,
    default_max_tokens: int = 1024,
) -> dict[str, Any]:
    """The body a Claude call sends (an :class:`AnthropicProvider`'s, a Claude batch call's
    ``params``): :func:`build_anthropic_payload`'s, less the sampling parameters ``refused``
    learnt ``model`` refuses."""
    payload = build_anthropic_payload(
        request, model=model, stream=stream, default_max_tokens=default_max_tokens
    )
    refused.leave_out(model, payload)
    return payload


def _int(metadata: Mapping[str, str] | None, key: str) -> int | None:
    raw = (metadata or {}).get(key)
    # ASCII digits only: "²".isdigit() and "١٢".isdigit() hold, but int() rejects the first
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


def _blocks(message: Message) -> list[dict[str, Any]]:
    """A message's content as Anthropic content blocks."""
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [_part(dict(part)) for part in content]


def _part(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") != "image_url":
        return part  # text (with any cache_control), or already Anthropic-shaped
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        return part
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        source: dict[str, Any] = {"type": "base64", "media_type": media_type, "data": data}
    else:
        source = {"type": "url", "url": url}
    block: dict[str, Any] = {"type": "image", "source": source}
    for key in ("cache_control", OPENAI_BREAKPOINT):
        if key in part:
            block[key] = part[key]
    return block


def _turn(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.text,
        }
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    # Claude's thinking comes first (a Responses route's reasoning items there are not sent)
    thinking = [b for b in message.thinking or () if b.get("type") in THINKING_BLOCKS]
    blocks = [*thinking, *_blocks(message)]
    for call in message.tool_calls or []:
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        try:
            data = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except _JSON_ERRORS:
            data = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": data if isinstance(data, dict) else {},
            }
        )
    return message.role, blocks


# -- answers -------------------------------------------------------------------------------


def parse_anthropic_message(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> ChatResponse:
    """Turn a non-streaming Messages answer into a :class:`ChatResponse`, or raise its typed
    error (Anthropic's error bodies carry ``error.message`` as OpenAI's do)."""
    data, problem = checked_answer(status, headers, body, route=route)
    if data.get("type") == "error" and data.get("error"):  # a gateway's 200 error answer
        raise error_answer(data["error"], headers, body, route=route)
    if data.get("type") != "message":
        raise problem("response is not a message object")
    blocks = data.get("content")
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise problem("message has no content list")
    text = "".join(b["text"] for b in blocks if b.get("type") == "text" and _is_str(b.get("text")))
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    tool_calls = [{k: v for k, v in _tool_call(b, 0).items() if k != "index"} for b in uses]
    thinking = [b for b in blocks if b.get("type") in THINKING_BLOCKS]
    metadata = _stop_metadata(data.get("stop_reason"))
    if thinking:
        metadata["thinking"] = thinking
    answer = answer_response(
        data,
        text=text,
        finish_reason=_finish(data.get("stop_reason")),
        tool_calls=tool_calls or None,
        route=route,
        headers=headers,
        problem=problem,
        metadata=metadata,
    )
    usage = with_tool_uses(answer.usage, claude_tool_uses(blocks))  # (code it ran)
    return answer if usage is answer.usage else answer.model_copy(update={"usage": usage})


def _tool_call(
    block: Mapping[str, Any], index: int, arguments: str | None = None
) -> dict[str, Any]:
    if arguments is None:
        arguments = json.dumps(block.get("input") or {}, separators=(",", ":"))
    return {
        "index": index,
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name"), "arguments": arguments},
    }


def _finish(raw: object) -> str | None:
    return STOP_REASONS.get(raw, raw) if isinstance(raw, str) else None


def _stop_metadata(raw: object) -> dict[str, Any]:
    """``{"stop_reason": raw}``: Claude's own reason, which the finish reason may not tell
    (``end_turn`` from ``stop_sequence``, ``max_tokens`` from the context window)."""
    return {"stop_reason": raw} if isinstance(raw, str) and raw else {}


def _is_str(value: object) -> bool:
    return isinstance(value, str)


class AnthropicStreamState(StreamState):
    """Decodes Anthropic's stream events into chunks (the error rules are
    :class:`~llmguard_sdk.providers.wire.StreamState`'s)."""

    def __init__(self, route: str, deadline: float) -> None:
        super().__init__(route, deadline)
        self.model = ""
        self.message_id: str | None = None
        self.usage: dict[str, Any] = {}
        self.tools: dict[int, int] = {}  # content block index -> tool call index
        self.with_input: set[int] = set()  # tool blocks whose input came in deltas
        self.thinking: dict[int, dict[str, Any]] = {}  # content block index -> thinking so far
        self.server_tools: list[dict[str, Any]] = []  # server_tool_use blocks, failed searches

    def feed(self, raw: bytes) -> Generator[StreamChunk, None, None]:
        """The chunks ``raw`` completes; checks the deadline afterwards."""
        for event in self.decoder.feed(raw):
            chunk = self._event(event.data)
            if chunk is None:
                continue
            self.delivering(chunk)
            yield chunk
            if self.done:
                return
        self.fed()

    def _event(self, data: str) -> StreamChunk | None:
        event = self.event_object(data)
        kind = event.get("type")
        index = event.get("index")
        index = index if isinstance(index, int) else None  # (a list or an object is no key)
        if kind == "error":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            raise self.error_event(error, message if isinstance(message, str) else None)
        if self._of_thinking(event, index):
            return self._think(kind, index, event)
        if kind == "message_start":
            return self._started(event.get("message"))
        if kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, dict) or index is None:
                raise self.failure(MalformedResponseError, "content_block_start is malformed")
            return self._block_start(block, index)
        if kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                raise self.failure(MalformedResponseError, "content_block_delta has no delta")
            if delta.get("type") == "text_delta" and _is_str(delta.get("text")):
                return self._make(text=delta["text"])
            if delta.get("type") == "input_json_delta" and index in self.tools:
                part = delta.get("partial_json")
                if _is_str(part) and part:
                    self.with_input.add(index)
                call = {
                    "index": self.tools[index],
                    "function": {"arguments": part if _is_str(part) else ""},
                }
                return self._make(tool_calls=[call])
            return None  # delta types added later
        if kind == "message_delta":
            delta = event.get("delta")
            self._add_usage(event.get("usage"))
            raw = delta.get("stop_reason") if isinstance(delta, dict) else None
            self.finished = True
            seen = claude_tool_uses(self.server_tools)  # (a code execution's session)
            usage = with_tool_uses(usage_from_payload(self.usage)[0], seen)
            return self._make(
                finish=_finish(raw) or "stop", usage=usage, metadata=_stop_metadata(raw)
            )
        if kind == "message_stop":
            self.done = True
            return None
        if kind == "content_block_stop" and index in self.tools and index not in self.with_input:
            # a tool without input streams none ("" at most): its arguments are "{}", as in
            # a whole answer (json.loads("") fails)
            call = {"index": self.tools[index], "function": {"arguments": "{}"}}
            return self._make(tool_calls=[call])
        return None  # ping, other content_block_stop, and event types added later

    def _started(self, message: object) -> StreamChunk:
        """The first chunk, from ``message_start``'s message: its model, id and usage."""
        if not isinstance(message, dict):
            raise self.failure(MalformedResponseError, "message_start has no message")
        self.model = message["model"] if _is_str(message.get("model")) else ""
        self.message_id = message["id"] if _is_str(message.get("id")) else None
        self._add_usage(message.get("usage"))
        chunk = self._make()
        chunk._usage_so_far = usage_from_payload(self.usage)[0] if self.usage else None
        return chunk

    def _block_start(self, block: dict[str, Any], index: int) -> StreamChunk | None:
        """A content block's start; after a ``server_tool_use`` block (billed once begun) or a
        failed search's result, a chunk with the uses seen so far (:mod:`._server_tools`)."""
        if block.get("type") == "tool_use":
            self.tools[index] = len(self.tools)
            return self._make(tool_calls=[_tool_call(block, self.tools[index], "")])
        if (server := server_block(block)) is not None:  # (a failed search's result too)
            self.server_tools.append(server)
            chunk = self._make()
            so_far = usage_from_payload(self.usage)[0] if self.usage else Usage()
            chunk._usage_so_far = with_tool_uses(so_far, claude_tool_uses(self.server_tools))
            return chunk
        text = block.get("text")
        return self._make(text=text) if _is_str(text) and text else None

    def _of_thinking(self, event: Mapping[str, Any], index: int | None) -> bool:
        """Whether ``event`` is one of a thinking block's (its start, deltas, stop)."""
        if index in self.thinking:
            return True
        block = event.get("content_block")
        return (
            event.get("type") == "content_block_start"
            and index is not None
            and isinstance(block, dict)
            and block.get("type") in THINKING_BLOCKS
        )

    def _think(self, kind: object, index: Any, event: Mapping[str, Any]) -> StreamChunk | None:
        """A thinking block's events: its pieces (``thinking_delta``, ``signature_delta``)
        joined while it streams, the whole block given out at its end, in the metadata of a
        chunk of its own."""
        if kind == "content_block_start":
            self.thinking[index] = dict(event["content_block"])
            return None
        if kind == "content_block_stop":
            return self._make(metadata={"thinking": [self.thinking.pop(index)]})
        block, delta = self.thinking[index], event.get("delta")
        for key in ("thinking", "signature"):
            if isinstance(delta, dict) and _is_str(delta.get(key)):
                block[key] = str(block.get(key) or "") + delta[key]
        return None

    def ends_stream(self, data: str) -> bool:
        """Whether ``data`` is the stream's ``message_stop`` (it carries nothing else)."""
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            return False
        return isinstance(event, dict) and event.get("type") == "message_stop"

    def _add_usage(self, raw: object) -> None:
        if isinstance(raw, dict):
            self.usage.update({k: v for k, v in raw.items() if v is not None})

    def _make(
        self,
        *,
        text: str = "",
        finish: str | None = None,
        usage: Any = None,
        tool_calls: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> StreamChunk:
        return StreamChunk(
            text=text,
            finish_reason=finish,
            usage=usage,
            tool_calls=tool_calls,
            metadata=metadata or {},
            model=self.model,
            route=self.route,
            id=self.message_id,
            headers=self._first_headers(),  # rate-limit counters for the limiter
        )


AnthropicProvider._answers = AnswerShape(parse_anthropic_message, AnthropicStreamState)
