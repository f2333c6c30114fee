"""Reading what a provider's response headers say about waiting and limits."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

__all__ = ["rate_limit_headers", "retry_after_seconds"]


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``retry-after-ms`` (OpenAI, Azure) wins over ``Retry-After``, which may hold seconds or an
    HTTP-date (RFC 9110). ``now`` is the wall-clock time used for dates (default: the system's).
    Unparseable or negative values give ``None``; a date in the past gives ``0.0``.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of a response, lower-cased."""
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ratelimit-")}


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    if value != value or value < 0 or value == float("inf"):
        return None
    return value
