"""The batches a :class:`~llmguard_sdk.providers.BatchProvider` has sent and still waits for,
so that closing it cancels them: a batch runs on at the provider (and is billed) whether or
not anybody reads its answers."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._batch_api import BatchCall

__all__ = ["InFlight"]


class InFlight:
    """The batches of a route between their sending and their end, each by its calls (the
    list a batch thread holds) with its path at the provider once it has one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._runs: dict[int, tuple[list[BatchCall], str | None]] = {}
        self.closed = False
        self._swept = False  # close() has taken the batches it cancels

    def begin(self, calls: list[BatchCall]) -> bool:
        """Note that ``calls`` are about to be sent as a batch; False once the route is
        closed (they are not sent)."""
        with self._changed:
            if self.closed:
                return False
            self._runs[id(calls)] = (calls, None)
            return True

    def created(self, calls: list[BatchCall], path: str) -> bool:
        """Note that the batch of ``calls`` is at ``path``; False when the route's close has
        already taken the batches it cancels (the caller cancels this one itself)."""
        with self._changed:
            if self._swept:
                return False
            self._runs[id(calls)] = (calls, path)
            self._changed.notify_all()
            return True

    def end(self, calls: list[BatchCall]) -> bool:
        """Forget the batch of ``calls`` (it ended, failed or was given up); whether it was
        still this route's to cancel (False: close() took it)."""
        with self._changed:
            found = self._runs.pop(id(calls), None) is not None
            self._changed.notify_all()
            return found

    def close(self, timeout: float) -> list[tuple[str, list[BatchCall]]]:
        """Close: no batch is sent from now on. Wait up to ``timeout`` for those being sent
        to be created, and return each created batch that has not ended (its path and
        calls), which the caller cancels."""
        end = time.monotonic() + timeout
        with self._changed:
            self.closed = True
            while any(path is None for _, path in self._runs.values()):
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            self._swept = True
            taken = [(path, calls) for calls, path in self._runs.values() if path is not None]
            self._runs.clear()
            return taken
