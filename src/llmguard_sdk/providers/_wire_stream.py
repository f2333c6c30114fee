"""The stream half of the chat-completions wire format: :class:`StreamState`, what the sync and
async stream loops share (decoding, chunk mapping, end checks, the typed error of each way a
stream fails). Re-exported by :mod:`~llmguard_sdk.providers.wire`; the Responses and Messages
wire formats subclass it."""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Mapping
from typing import Any

from pydantic import ValidationError

from .._core.assembly import shows
from ..budget._tool_fees import with_model_search
from ..budget._usage import usage_from_payload
from ..errors import (
    EmptyStreamError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    StreamInterruptedError,
)
from ..models import StreamChunk
from ._chat_content import (
    COMPLETION_FIELDS,
    answer_fields,
    choice_metadata,
    content_text,
    tool_calls_of,
)
from ._error_kinds import error_answer, judged_error
from ._wire_errors import JSON_ERRORS, error_message, http_error, str_or_none
from .sse import SSEDecoder

__all__ = ["StreamState"]

_STREAM_ERROR = "provider reported an error in the stream"
MAX_EVENT_CHARS = 32 * 1024 * 1024
"""The most a stream's event may hold (as ``MAX_BODY_BYTES`` bounds an answer's body)."""


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
        self._fields_given: set[str] = set()  # (created, system_fingerprint ...: each once)

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
        except JSON_ERRORS:
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
        self.fed()

    def fed(self) -> None:
        """After a piece was fed: the deadline, and what the decoder holds back for one event
        at most :data:`MAX_EVENT_CHARS` (a line that never ends was kept whole)."""
        if time.monotonic() > self.deadline:
            raise self.timed_out()
        if self.decoder.held > MAX_EVENT_CHARS:
            message = f"stream event is larger than {MAX_EVENT_CHARS} characters"
            raise self.failure(MalformedResponseError, message)

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
        except JSON_ERRORS:
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
            raise self.error_event(error, error_message(data) or str_or_none(event.get("message")))
        usage, _cost = usage_from_payload(
            event.get("usage"), service_tier=event.get("service_tier")
        )
        if usage is not None:  # (a chat search model's search)
            usage = with_model_search(usage, event.get("model"))
        choices = event.get("choices")
        if "choices" not in event and isinstance(event.get("usage"), dict):
            choices = []  # a usage-only last chunk without choices (FastChat's), as with []
        if not isinstance(choices, list):
            raise self.failure(MalformedResponseError, "stream event has no choices list")
        text, finish, tool_calls, metadata = "", None, None, {}
        if choices:
            choice = choices[0] if isinstance(choices[0], dict) else {}
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise self.failure(MalformedResponseError, "stream delta is not an object")
            text = content_text(delta.get("content")) or ""
            finish = str_or_none(choice.get("finish_reason"))
            tool_calls = tool_calls_of(delta.get("tool_calls"), self._malformed)
            metadata = choice_metadata(choice, delta)
        sent = answer_fields(event).items()  # once each: the stream joins text
        fields = {k: v for k, v in sent if k not in self._fields_given}
        if fields:
            self._fields_given.update(fields)
            metadata[COMPLETION_FIELDS] = fields
        try:
            return StreamChunk(
                text=text,
                finish_reason=finish,
                usage=usage,
                tool_calls=tool_calls,
                model=str_or_none(event.get("model")) or "",
                route=self.route,
                id=str_or_none(event.get("id")) or None,  # (Azure's first: "")
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
        raise self.failure(EmptyStreamError, "empty stream: it ended without any answer")

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
        else ``default``). Its ``body`` is the error object as an error answer's body
        (``{"error": {...}}``; a string's ``{"error": "..."}``), so its ``code``, ``type``
        and ``param`` are read as an HTTP error's are (the seam and the drop-in clients give
        them back), and it is no stream dropped after its 200 (its prompt not charged)."""
        said = json.dumps({"error": error}) if isinstance(error, (Mapping, str)) else None

        def build(kind: type[ProviderError], status: int) -> ProviderError:
            return self.failure(kind, message or default, status=status, body=said)

        return judged_error(error, build, answered=self.status)  # its own content decides

    def _malformed(self, message: str) -> ProviderError:
        return self.failure(MalformedResponseError, message)
