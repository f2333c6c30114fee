"""Reading what a provider's response headers say about waiting and limits.

Every parser here takes any string and returns a finite, non-negative number of seconds or
``None``; none of them raises, whatever a server sends.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import sys
import time
from collections.abc import Mapping

__all__ = [
    "limit_count",
    "limit_reset_seconds",
    "parse_duration",
    "rate_limit_headers",
    "rate_limit_reset_seconds",
    "retry_after_seconds",
    "server_wait_hint",
]

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_LIMIT_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")
# a wait written past a float's range ("1e400", 400 digits): longer than any deadline, as a
# huge finite one is (not "no wait said", which would retry on backoff against it)
_LONGEST_WAIT_S = sys.float_info.max


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``retry-after-ms`` (OpenAI, Azure) wins over ``Retry-After``, which may hold seconds or an
    HTTP-date (RFC 9110). ``now`` is the wall-clock time used for dates (default: the system's).
    Unparseable or negative values give ``None``; a date in the past gives ``0.0``; a
    number past a float's range (``1e400``), or a date whose year is past 9999 (the rest of
    it a real date), the largest float, a wait longer than any deadline.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _number(lowered.get("retry-after-ms"), overflow=_LONGEST_WAIT_S)
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw, overflow=_LONGEST_WAIT_S)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):  # a year past C's long
        return _LONGEST_WAIT_S if _past_last_year(raw) else None
    if when.tzinfo is None:  # asctime's form (and "-0000"): an HTTP-date is always GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _past_last_year(raw: str) -> bool:
    """Whether ``raw`` is an HTTP-date but for its year, past the last one a date holds
    (9999): a moment after any deadline. (A day or time that no date has is garbage.)"""
    try:
        parts = email.utils.parsedate_tz(raw.strip())
        if parts is None or parts[0] <= datetime.MAXYEAR:
            return False
        datetime.datetime(2000, *parts[1:6])  # (a leap year's calendar: 29 Feb is a day)
    except (TypeError, ValueError, IndexError, OverflowError):
        return False
    return True


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of a response, lower-cased."""
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ratelimit-")}


def _number(raw: str | None, *, overflow: float | None = None) -> float | None:
    """A finite number >= 0 written in ASCII (``float``'s syntax, without ``_``), else None;
    ``overflow``: what a number past a float's range (``1e400``, not the word ``inf``)
    reads as (None unless given)."""
    if raw is None or not raw.isascii() or "_" in raw:  # float() takes "1_0" and "١٢"
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    if value == math.inf and any(c.isdigit() for c in raw):  # digits, not "inf": overflow
        return overflow
    if not math.isfinite(value) or value < 0:
        return None
    return value


def parse_duration(text: str) -> float | None:
    """Seconds in a duration such as ``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"`` or ``"2.5"``.

    This is the Go-style format of OpenAI's ``x-ratelimit-reset-*`` headers; a bare number is
    seconds (one past a float's range, ``1e999``: the largest float, a wait longer than any
    deadline, as :func:`retry_after_seconds` reads it). Anything else gives ``None``.
    """
    cleaned = text.strip()
    plain = _number(cleaned, overflow=_LONGEST_WAIT_S)
    if plain is not None:
        return plain
    if not cleaned or len(cleaned) > 64:
        return None
    total, position = 0.0, 0
    for match in _DURATION_PART.finditer(cleaned):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(cleaned) or not math.isfinite(total):
        return None
    return total


_RFC_3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)


def _instant(text: str) -> float | None:
    """The POSIX time of an RFC 3339 date-time (``2027-01-15T08:00:00.5Z``, any offset);
    None for anything else (a time without an offset names no instant)."""
    match = _RFC_3339.match(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.group(1, 2, 3, 4, 5, 6))
    offset = datetime.timedelta(0)
    if match.group(9) is not None:
        offset = datetime.timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        if match.group(9) == "-":
            offset = -offset
    try:
        zone = datetime.timezone(offset)
        when = datetime.datetime(year, month, day, hour, minute, min(second, 59), tzinfo=zone)
    except ValueError:  # a month 13, an offset of a day or more ...
        return None
    return when.timestamp() + float(match.group(7) or 0.0)


def _reset_of(lowered: Mapping[str, str], kind: str, now: float | None) -> float | None:
    """Seconds until limit ``kind`` resets: OpenAI's ``x-ratelimit-reset-{kind}`` (a
    duration), else Anthropic's ``anthropic-ratelimit-{kind}-reset`` (an RFC 3339 instant)."""
    raw = lowered.get(f"x-ratelimit-reset-{kind}")
    if raw is not None:
        return parse_duration(raw)
    raw = lowered.get(f"anthropic-ratelimit-{kind}-reset")
    instant = _instant(raw) if raw is not None else None
    if instant is None:
        return None
    return max(0.0, instant - (time.time() if now is None else now))


def limit_reset_seconds(
    headers: Mapping[str, str], kind: str, *, now: float | None = None
) -> float | None:
    """Seconds until rate limit ``kind`` (``requests``, ``tokens``, ``input-tokens`` or
    ``output-tokens``) resets: OpenAI's ``x-ratelimit-reset-{kind}`` (a duration), else
    Anthropic's ``anthropic-ratelimit-{kind}-reset`` (an RFC 3339 instant, read against
    ``now``, the wall-clock time: the system's by default); None when neither says."""
    return _reset_of({k.lower(): v for k, v in headers.items()}, kind, now)


def _count_of(lowered: Mapping[str, str], field: str, kind: str) -> float | None:
    raw = lowered.get(f"x-ratelimit-{field}-{kind}")
    if raw is None:
        raw = lowered.get(f"anthropic-ratelimit-{kind}-{field}")
    return _number(raw)


def _remaining_of(lowered: Mapping[str, str], kind: str) -> float | None:
    return _count_of(lowered, "remaining", kind)


def limit_count(headers: Mapping[str, str], field: str, kind: str) -> float | None:
    """A rate limit's ``field`` (``limit`` or ``remaining``) of ``kind`` (``requests``,
    ``tokens``, ``input-tokens`` or ``output-tokens``): OpenAI's ``x-ratelimit-{field}-{kind}``,
    else Anthropic's ``anthropic-ratelimit-{kind}-{field}``; None unless it is a finite
    number >= 0 written in ASCII digits."""
    return _count_of({k.lower(): v for k, v in headers.items()}, field, kind)


def rate_limit_reset_seconds(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """Seconds until an exhausted rate limit resets, from OpenAI's ``x-ratelimit-reset-*``
    (durations) or Anthropic's ``anthropic-ratelimit-*-reset`` (RFC 3339 instants, read
    against ``now``, the wall-clock time: the system's by default).

    Limits whose remaining count (``x-ratelimit-remaining-*``,
    ``anthropic-ratelimit-*-remaining``) is 0 count; when no remaining counts are given,
    every reset counts. The longest applicable reset is returned (all must have reset).
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    resets: dict[str, float] = {}
    for kind in _LIMIT_KINDS:
        seconds = _reset_of(lowered, kind, now)
        if seconds is not None:
            resets[kind] = seconds
    remaining = {kind: _remaining_of(lowered, kind) for kind in resets}
    if any(left is not None for left in remaining.values()):
        waits = [resets[k] for k, left in remaining.items() if left is not None and left < 1]
    else:
        waits = list(resets.values())
    return max(waits) if waits else None


def server_wait_hint(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """How long the server asked us to wait: Retry-After first, else the rate-limit reset."""
    explicit = retry_after_seconds(headers, now=now)
    return explicit if explicit is not None else rate_limit_reset_seconds(headers, now=now)
