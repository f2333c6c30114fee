"""The stream managers of ``@guard.protect``: a protected function that returns an SDK's
stream helper (openai's ``client.chat.completions.stream(...)`` and
``client.responses.stream(...)``, anthropic's ``client.messages.stream(...)``: a
``...StreamManager``, sync or async, that sends its request when it is entered) gets it back
wrapped, and the stream entered is watched as a returned stream is
(:mod:`._protect_streams`).

Entering the wrapper enters the SDK's manager and returns the SDK's own stream (its events,
``text_stream``, ``get_final_message()`` / ``get_final_completion()``, ``until_done()``...),
the raw stream it reads put behind a watch: whatever reads it, the call is reported when it
ends (``"ok"``), fails (``"error"``), or is closed, left (``__exit__``) or dropped before its
end (``"cancelled"``). A request that fails as the manager is entered is retried as a plain
call's failure is (the call's retry policy and budget: the function is called again for a new
manager, entered in its turn); the last failure is the call's error. A manager never entered
sent nothing, and its call is reported cancelled when it is dropped. An async manager's
requests (its retries too) and first item are bounded by the timeout from when it is entered,
each later item as an async stream's.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from ._protect_streams import AsyncWatchedStream, End, StreamTally, WatchedStream, stream_kind

if TYPE_CHECKING:
    from .retry._api import Retrying

__all__ = ["AsyncWatchedManager", "WatchedManager", "manager_kind"]

_SDKS = ("openai", "anthropic")

EndOf = Callable[[object], End]
"""The end of a call made through ``result`` (the raw stream, ``None`` without one)."""

Attempts = Callable[[], "Retrying"]
"""The retry loop of the call whose manager is entered (its retries noted in its event)."""


def manager_kind(result: object) -> str | None:
    """``"sync"`` or ``"async"`` for an openai or anthropic stream manager, else ``None``."""
    kind = type(result)
    if kind.__module__.split(".")[0] not in _SDKS or not kind.__name__.endswith("StreamManager"):
        return None
    if hasattr(kind, "__enter__") and hasattr(kind, "__exit__"):
        return "sync"
    if hasattr(kind, "__aenter__") and hasattr(kind, "__aexit__"):
        return "async"
    return None


def _raw_stream(stream: object, kind: str) -> str | None:
    """The name of the attribute of the SDK's ``stream`` that holds the raw stream it reads
    (``_raw_stream``), ``None`` when none does."""
    attributes: dict[str, object] = getattr(stream, "__dict__", {})
    for name, value in attributes.items():
        if stream_kind(value) == kind:
            return name
    return None


class _Manager:
    """What both manager twins share: the SDK's manager, the call's end (until entered) and
    the watched raw stream of the stream entered."""

    __slots__ = ("_attempts", "_end_of", "_manager", "_watched")

    def __init__(self, manager: Any, end_of: EndOf, attempts: Attempts) -> None:
        self._manager = manager
        self._end_of: EndOf | None = end_of
        self._attempts = attempts
        self._watched: Any = None

    def __getattr__(self, name: str) -> Any:
        manager = object.__getattribute__(self, "_manager")  # (unset: AttributeError)
        return getattr(manager, name)

    def __repr__(self) -> str:
        return f"<protected {self._manager!r}>"

    def __del__(self) -> None:
        end_of = getattr(self, "_end_of", None)
        if end_of is not None:  # never entered: nothing went out
            end_of(None)(StreamTally(), GeneratorExit())

    def _entering(self) -> EndOf | None:
        """The call's end, taken by the first entry (a later one is the SDK's own)."""
        end_of, self._end_of = self._end_of, None
        return end_of

    def _watch(self, stream: Any, end_of: EndOf, kind: str, make: Callable[[Any, End], Any]) -> Any:
        """``stream`` (the SDK's) reading its raw ``kind`` stream watched (``make``); a stream
        of another shape is the call's answer, reported now."""
        name = _raw_stream(stream, kind)
        if name is None:
            end_of(stream)(StreamTally(), None)
            return stream
        raw = getattr(stream, name)
        self._watched = make(raw, end_of(raw))
        setattr(stream, name, self._watched)
        return stream


class WatchedManager(_Manager):
    """A protected function's sync stream manager (see the module's notes); ``remake``
    calls the function again, for a retry's manager."""

    __slots__ = ("_remake",)

    def __init__(
        self, manager: Any, end_of: EndOf, attempts: Attempts, remake: Callable[[], Any]
    ) -> None:
        super().__init__(manager, end_of, attempts)
        self._remake = remake

    def __enter__(self) -> Any:
        end_of = self._entering()
        if end_of is None:
            return self._manager.__enter__()
        try:
            manager, stream = self._manager, None
            for attempt in self._attempts().iterate(recorded=True):  # (told as it was made)
                with attempt:
                    if attempt.number > 1:  # a retry: a new manager, a new request
                        manager = self._remake()
                    stream = manager.__enter__()
            self._manager = manager
        except BaseException as exc:
            end_of(None)(StreamTally(), exc)
            raise
        return self._watch(stream, end_of, "sync", WatchedStream)

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            return self._manager.__exit__(*exc_info)
        finally:
            if self._watched is not None:
                self._watched.close()  # (left before its end: cancelled)


class AsyncWatchedManager(_Manager):
    """A protected function's async stream manager (see the module's notes)."""

    __slots__ = ("_remake", "_timed_out", "_timeout")

    def __init__(
        self,
        manager: Any,
        end_of: EndOf,
        attempts: Attempts,
        remake: Callable[[], Awaitable[Any]],
        timeout: float,
        timed_out: Callable[[], Exception],
    ) -> None:
        super().__init__(manager, end_of, attempts)
        self._remake = remake
        self._timeout = timeout
        self._timed_out = timed_out

    async def __aenter__(self) -> Any:
        end_of = self._entering()
        if end_of is None:
            return await self._manager.__aenter__()
        first = time.monotonic() + self._timeout
        try:
            manager = self._manager
            with anyio.move_on_after(self._timeout) as scope:
                async for attempt in self._attempts().aiterate(recorded=True):
                    with attempt:
                        if attempt.number > 1:  # a retry: a new manager, a new request
                            manager = await self._remake()
                        stream = await manager.__aenter__()
            if scope.cancelled_caught:
                raise self._timed_out()
            self._manager = manager
        except BaseException as exc:
            end_of(None)(StreamTally(), exc)
            raise

        def make(raw: Any, end: End) -> AsyncWatchedStream:
            return AsyncWatchedStream(raw, end, first, self._timeout, self._timed_out)

        return self._watch(stream, end_of, "async", make)

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc_info)
        finally:
            if self._watched is not None:
                await self._watched.close()
