"""One async client per event loop.

Async connection pools (httpx, redis.asyncio) belong to the event loop that opened them:
reusing one from another loop (a second ``asyncio.run``, a thread with its own loop) fails.
:class:`PerLoop` hands each running loop its own object, created on first use, and forgets
the objects of loops that have closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop", "on_asyncio"]

T = TypeVar("T")
_NO_ASYNCIO_LOOP = "no-asyncio-loop"  # another async library (trio): one object for it


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


def _closed(key: object) -> bool:
    return isinstance(key, asyncio.AbstractEventLoop) and key.is_closed()


class PerLoop(Generic[T]):
    """Objects made by ``factory``, one per event loop, created under a lock: an async
    client an ``async def`` guardrail keeps (``PerLoop(httpx.AsyncClient).get()`` in the
    filter), so that it serves sync calls' filter loop (a fresh one after a filter's
    blocking code held it) and your own loop (``achat``) alike. A closed loop's object is
    forgotten (not closed: its sockets went with its loop)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._items: dict[object, T] = {}

    def get(self) -> T:
        """The current loop's object (made now if it has none)."""
        key = _loop_key()
        item = self._items.get(key)
        if item is None:
            with self._lock:
                self._prune()
                item = self._items.get(key)
                if item is None:
                    item = self._items[key] = self._factory()
        return item

    def pop_current(self) -> T | None:
        """Remove and return the current loop's object, if it has one."""
        with self._lock:
            return self._items.pop(_loop_key(), None)

    def open_elsewhere(self) -> bool:
        """Whether objects remain on loops that are still open (after forgetting closed ones)."""
        with self._lock:
            self._prune()
            return bool(self._items)

    def _prune(self) -> None:
        for key in [k for k in self._items if _closed(k)]:
            del self._items[key]  # its loop is gone, and its sockets with it
