"""Repeated warnings logged once, then as a count: logs that stay readable in an incident.

``log_repeated(logger, level, key, msg, *args)`` logs the first occurrence of ``key`` at once.
Later ones within ``every`` seconds are counted, not logged; the count goes out as one line
(``... [repeated 5312 more times from 14:02:11.020 to 14:02:16.004]``) when the window ends, from a
timer (so a count is written even when the incident stops), or with the next occurrence
after it. After a quiet window the next occurrence is logged at once again. The record of a
count carries ``record.llmguard_repeats`` (``key``, ``count``, ``first``, ``last``: Unix
seconds), the first one ``count=1``.

State is one small entry per key (keys are fixed strings of the call sites: a stage, a
budget name, a route), at most ``_MAX_KEYS``; one timer per key at most.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["RepeatedLog", "log_repeated", "repeats"]

_MAX_KEYS = 512
_EVERY_S = 5.0


@dataclass
class _Entry:
    logger: logging.Logger
    level: int
    msg: str
    args: tuple[Any, ...]
    window_end: float  # monotonic
    first: float = 0.0  # wall time of the first counted occurrence
    last: float = 0.0
    count: int = 0  # counted, not yet logged
    timer: threading.Timer | None = None
    summary: bool = False  # a count line (not a first occurrence)


class RepeatedLog:
    """Logs each key once per ``every`` seconds and counts the rest (see the module docs).

    Args:
        every: seconds between two lines of one key.
        clock / wall: monotonic and Unix clocks (injected in tests).
        background: write a pending count from a timer when its window ends (else only
            with the key's next occurrence or :meth:`flush`).
    """

    def __init__(
        self,
        *,
        every: float = _EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        background: bool = True,
    ) -> None:
        if not every > 0:
            raise ValueError("every must be a positive number of seconds")
        self.every = every
        self._clock = clock
        self._wall = wall
        self._background = background
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()

    def log(self, logger: logging.Logger, level: int, key: Hashable, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` now, or count it under ``key``; True when a line was written."""
        if not logger.isEnabledFor(level):
            return False
        now, wall = self._clock(), self._wall()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (now >= entry.window_end and entry.count == 0):
                self._remember(key, _Entry(logger, level, msg, args, now + self.every))
                due = _Entry(logger, level, msg, args, now, wall, wall, 1)
            else:
                entry.msg, entry.args, entry.last = msg, args, wall
                if entry.count == 0:
                    entry.first = wall
                entry.count += 1
                if now < entry.window_end:
                    self._arm(key, entry, entry.window_end - now)
                    return False
                due = self._take(entry, now)
        _write(key, due)
        return True

    def flush(self) -> int:
        """Write every pending count now; returns how many lines were written."""
        now = self._clock()
        with self._lock:
            due = [(k, self._take(e, now)) for k, e in self._entries.items() if e.count]
        for key, entry in due:
            _write(key, entry)
        return len(due)

    def _flush_key(self, key: Hashable) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.count == 0:
                return
            due = self._take(entry, self._clock())
        _write(key, due)

    def _remember(self, key: Hashable, entry: _Entry) -> None:
        old = self._entries.pop(key, None)
        if old is not None and old.timer is not None:
            old.timer.cancel()
        while len(self._entries) >= _MAX_KEYS:  # the oldest key goes (its count is lost)
            dropped = self._entries.pop(next(iter(self._entries)))
            if dropped.timer is not None:
                dropped.timer.cancel()
        self._entries[key] = entry

    def _take(self, entry: _Entry, now: float) -> _Entry:
        """A copy of ``entry`` to write; ``entry`` starts a new window with no count."""
        due = _Entry(entry.logger, entry.level, entry.msg, entry.args, entry.window_end)
        due.first, due.last, due.count = entry.first, entry.last, entry.count
        due.summary = True
        if entry.timer is not None:
            entry.timer.cancel()  # harmless from the timer's own thread
            entry.timer = None
        entry.count = 0
        entry.window_end = now + self.every
        return due

    def _arm(self, key: Hashable, entry: _Entry, delay: float) -> None:
        if not self._background or entry.timer is not None:
            return
        timer = threading.Timer(delay, self._flush_key, (key,))
        timer.daemon = True
        timer.name = "llmguard-log-repeats"
        entry.timer = timer
        timer.start()


def _write(key: Hashable, entry: _Entry) -> None:
    repeats = {"key": str(key), "count": entry.count, "first": entry.first, "last": entry.last}
    msg, args = entry.msg, entry.args
    if entry.summary:
        msg = f"{msg} [repeated %d more times from %s to %s]"
        args = (*args, entry.count, _clock_time(entry.first), _clock_time(entry.last))
    entry.logger.log(entry.level, msg, *args, extra={"llmguard_repeats": repeats})


def _clock_time(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall % 1 * 1000):03d}"


repeats = RepeatedLog()
"""The process's :class:`RepeatedLog`, used by the SDK's own call sites."""
atexit.register(repeats.flush)  # counts still pending go out before logging shuts down


def log_repeated(logger: logging.Logger, level: int, key: Hashable, msg: str, *args: Any) -> bool:
    """Log through :data:`repeats`: once, then a count per window (see the module docs)."""
    return repeats.log(logger, level, key, msg, *args)
