"""The OpenAI chat-completions wire format: pure functions from bytes to models and errors.

Nothing here does I/O, so the sync and async provider share every decision, and every
provider answer, however broken, becomes either a model or a
:class:`~llmguard_sdk.errors.ProviderError` (never a ``KeyError`` deep inside). The format's
parts live in private modules, each re-exported here: the request's body
(:mod:`._wire_request`), the errors of answers that are no answer (:mod:`._wire_errors`) and
a stream's events (:mod:`._wire_stream`); a whole answer is read here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pydantic import ValidationError

from ..budget._tool_fees import with_model_search
from ..budget._usage import usage_from_payload  # every usage shape, read once
from ..errors import MalformedResponseError
from ..models import ChatResponse, StreamChunk
from ._anthropic_only import CACHE_CONTROL, SERVER_TOOLS
from ._chat_content import (
    COMPLETION_FIELDS,
    MESSAGE_FIELDS,
    REASONING_FIELDS,
    StreamHead,
    answer_fields,
    choice_metadata,
    content_text,
    tool_calls_of,
)
from ._error_kinds import error_answer
from ._wire_errors import MAX_ERROR_BODY_BYTES as MAX_ERROR_BODY_BYTES  # (not in __all__)
from ._wire_errors import (
    checked_answer,
    error_from_status,
    http_error,
    json_answer,
    str_or_none,
)
from ._wire_request import (
    ANTHROPIC_ONLY_KEY,
    OPENAI_HINT_KEY,
    RESPONSES_ONLY_KEY,
    build_payload,
    encode_payload,
    function_tool,
    named_keys,
    sent_extra_body,
)
from ._wire_stream import StreamState

__all__ = [
    "ANTHROPIC_ONLY_KEY",
    "OPENAI_HINT_KEY",
    "RESPONSES_ONLY_KEY",
    "CACHE_CONTROL",
    "SERVER_TOOLS",
    "AnswerShape",
    "CHAT_COMPLETIONS",
    "StreamHead",
    "StreamState",
    "answer_response",
    "build_payload",
    "chat_chunk_carries",
    "chat_chunk_skipped",
    "encode_payload",
    "checked_answer",
    "error_from_status",
    "function_tool",
    "http_error",
    "json_answer",
    "named_keys",
    "parse_completion",
    "sent_extra_body",
    "usage_from_payload",
]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest answer body accepted; anything bigger is a malformed answer."""


def parse_completion(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> ChatResponse:
    """Turn a non-streaming answer into a :class:`ChatResponse`, or raise its typed error."""
    data, problem = checked_answer(status, headers, body, route=route)
    choices = data.get("choices")
    if "choices" not in data and data.get("error"):  # a router's: the model behind it failed
        raise error_answer(data["error"], headers, body, route=route)
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise problem("response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise problem("response choice has no message")
    content = message.get("content")
    tool_calls = tool_calls_of(message.get("tool_calls"), problem)
    text = content_text(content)
    if text is None:
        raise problem("message content is neither a string nor a list of chunks")
    # content null with nothing else is an answer too (empty text), as it is streamed: the
    # answer can be elsewhere (OpenAI's audio, a reasoning parser's reasoning cut by
    # max_tokens, a content filter's stop), and a retry would pay for it again
    metadata = choice_metadata(choices[0], message)  # its refusal, logprobs, reasoning
    if content is None or content == "":  # (the text is "" for both: a drop-in says which)
        metadata[MESSAGE_FIELDS] = {**metadata.get(MESSAGE_FIELDS, {}), "content": content}
    fields = answer_fields(data)  # created, system_fingerprint, service_tier ...
    if fields:
        metadata[COMPLETION_FIELDS] = fields
    return answer_response(
        data,
        text=text,
        finish_reason=str_or_none(choices[0].get("finish_reason")),
        tool_calls=tool_calls,
        route=route,
        headers=headers,
        problem=problem,
        metadata=metadata,
    )


class AnswerShape(NamedTuple):
    """How a provider reads its API's answers: a whole one (``parse(status, headers, body,
    route=...)``), and a stream's events (``stream_state(route, deadline)``)."""

    parse: Callable[..., ChatResponse]
    stream_state: Callable[[str, float], StreamState]


def answer_response(
    data: Mapping[str, Any],
    *,
    text: str,
    finish_reason: str | None,
    tool_calls: list[dict[str, Any]] | None,
    route: str,
    headers: Mapping[str, str],
    problem: Callable[[str], MalformedResponseError],
    metadata: Mapping[str, Any] | None = None,
) -> ChatResponse:
    """The :class:`ChatResponse` of a parsed answer: its usage, reported cost, model and id
    are read from ``data``; a value that does not fit is ``problem(message)``. ``metadata``:
    what the answer says besides (``refusal``: the model's refusal, its text)."""
    usage, cost = usage_from_payload(data.get("usage"), service_tier=data.get("service_tier"))
    usage = with_model_search(usage, data.get("model"))  # (a chat search model's search)
    try:
        return ChatResponse(
            text=text,
            finish_reason=finish_reason,
            usage=usage,
            model=str_or_none(data.get("model")) or "",
            route=route,
            id=str_or_none(data.get("id")),
            tool_calls=tool_calls,
            cost_usd=cost,
            cost_source="reported" if cost is not None else None,
            headers=dict(headers),
            metadata=dict(metadata or {}),
        )
    except ValidationError as exc:
        raise problem(f"response does not fit the model: {exc.errors()[0]['msg']}") from None


def chat_chunk_carries(chunk: StreamChunk) -> bool:
    """Whether a chunk carries what a chat-completions chunk's choice has a place for: text,
    a finish, tool calls, a piece of a refusal, logprobs or other message fields
    (``reasoning_content``, ``audio`` ..., see
    :func:`~llmguard_sdk.providers._chat_content.choice_metadata`);
    not a thinking block of Claude's, say, or usage alone."""
    return bool(
        chunk.text
        or chunk.finish_reason
        or chunk.tool_calls
        or "refusal" in chunk.metadata
        or "logprobs" in chunk.metadata
        or MESSAGE_FIELDS in chunk.metadata
        or REASONING_FIELDS in chunk.metadata
    )


def chat_chunk_skipped(chunk: StreamChunk, *, usage: bool) -> bool:
    """Whether an openai-shaped chat-completions stream leaves ``chunk`` out: it carries
    nothing a chunk's choice has a place for (:func:`chat_chunk_carries`), and either usage
    alone that was not asked for (``usage``: the request's ``stream_options.include_usage``)
    or metadata alone (a thinking block of Claude's, a piece of a model's reasoning): as a
    chunk it would reach the SDK with an empty delta. (The seam's writer and the stand-in
    client both ask this.)"""
    if chat_chunk_carries(chunk):
        return False
    if chunk.usage is not None:
        return not usage
    return bool(chunk.metadata.keys() - {COMPLETION_FIELDS})  # (system_fingerprint ...: kept)


CHAT_COMPLETIONS = AnswerShape(parse_completion, StreamState)
"""The chat-completions answer shape (OpenAI and compatible servers)."""
