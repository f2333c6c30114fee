"""A deadline watchdog for blocking sockets: one daemon thread for the whole process.

httpx's sync timeouts bound each socket operation, not a whole response: a server that sends
a byte just before each read timeout can hold a call far past its deadline. The watchdog closes
that gap. A sync call registers its socket with its deadline; if the call is still reading when
the deadline comes, the watchdog shuts the socket down, the blocked read returns at once, and
the provider reports a timeout. Registering and cancelling cost a heap push and a dict update
(amortised: cancelled entries are swept out of the heap once they are most of it).

A call run under an :class:`~._abort.Abort` (a sync hedge race's leg) has the sockets it is
reading shut down when it is aborted, not at its deadline; a watch already cancelled (its
socket back in the pool, perhaps serving another call) is never touched.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable

from ._abort import NOTHING_TO_FORGET, when_aborted

__all__ = ["watchdog"]


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._sockets: dict[int, socket.socket] = {}
        self._forgets: dict[int, Callable[[], None]] = {}  # (watches under a hedge's abort)
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, deadline: float) -> int:
        """Shut ``sock`` down at ``deadline`` (monotonic) unless :meth:`cancel` comes first."""
        token = next(self._ids)
        with self._cond:
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
        forget = when_aborted(self._shut_now, token)
        if forget is not NOTHING_TO_FORGET:
            with self._cond:
                self._forgets[token] = forget
        return token

    def _shut_now(self, token: int) -> None:
        """Shut a watched socket down now (nothing when its watch was cancelled)."""
        with self._cond:
            sock = self._sockets.pop(token, None)
            self._forgets.pop(token, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self, token: int) -> None:
        """Forget a socket whose call finished in time. A cancelled watch leaves its heap
        entry behind until its deadline, so the heap is rebuilt from the live watches once
        cancelled ones make up most of it (amortised O(1) a call; it held one entry per call
        of the last deadline's length). Under a hedge's abort, the watch is taken off it too:
        a later abort of a call whose read had ended counted it as a wait it stopped."""
        with self._cond:
            self._sockets.pop(token, None)
            forget = self._forgets.pop(token, None)
            if len(self._heap) > 2 * len(self._sockets) + 64:
                self._heap = [entry for entry in self._heap if entry[1] in self._sockets]
                heapq.heapify(self._heap)
        if forget is not None:
            forget()

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
                if delay > 0:  # (a call with no deadline, math.inf: waits its longest)
                    self._cond.wait(min(delay, threading.TIMEOUT_MAX))
                    continue
                _, token = heapq.heappop(self._heap)
                due.append(self._sockets.pop(token))
            for sock in due:
                with contextlib.suppress(OSError):  # already closed: nothing to interrupt
                    sock.shutdown(socket.SHUT_RDWR)


watchdog = _Watchdog()
