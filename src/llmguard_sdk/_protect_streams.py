"""The streams of ``@guard.protect``: what a protected function's stream used, and a stream it
returns watched until it ends.

A provider SDK's stream (openai's and anthropic's ``Stream`` / ``AsyncStream``, recognised by
their shape: an iterator with a ``close()`` that is no generator) returned by a protected
function is wrapped: the call stays open while the caller reads it, and is reported when it is
exhausted (``"ok"``), fails (``"error"``), or is closed or dropped before its end
(``"cancelled"``, as the Guard's own streams). The usage is read from whichever items carry
it (:class:`StreamTally`); a stream closed or dropped early reports what it used so far: the
usage its items told, else its prompt counted from the request it sent and the output it
delivered (``estimated``). The wrapper is a drop-in: iteration, ``with`` / ``async with``,
``close()`` and every other attribute (``response``...) of the stream it wraps.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import anyio
from typing_extensions import Self

from ._closing import CLOSE_WAIT
from .budget._usage import plain_usage, usage_from_payload
from .errors import RequestValidationError
from .models import Usage
from .tokens import count_request_tokens, count_text_tokens

__all__ = ["AsyncWatchedStream", "StreamTally", "WatchedStream", "stream_kind"]


def _field(item: object, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


class StreamTally:
    """The usage and model of a stream's items, whatever shape carries them: OpenAI chat
    chunks (the last one's ``usage``, with ``include_usage``), Anthropic's events (the input
    and cache tokens of ``message_start``'s message, the cumulative output of the last
    ``message_delta``) and the Responses API's (``response.completed``'s ``response.usage``;
    ``response.incomplete`` and ``response.failed`` too). ``witness`` is the last item that
    told the model or usage (it names the SDK). The output text the items delivered is kept
    too, to count what a stream closed early used (:meth:`used_so_far`)."""

    __slots__ = ("_merged", "_texts", "_usage", "model", "witness")

    def __init__(self) -> None:
        self.model: str | None = None
        self.witness: object = None
        self._usage: Mapping[str, Any] | None = None  # the latest whole usage
        self._merged: dict[str, Any] | None = None  # Anthropic's, merged over its events
        self._texts: list[str] = []  # the output delivered

    def see(self, item: object) -> None:
        """Note one item of the stream."""
        text = _delivered(item)
        if text:
            self._texts.append(text)
        kind = _field(item, "type")
        if kind == "message_start":
            message = _field(item, "message")
            self._note(message)
            self._merge(_field(message, "usage"))
        elif kind == "message_delta":
            self._merge(_field(item, "usage"))
        elif isinstance(kind, str) and kind.startswith("response."):
            response = _field(item, "response")
            if response is not None:
                self._note(response)
                self._usage = plain_usage(_field(response, "usage")) or self._usage
        else:
            usage = _field(item, "usage")
            if usage is not None or self.model is None:
                self._note(item)
            if usage is not None:
                self._usage = plain_usage(usage)

    def usage(self) -> Usage | None:
        """The stream's usage, ``None`` when no item carried one."""
        raw = self._merged if self._merged is not None else self._usage
        tier = _field(self.witness, "service_tier")
        return usage_from_payload(raw, service_tier=tier)[0]

    def used_so_far(self, stream: object) -> Usage | None:
        """What a stream closed or dropped before its end used: the usage its items told
        (its output at least the delivered text counted), else its prompt as the request
        ``stream`` sent it counts (:func:`sent_prompt`) and the delivered text counted, an
        estimate; ``None`` when neither is known."""
        known = self.usage()
        text = "".join(self._texts)
        output = count_text_tokens(text, self.model).tokens if text else 0
        if known is not None:
            if known.output_tokens >= output:
                return known
            return known.model_copy(update={"output_tokens": output, "estimated": True})
        sent = sent_prompt(stream)
        if sent is None:
            return None
        return Usage(input_tokens=sent, output_tokens=output, estimated=True)

    def _note(self, item: object) -> None:
        model = _field(item, "model")
        if isinstance(model, str):
            self.model = model
            self.witness = item

    def _merge(self, usage: object) -> None:
        raw = plain_usage(usage)
        if raw is not None:
            merged = self._merged if self._merged is not None else {}
            merged.update({key: value for key, value in raw.items() if value is not None})
            self._merged = merged


def _delivered(item: object) -> str:
    """The output text ``item`` delivers: a chat chunk's content, reasoning and tool calls'
    arguments, an Anthropic ``content_block_delta``'s text, JSON or thinking, a Responses
    API ``*.delta`` event's delta."""
    kind = _field(item, "type")
    if kind == "content_block_delta":
        delta = _field(item, "delta")
        return "".join(_strings(_field(delta, n) for n in ("text", "partial_json", "thinking")))
    if isinstance(kind, str):
        said = kind.endswith(".delta") and "audio" not in kind  # (audio: base64, no text)
        delta = _field(item, "delta") if said else None
        return delta if isinstance(delta, str) else ""
    choices = _field(item, "choices")
    parts: list[str] = []
    for choice in choices if isinstance(choices, list) else ():
        delta = _field(choice, "delta")
        parts += _strings(_field(delta, n) for n in ("content", "reasoning_content", "reasoning"))
        calls = _field(delta, "tool_calls")
        for call in calls if isinstance(calls, list) else ():
            parts += _strings([_field(_field(call, "function"), "arguments")])
    return "".join(parts)


def _strings(values: Any) -> list[str]:
    return [value for value in values if isinstance(value, str)]


_PROMPT_KEYS = frozenset({"content", "text", "system", "instructions", "input", "arguments"})


def sent_prompt(stream: object) -> int | None:
    """The input tokens of the request an SDK ``stream`` sent (its HTTP ``response``'s
    ``request``), as the Guard estimates a prompt: a chat request's ``messages`` with their
    framing (:func:`~llmguard_sdk.count_request_tokens`), the texts of the rest (Anthropic's
    ``system``, the Responses API's ``instructions`` and ``input``; other messages'); ``None``
    when no JSON request is at hand."""
    try:  # (httpx raises RuntimeError for a request not set or a body not read)
        body = json.loads(cast(Any, stream).response.request.content)
    except Exception:  # no request at hand, or no JSON body
        return None
    if not isinstance(body, dict):
        return None
    model = body.get("model") if isinstance(body.get("model"), str) else None
    rest = {key: body.get(key) for key in ("system", "instructions", "input")}
    tokens, messages = 0, body.get("messages")
    try:
        tokens = count_request_tokens(messages, model).tokens if messages else 0
    except RequestValidationError:  # another shape: its texts
        rest["messages"] = messages
    text = "\n".join(_prompt_texts(rest))
    return tokens + (count_text_tokens(text, model).tokens if text else 0)


def _prompt_texts(value: object, key: str | None = None) -> Iterator[str]:
    """The strings of a request's ``value`` held by a text key (``content``, ``text``...):
    what a prompt says, not its roles, types, ids, or media."""
    if isinstance(value, str):
        if key in _PROMPT_KEYS:
            yield value
    elif isinstance(value, Mapping):
        for name, item in value.items():
            yield from _prompt_texts(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from _prompt_texts(item, key)


def stream_kind(result: object) -> str | None:
    """``"sync"`` or ``"async"`` for a provider SDK's stream (an iterator, or async iterator,
    with ``close()`` and the HTTP ``response`` it reads, as openai's and anthropic's have;
    no generator, no file), ``None`` for anything else (a database cursor is returned as
    it is)."""
    if inspect.isgenerator(result) or inspect.isasyncgen(result) or isinstance(result, io.IOBase):
        return None
    if not callable(getattr(result, "close", None)) or getattr(result, "response", None) is None:
        return None
    kind = type(result)
    if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):
        return "sync"
    if hasattr(kind, "__anext__") and hasattr(kind, "__aiter__"):
        return "async"
    return None


End = Callable[[StreamTally, BaseException | None], None]
"""Reports a watched stream's call: its tally, and the error it ended with (``None``: read
to its end; not an ``Exception``: closed or dropped, cancelled)."""


class _Watch:
    """What both stream twins share: the stream, its tally, and its end (reported once)."""

    __slots__ = ("_end", "_lock", "stream", "tally")

    def __init__(self, stream: Any, end: End) -> None:
        self.stream = stream
        self.tally = StreamTally()
        self._end: End | None = end
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self._end is not None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _traceback: object) -> None:
        """Around the wait for one item: the stream's end or failure ends the call."""
        if exc is not None:
            self.end(None if isinstance(exc, (StopIteration, StopAsyncIteration)) else exc)

    def end(self, error: BaseException | None = None) -> None:
        with self._lock:
            end, self._end = self._end, None
        if end is not None:
            end(self.tally, error)


class _Watched:
    """What both stream twins share: the watch, the stream's other attributes, and the end
    of a stream dropped before its end (a cancelled call)."""

    __slots__ = ("_watch",)

    _watch: _Watch

    def __getattr__(self, name: str) -> Any:
        watch: _Watch = object.__getattribute__(self, "_watch")  # (unset: AttributeError)
        return getattr(watch.stream, name)

    def __repr__(self) -> str:
        return f"<protected {self._watch.stream!r}>"

    def __del__(self) -> None:
        watch = getattr(self, "_watch", None)
        if watch is not None and watch.open:
            watch.end(GeneratorExit())
            self._drop(watch.stream)

    def _drop(self, stream: Any) -> None:
        """Free what a dropped ``stream`` holds, where that needs no wait."""


class WatchedStream(_Watched):
    """A protected function's sync stream, reported when it ends (see the module's notes)."""

    __slots__ = ()

    def __init__(self, stream: Any, end: End) -> None:
        self._watch = _Watch(stream, end)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        watch = self._watch
        with watch:
            item = next(watch.stream)
        watch.tally.see(item)
        return item

    def close(self) -> None:
        """Close the stream; a stream closed before its end is a cancelled call."""
        self._watch.end(GeneratorExit())
        self._watch.stream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _drop(self, stream: Any) -> None:
        with contextlib.suppress(Exception):  # (its connection freed now)
            stream.close()


class AsyncWatchedStream(_Watched):
    """A protected function's async stream, reported when it ends (see the module's notes).
    Each item is awaited ``timeout`` seconds at most: the first until ``first`` (a
    ``time.monotonic`` instant, the protected call's start and its timeout), each later one
    from when it is asked for (an idle bound: a stream longer than the timeout is read whole
    while its items keep coming; the caller's own time between items does not count). Past
    it, ``timed_out()`` is raised and the stream closed."""

    __slots__ = ("_deadline", "_timed_out", "_timeout")

    def __init__(
        self,
        stream: Any,
        end: End,
        first: float,
        timeout: float,
        timed_out: Callable[[], Exception],
    ) -> None:
        self._watch = _Watch(stream, end)
        self._deadline: float | None = first  # (None: each later item's own)
        self._timeout = timeout
        self._timed_out = timed_out

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        watch, first = self._watch, self._deadline
        left = self._timeout if first is None else first - time.monotonic()
        with watch:
            with anyio.move_on_after(max(left, 0.0)) as scope:
                item = await watch.stream.__anext__()
            if scope.cancelled_caught:
                await self._close_stream()
                raise self._timed_out()
        self._deadline = None
        watch.tally.see(item)
        return item

    async def close(self) -> None:
        """Close the stream; a stream closed before its end is a cancelled call."""
        self._watch.end(GeneratorExit())
        await self._close_stream()

    aclose = close

    async def _close_stream(self) -> None:
        stream = self._watch.stream
        close = getattr(stream, "aclose", None) or stream.close
        with anyio.move_on_after(CLOSE_WAIT):
            await close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
