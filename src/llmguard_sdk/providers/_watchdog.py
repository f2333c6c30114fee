"""A deadline watchdog for blocking sockets: one daemon thread for the whole process.

httpx's sync timeouts bound each socket operation, not a whole response: a server that sends
a byte just before each read timeout can hold a call far past its deadline. The watchdog closes
that gap. A sync call registers its socket with its deadline; if the call is still reading when
the deadline comes, the watchdog shuts the socket down, the blocked read returns at once, and
the provider reports a timeout. Registering and cancelling cost a heap push and a dict update
(amortised: cancelled entries are swept out of the heap once they are most of it).

A call can also be stopped before its deadline, from another thread: a sync hedge race's loser
runs in a thread of its own under an :class:`Abort` (:func:`abortable`); every socket watched
in that thread is noted on it, and :meth:`_Watchdog.abort` shuts down those still being read
(and any watched later in that thread at once), so the loser ends now instead of reading an
answer nobody will use until its deadline. A watch already cancelled (its socket back in the
pool, perhaps serving another call) is never touched.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import math
import socket
import threading
import time
from collections.abc import Iterator

__all__ = ["Abort", "abortable", "watchdog"]


class Abort:
    """A blocking call's way to be stopped from another thread (see the module docs)."""

    __slots__ = ("aborted", "tokens")

    def __init__(self) -> None:
        self.aborted = False
        self.tokens: list[int] = []  # the watches made under it (a few a call)


_CURRENT: contextvars.ContextVar[Abort | None] = contextvars.ContextVar(
    "llmguard_abort", default=None
)


@contextlib.contextmanager
def abortable(abort: Abort) -> Iterator[None]:
    """Run the block's blocking sockets under ``abort`` (this thread's, or this context's)."""
    token = _CURRENT.set(abort)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._sockets: dict[int, socket.socket] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, deadline: float) -> int:
        """Shut ``sock`` down at ``deadline`` (monotonic) unless :meth:`cancel` comes first."""
        token = next(self._ids)
        abort = _CURRENT.get()
        with self._cond:
            if abort is not None:
                if abort.aborted:  # stopped already: this read is not waited for either
                    deadline = -math.inf
                abort.tokens.append(token)
            self._sockets[token] = sock
            earliest = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="llmguard-deadline-watchdog", daemon=True
                )
                self._thread.start()
            elif earliest:
                self._cond.notify()
        return token

    def cancel(self, token: int) -> None:
        """Forget a socket whose call finished in time. A cancelled watch leaves its heap
        entry behind until its deadline, so the heap is rebuilt from the live watches once
        cancelled ones make up most of it (amortised O(1) a call; it held one entry per call
        of the last deadline's length)."""
        with self._cond:
            self._sockets.pop(token, None)
            if len(self._heap) > 2 * len(self._sockets) + 64:
                self._heap = [entry for entry in self._heap if entry[1] in self._sockets]
                heapq.heapify(self._heap)

    def abort(self, abort: Abort) -> None:
        """Shut down now the sockets still watched under ``abort``, and any watched under it
        from now on (see the module docs)."""
        with self._cond:
            abort.aborted = True
            due = [self._sockets.pop(token) for token in abort.tokens if token in self._sockets]
            abort.tokens.clear()
        for sock in due:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        while True:
            due: list[socket.socket] = []
            with self._cond:
                while self._heap and self._heap[0][1] not in self._sockets:
                    heapq.heappop(self._heap)  # cancelled
                if not self._heap:
                    self._cond.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                _, token = heapq.heappop(self._heap)
                due.append(self._sockets.pop(token))
            for sock in due:
                with contextlib.suppress(OSError):  # already closed: nothing to interrupt
                    sock.shutdown(socket.SHUT_RDWR)


watchdog = _Watchdog()
