"""The OpenAI chat-completions wire format: pure functions from bytes to models and errors.

Nothing here does I/O, so the sync and async provider share every decision, and every
provider answer, however broken, becomes either a model or a
:class:`~llmguard_sdk.errors.ProviderError` (never a ``KeyError`` deep inside).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple

from pydantic import ValidationError

from .._core.assembly import shows
from ..budget._usage import usage_from_payload  # every usage shape, read once
from ..errors import (
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RequestValidationError,
    StreamInterruptedError,
)
from ..models import ChatRequest, ChatResponse, StreamChunk
from ._anthropic_only import CACHE_CONTROL, SERVER_TOOLS, leave_out_for_chat
from ._chat_content import choice_metadata, content_text, tool_calls_of
from ._error_kinds import (
    body_error,
    body_object,
    error_answer,
    judged_error,
)
from .headers import server_wait_hint
from .sse import SSEDecoder

_STREAM_ERROR = "provider reported an error in the stream"

__all__ = [
    "ANTHROPIC_ONLY_KEY",
    "RESPONSES_ONLY_KEY",
    "CACHE_CONTROL",
    "SERVER_TOOLS",
    "AnswerShape",
    "CHAT_COMPLETIONS",
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

ANTHROPIC_ONLY_KEY = "llmguard.anthropic_only"
"""``ChatRequest.metadata`` key: the ``extra_body`` keys (comma-separated) that only Anthropic
routes send, parameters of Anthropic's Messages API that chat completions and Responses lack
(the transport seam's ``/messages`` names here every field of a Messages request it does not
translate: ``top_k``, ``thinking``, ``container`` ...), and what else of the request only
they send (:data:`CACHE_CONTROL`, :data:`SERVER_TOOLS`, Claude's own tool fields and headers)."""
RESPONSES_ONLY_KEY = "llmguard.responses_only"
"""``ChatRequest.metadata`` key: the ``extra_body`` keys (comma-separated) that only OpenAI
Responses routes send, parameters of the Responses API that chat completions and Anthropic's
Messages lack (the transport seam's ``/responses`` names ``include`` here)."""
MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest answer body accepted; anything bigger is a malformed answer."""
MAX_ERROR_BODY_BYTES = 64 * 1024
"""How much of an error answer is read (enough for any provider's error JSON)."""

_PAYLOAD_FIELDS = set(
    {
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "tools",
        "tool_choice",
        "response_format",
    }
)
# Parsing untrusted JSON can fail in more ways than JSONDecodeError: 100k nested brackets
# raise RecursionError, a 5,000-digit integer raises ValueError.
_JSON_ERRORS = (ValueError, RecursionError)


def build_payload(request: ChatRequest, *, model: str, stream: bool) -> dict[str, Any]:
    """The JSON body of a chat-completions call for ``request``."""
    payload: dict[str, Any] = {
        "model": model,
        # a tool message's is_error and an assistant's thinking are Anthropic's: chat
        # completions has no such fields
        "messages": [
            m.model_dump(exclude_none=True, exclude={"is_error", "thinking"})
            for m in request.messages
        ],
    }
    payload.update(request.model_dump(include=_PAYLOAD_FIELDS, exclude_none=True))
    if request.tools and any("type" not in tool for tool in request.tools):  # Anthropic's
        payload["tools"] = [function_tool(tool) for tool in payload["tools"]]
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    payload.update(sent_extra_body(request))
    leave_out_for_chat(payload, named_keys(request, ANTHROPIC_ONLY_KEY), request.extra_body)
    return payload


def function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """``tool`` as chat completions takes it: one in Anthropic's shape (a ``name`` and an
    ``input_schema``, no ``type``) as a function tool (its name, description, schema and
    ``strict``: none of Claude's own fields, its ``cache_control``, ``input_examples`` ...);
    any other as it is."""
    if "type" in tool or not isinstance(tool.get("name"), str):
        return dict(tool)
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema") or {"type": "object"}
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def named_keys(request: ChatRequest, key: str) -> list[str]:
    """The ``extra_body`` keys ``request.metadata[key]`` names (:data:`ANTHROPIC_ONLY_KEY`,
    :data:`RESPONSES_ONLY_KEY`); a new list, at once where none are (as for most calls)."""
    named = request.metadata.get(key) if request.metadata else None
    return [name for name in named.split(",") if name] if named else []


def sent_extra_body(request: ChatRequest, *, responses: bool = False) -> dict[str, Any]:
    """``request.extra_body`` as a route that does not speak Anthropic's API sends it: less
    the keys ``request.metadata[ANTHROPIC_ONLY_KEY]`` names, and unless ``responses`` (a
    Responses route) those ``request.metadata[RESPONSES_ONLY_KEY]`` names (all of it when
    none are named)."""
    extra = dict(request.extra_body or {})
    dropped = named_keys(request, ANTHROPIC_ONLY_KEY)
    if not responses:
        dropped += named_keys(request, RESPONSES_ONLY_KEY)
    for key in dropped:
        extra.pop(key, None)
    return extra


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """``payload`` as compact JSON; NaN, infinity or unencodable values are a request error."""
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise RequestValidationError(f"request cannot be sent as JSON: {exc}") from None


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
    refusal = _str_or_none(message.get("refusal"))  # OpenAI's refusal, in place of content
    text = content_text(content)
    if text is None:
        raise problem("message content is neither a string nor a list of chunks")
    if content is None and not tool_calls and refusal is None:
        raise problem("message has neither content nor tool_calls")
    metadata = choice_metadata(choices[0], message)  # its refusal, logprobs, reasoning
    return answer_response(
        data,
        text=text,
        finish_reason=_str_or_none(choices[0].get("finish_reason")),
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
    try:
        return ChatResponse(
            text=text,
            finish_reason=finish_reason,
            usage=usage,
            model=_str_or_none(data.get("model")) or "",
            route=route,
            id=_str_or_none(data.get("id")),
            tool_calls=tool_calls,
            cost_usd=cost,
            cost_source="reported" if cost is not None else None,
            headers=dict(headers),
            metadata=dict(metadata or {}),
        )
    except ValidationError as exc:
        raise problem(f"response does not fit the model: {exc.errors()[0]['msg']}") from None


def json_answer(
    headers: Mapping[str, str], body: bytes, problem: Callable[[str], MalformedResponseError]
) -> dict[str, Any]:
    """The JSON object of a 200 answer; ``problem(message)`` makes the error when it is not."""
    content_type = headers.get("content-type", "")
    if "json" not in content_type:
        raise problem(f"content type {content_type!r} is not JSON")
    try:
        data = json.loads(body)
    except _JSON_ERRORS:
        raise problem("response body is not valid JSON") from None
    if not isinstance(data, dict):
        raise problem("response body is not a JSON object")
    return data


def error_from_status(
    status: int, headers: Mapping[str, str], body: str, *, route: str
) -> ProviderError:
    """The typed error for an HTTP error answer (429, 5xx, 4xx ...:
    :func:`~llmguard_sdk.providers._error_kinds.judged_error`, its kind told by the status
    and the body's words, a spent quota not retried, ``x-should-retry`` the server's word);
    an answer of a status under 400 here is malformed."""
    common = _common(status, headers, body, route)

    def build(kind: type[ProviderError], _status: int) -> ProviderError:
        if status < 400:  # no error status: malformed, whatever its body says
            return MalformedResponseError(f"unexpected HTTP status {status}", **common)
        return kind(_error_message(body) or f"provider answered HTTP {status}", **common)

    return judged_error(body_error(body), build, answered=status, headers=headers, text=body)


def _common(status: int, headers: Mapping[str, str], body: str, route: str) -> dict[str, Any]:
    return {
        "route": route,
        "status_code": status,
        "headers": headers,
        "retry_after": server_wait_hint(headers),
        "body": body[:2000],
    }


class StreamState:
    """What the sync and async stream loops share: decoding, chunk mapping, end checks.

    Failures before any content reached the caller are retryable errors; after content they
    are :class:`StreamInterruptedError` carrying the text delivered so far. Content is what
    the caller is shown: text, tool calls, and what
    :func:`~llmguard_sdk._core.assembly.shows` counts (a model's reasoning, a thinking block,
    a refusal's piece), so a stream cut after reasoning alone is interrupted too (with no
    text): replayed, it would show that reasoning twice.
    """

    def __init__(self, route: str, deadline: float) -> None:
        self.route = route
        self.deadline = deadline
        self.decoder = SSEDecoder()
        self.done = False
        self.finished = False
        self.partial: list[str] = []
        self.delivered_tool_calls = False
        self.shown = False  # reasoning, a thinking block or a refusal's piece went out
        self.chunks = 0  # given out so far (none at the end: an empty stream)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._headers_given = False  # the first chunk carries the response headers

    def accept(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether the answer is a 200 event stream; False means: read the error body."""
        self.status = status
        self.headers = dict(headers)
        if status != 200:
            return False
        content_type = self.headers.get("content-type", "")
        if "json" in content_type:  # a router's error object, read as an error body
            return False
        if "text/event-stream" not in content_type:
            raise self.failure(
                MalformedResponseError,
                f"stream answered with content type {content_type!r}, not text/event-stream",
            )
        return True

    def http_error(self, body: bytes) -> ProviderError:
        """The typed error of a non-200 answer to a stream request, or of a 200 JSON one
        (an ``error`` object: the error it names; anything else is malformed)."""
        if self.status != 200:
            return http_error(self.status, self.headers, body, route=self.route)
        try:
            data = json.loads(body)
        except _JSON_ERRORS:
            data = None
        if isinstance(data, dict) and data.get("error"):
            return error_answer(data["error"], self.headers, body, route=self.route)
        kind = self.headers.get("content-type", "")
        message = f"stream answered with content type {kind!r}, not text/event-stream"
        return self.failure(MalformedResponseError, message)

    def feed(self, raw: bytes) -> Generator[StreamChunk, None, None]:
        """The chunks ``raw`` completes; checks the deadline afterwards."""
        for event in self.decoder.feed(raw):
            if event.data.strip() == "[DONE]":
                self.done = True
                return
            chunk = self._chunk(event.data, errs=event.event == "error")
            self.delivering(chunk)
            if chunk.finish_reason:
                self.finished = True
            yield chunk
        if time.monotonic() > self.deadline:
            raise self.timed_out()

    def delivering(self, chunk: StreamChunk) -> None:
        """Note what ``chunk``, about to go to the caller, delivers."""
        self.chunks += 1
        if chunk.text:
            self.partial.append(chunk.text)
        if chunk.tool_calls:
            self.delivered_tool_calls = True
        self.shown = self.shown or shows(chunk)

    @property
    def delivered(self) -> bool:
        """Whether content reached the caller: text, tool calls, reasoning (see the class)."""
        return bool(self.partial or self.delivered_tool_calls or self.shown)

    def event_object(self, data: str) -> dict[str, Any]:
        """One stream event's JSON object; anything else fails the stream as malformed."""
        try:
            event = json.loads(data)
        except _JSON_ERRORS:
            raise self.failure(
                MalformedResponseError, "stream event is not JSON", body=data
            ) from None
        if not isinstance(event, dict):
            raise self.failure(
                MalformedResponseError, "stream event is not a JSON object", body=data
            )
        return event

    def _chunk(self, data: str, *, errs: bool = False) -> StreamChunk:
        """The chunk of one event; an error event (``errs``: named ``error``, whose data may
        be the error itself) raises its typed error."""
        event = self.event_object(data)
        if "error" in event or errs:
            error = event.get("error", event)
            raise self.error_event(
                error, _error_message(data) or _str_or_none(event.get("message"))
            )
        usage, _cost = usage_from_payload(
            event.get("usage"), service_tier=event.get("service_tier")
        )
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise self.failure(MalformedResponseError, "stream event has no choices list")
        text, finish, tool_calls, metadata = "", None, None, {}
        if choices:
            choice = choices[0] if isinstance(choices[0], dict) else {}
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise self.failure(MalformedResponseError, "stream delta is not an object")
            text = content_text(delta.get("content")) or ""
            finish = _str_or_none(choice.get("finish_reason"))
            tool_calls = tool_calls_of(delta.get("tool_calls"), self._malformed)
            metadata = choice_metadata(choice, delta)
        try:
            return StreamChunk(
                text=text,
                finish_reason=finish,
                usage=usage,
                tool_calls=tool_calls,
                model=_str_or_none(event.get("model")) or "",
                route=self.route,
                id=_str_or_none(event.get("id")),
                headers=self._first_headers(),
                metadata=metadata,
            )
        except ValidationError:
            raise self.failure(MalformedResponseError, "stream event does not fit") from None

    def _first_headers(self) -> dict[str, str]:
        if self._headers_given:
            return {}
        self._headers_given = True
        return self.headers

    def check_ended(self) -> None:
        """The body ended, or its last event came: fine after [DONE] (or a finish with
        nothing pending), else a cut; a stream that gave no chunk is no answer either, an
        empty stream (as llama-cpp-python's server answers a stream request it failed
        before it began, a prompt past its context among them; a plain call gets its 400)."""
        cut = self.decoder.pending  # (an event begun: a cut, not an empty stream)
        ended = self.done or (self.finished and not cut)
        if not ended:  # the body may have ended inside its last event (no blank line after)
            last = self.decoder.flush()
            ended = last is not None and self.ends_stream(last.data)
        if ended and self.chunks:
            return
        if not ended and time.monotonic() >= self.deadline:  # the watchdog ended it
            raise self.timed_out()
        if not ended and (self.chunks or cut):
            raise self.failure(ProviderUnavailableError, "stream ended before it was complete")
        raise self.failure(ProviderUnavailableError, "empty stream: it ended without any answer")

    def ends_stream(self, data: str) -> bool:
        """Whether an event's ``data`` is the stream's last event, one that carries nothing
        else (``[DONE]``)."""
        return data.strip() == "[DONE]"

    def broken(self, exc: Exception, *, timed_out: bool) -> ProviderError:
        """The typed error for a transport failure (``timed_out``: a read timeout)."""
        if time.monotonic() >= self.deadline:
            return self.timed_out()
        if timed_out:
            return self.failure(ProviderTimeoutError, f"stream timed out: {exc!r}")
        return self.failure(ProviderUnavailableError, f"stream broke: {exc!r}")

    def timed_out(self) -> ProviderError:
        """The error for a stream that ran past the call's deadline."""
        return self.failure(ProviderTimeoutError, "the call's deadline passed during the stream")

    def failure(
        self,
        kind: type[ProviderError],
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
    ) -> ProviderError:
        """``kind`` before any content was delivered; StreamInterruptedError after, its
        ``partial_text`` the text (empty after reasoning alone) (``status``: the error's
        own, an error event's, in place of the answer's; ``body``: what came instead of an
        event, its ``body``, the first 2,000 characters)."""
        common: dict[str, Any] = {"route": self.route, "headers": self.headers}
        common.update(status_code=(status or self.status) or None, body=body and body[:2000])
        if self.delivered:
            return StreamInterruptedError(message, partial_text="".join(self.partial), **common)
        return kind(message, **common)

    def error_event(
        self, error: object, message: str | None, default: str = _STREAM_ERROR
    ) -> ProviderError:
        """The typed error of a stream's error event whose error object is ``error``: the
        error, status and retry verdict the same failure answered as an HTTP error has
        (:func:`~llmguard_sdk.providers._error_kinds.judged_error`: its kind, the status that
        kind stands for, a spent quota not retried; never the ``x-should-retry`` of the 200
        answer), or :class:`StreamInterruptedError` after content (``message``: its text,
        else ``default``)."""

        def build(kind: type[ProviderError], status: int) -> ProviderError:
            return self.failure(kind, message or default, status=status)

        return judged_error(error, build, answered=self.status)  # its own content decides

    def _malformed(self, message: str) -> ProviderError:
        return self.failure(MalformedResponseError, message)


def checked_answer(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> tuple[dict[str, Any], Callable[[str], MalformedResponseError]]:
    """The JSON object of a 200 answer, and the function making the answer's
    :class:`MalformedResponseError` (with its headers and the start of its body) from a
    message; any other status raises its typed error."""
    if status != 200:
        raise http_error(status, headers, body, route=route)
    problem = _Problem(route, headers, body)
    return json_answer(headers, body, problem), problem


def http_error(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> ProviderError:
    """The typed error of an HTTP error answer, from its raw body."""
    text = body[:MAX_ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    return error_from_status(status, headers, text, route=route)


class _Problem:
    """Builds the MalformedResponseError of one answer, with its status, headers and body."""

    def __init__(self, route: str, headers: Mapping[str, str], body: bytes) -> None:
        self.route = route
        self.headers = headers
        self.body = body

    def __call__(self, message: str) -> MalformedResponseError:
        return MalformedResponseError(
            message,
            route=self.route,
            status_code=200,
            headers=self.headers,
            body=self.body[:2000].decode("utf-8", errors="replace"),
        )


def chat_chunk_carries(chunk: StreamChunk) -> bool:
    """Whether a chunk carries what a chat-completions chunk's choice has a place for: text,
    a finish, tool calls, a piece of a refusal or logprobs (see
    :func:`~llmguard_sdk.providers._chat_content.choice_metadata`);
    not a thinking block of Claude's, say, or usage alone."""
    return bool(
        chunk.text
        or chunk.finish_reason
        or chunk.tool_calls
        or "refusal" in chunk.metadata
        or "logprobs" in chunk.metadata
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
    return bool(chunk.metadata)


def _error_message(body: str) -> str | None:
    """An error body's message: OpenAI's and Anthropic's ``error.message``, an ``error``
    string (Ollama's, TGI's), a list of one error (Gemini's OpenAI-compatible endpoint), a
    top-level ``message`` (vLLM's error object) or ``detail`` (FastAPI's)."""
    data = body_object(body)
    if data is None:
        return None
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    for key in ("message", "detail"):
        if isinstance(data.get(key), str) and data[key]:
            return str(data[key])
    return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


CHAT_COMPLETIONS = AnswerShape(parse_completion, StreamState)
"""The chat-completions answer shape (OpenAI and compatible servers)."""
