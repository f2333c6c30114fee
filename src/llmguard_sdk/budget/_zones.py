"""Budget windows on a local calendar: a :class:`~llmguard_sdk.budget.Budget`'s ``tz`` (an
IANA name) puts the edges of its ``day`` and ``month`` windows at local midnight.

A local day is 23 or 25 hours long across a daylight-saving change. A window starts at the
first instant whose local date is its own (or later): where a change skips local midnight
(a zone that springs forward at 00:00), the day starts at the change; where the clock falls
back across midnight, the date read again belongs to the window already begun, so a window
never starts twice. A window's id is its start (epoch seconds); UTC windows keep their
indexes (:func:`~llmguard_sdk.budget.policy.window_bounds`).

Redis has no time zone database: each script is given the edges of the window the process's
clock is in and of the windows on either side of it (:func:`edges`), and picks the one
Redis ``TIME`` is in (clocks a whole window apart get the nearest of the three).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import zoneinfo

from ..errors import ConfigurationError

__all__ = ["UTC", "ZONED_WINDOWS", "edges", "key_part", "local_window", "zone"]

UTC = "UTC"
"""The default ``tz``: the windows' UTC boundaries, computed without a time zone database."""
ZONED_WINDOWS = ("day", "month")
"""The windows a ``tz`` moves (a minute, an hour and a rolling window are UTC's)."""
_CACHED: dict[tuple[str, str], tuple[int, int, tuple[int, int, int, int]]] = {}
"""Per (window, tz) the window last asked about: its start, end and edges."""


@functools.lru_cache(maxsize=256)
def zone(name: str) -> zoneinfo.ZoneInfo:
    """The time zone ``name`` (an IANA name); a :class:`~llmguard_sdk.errors.ConfigurationError`
    naming it when it is not one, saying to ``pip install tzdata`` where this system has no
    time zone database at all (Windows, slim containers)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    if not zoneinfo.available_timezones():
        raise ConfigurationError(
            f"time zone {name!r} cannot be read: this system has no time zone database "
            "(pip install tzdata)"
        ) from None
    raise ConfigurationError(
        f"unknown time zone {name!r}: tz= takes an IANA name such as 'America/New_York'"
    ) from None


def key_part(name: str) -> str:
    """``name`` as a part of a counter's key (letters, digits, ``_``, ``-``, ``.``)."""
    return "".join(c if c.isalnum() or c in "_-" else "." for c in name)


def _first(window: str, day: dt.date) -> dt.date:
    """The first date of the window that holds ``day``."""
    return day if window == "day" else day.replace(day=1)


def _after(window: str, first: dt.date) -> dt.date:
    """The first date of the window after the one that starts on ``first``."""
    if window == "day":
        return first + dt.timedelta(days=1)
    return dt.date(first.year + first.month // 12, first.month % 12 + 1, 1)


def _before(window: str, first: dt.date) -> dt.date:
    """The first date of the window before the one that starts on ``first``."""
    return _first(window, first - dt.timedelta(days=1))


def _local_date(tz: zoneinfo.ZoneInfo, at: int) -> dt.date:
    return dt.datetime.fromtimestamp(at, tz).date()


def _start(tz: zoneinfo.ZoneInfo, day: dt.date) -> int:
    """The first instant (epoch seconds) whose local date is ``day`` or later: local
    midnight (its first occurrence), or the change that skips it."""
    wall = dt.datetime(day.year, day.month, day.day, tzinfo=tz)
    early, late = sorted((int(wall.timestamp()), int(wall.replace(fold=1).timestamp())))
    if _local_date(tz, early) >= day:
        return early
    # midnight is skipped: the change lies in (early, late], at a whole second
    while late - early > 1:
        middle = (early + late) // 2
        if _local_date(tz, middle) >= day:
            late = middle
        else:
            early = middle
    return late


def local_window(window: str, name: str, now: float) -> tuple[int, int]:
    """(start, end) in epoch seconds of the ``day`` or ``month`` window of time zone
    ``name`` that holds ``now``."""
    found = _window(window, name, now)
    return found[0], found[1]


def edges(window: str, name: str, now: float) -> tuple[int, int, int, int]:
    """The starts of the window before the one that holds ``now``, of that one and of the
    next, and the next one's end: what a Redis script picks its window from."""
    return _window(window, name, now)[2]


def _window(window: str, name: str, now: float) -> tuple[int, int, tuple[int, int, int, int]]:
    cached = _CACHED.get((window, name))
    if cached is not None and cached[0] <= now < cached[1]:
        return cached
    tz = zone(name)
    at = math.floor(now)
    first = _first(window, _local_date(tz, at))
    start, following = _start(tz, first), _after(window, first)
    end = _start(tz, following)
    while end <= at:  # (a date read again after the clock fell back across midnight)
        first, start, following = following, end, _after(window, following)
        end = _start(tz, following)
    later = _start(tz, _after(window, following))
    found = start, end, (_start(tz, _before(window, first)), start, end, later)
    _CACHED[(window, name)] = found
    return found
