"""One async client per event loop.

Async connection pools (httpx, redis.asyncio) belong to the event loop that opened them:
reusing one from another loop (a second ``asyncio.run``, a thread with its own loop) fails.
:class:`PerLoop` hands each running loop its own object, created on first use, closes it
as its loop shuts down, and forgets the objects of loops that have closed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop", "off_its_loop", "on_asyncio"]

T = TypeVar("T")
_NO_ASYNCIO_LOOP = "no-asyncio-loop"  # another async library (trio): one object for it
_CLOSE_WAIT_S = 5.0  # how long a loop's shutdown waits for one object's close at most
logger = logging.getLogger("llmguard_sdk")


def _loop_key() -> object:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return _NO_ASYNCIO_LOOP


def on_asyncio() -> bool:
    """Whether the running event loop is asyncio's (not trio's): redis-py's async client
    runs on asyncio only, so under trio a Redis store's async round trips go to a worker
    thread (the sync pool; the call's deadline goes with its context)."""
    return isinstance(_loop_key(), asyncio.AbstractEventLoop)


_OTHER_LOOPS = ("Event loop is closed", "different loop", "different event loop")
"""asyncio's words (and anyio's, httpx's) for an object used off the loop it is tied to."""


def off_its_loop(error: BaseException) -> bool:
    """Whether ``error`` is asyncio's (anyio's, httpx's) ``RuntimeError`` for an object used
    off the event loop it is tied to (``Event loop is closed``: a connection kept from a
    loop since closed)."""
    return isinstance(error, RuntimeError) and any(w in str(error) for w in _OTHER_LOOPS)


def _closed(key: object) -> bool:
    return isinstance(key, asyncio.AbstractEventLoop) and key.is_closed()


async def _own_aclose(item: object) -> None:
    """The object's own ``aclose()``, if it has one."""
    aclose = getattr(item, "aclose", None)
    if callable(aclose):
        await aclose()


class _Entry(Generic[T]):
    """A loop's object, and the async generator that closes it as the loop shuts down."""

    __slots__ = ("closer", "forgotten", "item")

    def __init__(self, item: T) -> None:
        self.item = item
        self.closer: AsyncGenerator[None, None] | None = None
        self.forgotten = False  # taken away (pop_current) or its loop closed: not closed here

    def forget(self) -> None:
        """Stop its closer without closing the object (it runs to its end at once)."""
        self.forgotten = True
        closer, self.closer = self.closer, None
        if closer is not None:
            step = closer.aclose().__await__()
            try:
                step.send(None)
            except StopIteration:  # (its end: a forgotten entry's closer awaits nothing)
                return
            step.close()  # pragma: no cover - never: see above


class PerLoop(Generic[T]):
    """Objects made by ``factory``, one per event loop, created under a lock: an async
    client an ``async def`` guardrail keeps (``PerLoop(httpx.AsyncClient).get()`` in the
    filter), so that it serves sync calls' filter loop (a fresh one after a filter's
    blocking code held it) and your own loop (``achat``) alike.

    As an asyncio loop shuts down (``asyncio.run()``'s end: its async generators are
    closed, ``loop.shutdown_asyncgens()``), its object is closed there: ``close(object)``
    (default: the object's own ``aclose()``, if it has one), waited for at most 5 s; a
    failure is logged, not raised. A loop closed without that shutdown (``loop.close()``
    alone) has its object forgotten unclosed (its sockets are closed as it is collected),
    as is an object :meth:`pop_current` took (yours to close).
    """

    def __init__(
        self,
        factory: Callable[[], T],
        *,
        close: Callable[[T], Awaitable[object]] | None = None,
    ) -> None:
        self._factory = factory
        self._close: Callable[[T], Awaitable[object]] = close or _own_aclose
        self._lock = threading.Lock()
        self._items: dict[object, _Entry[T]] = {}

    def get(self) -> T:
        """The current loop's object (made now if it has none)."""
        key = _loop_key()
        entry = self._items.get(key)
        if entry is None:
            with self._lock:
                self._prune()
                entry = self._items.get(key)
                if entry is None:
                    entry = self._items[key] = _Entry(self._factory())
                    if isinstance(key, asyncio.AbstractEventLoop):
                        self._close_at_shutdown(key, entry)
        return entry.item

    def pop_current(self) -> T | None:
        """Remove and return the current loop's object, if it has one (not closed then)."""
        with self._lock:
            entry = self._items.pop(_loop_key(), None)
        if entry is None:
            return None
        entry.forget()
        return entry.item

    def open_elsewhere(self) -> bool:
        """Whether objects remain on loops that are still open (after forgetting closed ones)."""
        with self._lock:
            self._prune()
            return bool(self._items)

    def _prune(self) -> None:
        for key in [k for k in self._items if _closed(k)]:
            self._items.pop(key).forget()  # closed without its shutdown: nothing to close on

    def _close_at_shutdown(self, loop: asyncio.AbstractEventLoop, entry: _Entry[T]) -> None:
        """Start ``entry``'s closer on the running ``loop``: an async generator, which the
        loop's shutdown closes (its first step, up to its ``yield``, awaits nothing)."""
        closer = self._closer(loop, entry)
        try:
            closer.__anext__().__await__().send(None)
        except StopIteration:
            entry.closer = closer  # (held here: the loop keeps its generators weakly)

    async def _closer(
        self, loop: asyncio.AbstractEventLoop, entry: _Entry[T]
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not entry.forgotten:  # the loop shuts down (or this PerLoop was collected)
                with self._lock:
                    if self._items.get(loop) is entry:
                        del self._items[loop]
                entry.closer = None
                await self._closed_now(entry.item)

    async def _closed_now(self, item: T) -> None:
        try:
            await asyncio.wait_for(self._close(item), _CLOSE_WAIT_S)
        except Exception as exc:  # (a close at shutdown has nobody to raise to)
            logger.warning("closing %r at its event loop's shutdown failed: %r", item, exc)
