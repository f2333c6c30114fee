"""Rate-limit maths: the generic cell rate algorithm (GCRA) with a cost per call.

One state per key, a *theoretical arrival time* (TAT), whatever the traffic: a limit of
``limit`` units per ``period`` seconds emits one unit every ``period / limit`` seconds and lets
a burst of up to ``limit`` units through. A call costing ``n`` units moves the TAT forward by
``n`` emission intervals; it fits when the new TAT is at most one ``period`` ahead of now.
There are no window boundaries, so no double bursts at a minute's edge.

Requests and tokens are two limits of one key; a call reserves both or neither. Tokens are
reserved before the call (estimated input plus the output limit) and settled afterwards to
what the call really used (:func:`settle`: a refund moves the TAT back, a debit forward).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigurationError

__all__ = ["Grant", "RateLimit", "reserve", "settle"]


@dataclass(frozen=True)
class RateLimit:
    """Limits of one route (or tenant): requests and tokens per minute, either optional.

    Args:
        rpm: requests per minute.
        tpm: tokens (input plus output) per minute.
        period: the period the limits are stated for, in seconds (60).
        reserve_output_tokens: output tokens reserved for a call that sets no ``max_tokens``
            (settled to the real count afterwards).
    """

    rpm: float | None = None
    tpm: float | None = None
    period: float = 60.0
    reserve_output_tokens: int = 1024

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not (0 < value < math.inf):
                raise ConfigurationError(f"RateLimit.{name} must be a positive number")
        if not (0 < self.period < math.inf):
            raise ConfigurationError("RateLimit.period must be a positive number of seconds")
        if self.rpm is None and self.tpm is None:
            raise ConfigurationError("a RateLimit needs rpm, tpm or both")


@dataclass(frozen=True)
class Grant:
    """The answer to a reservation: ``allowed``, or ``retry_after`` seconds until it fits."""

    allowed: bool
    retry_after: float = 0.0


def _interval(limit: float, period: float) -> float:
    return period / limit


def _fits(tat: float, now: float, cost: float, limit: float, period: float) -> tuple[float, float]:
    """(new TAT, seconds over) for ``cost`` units against ``limit`` per ``period``."""
    new_tat = max(tat, now) + cost * _interval(limit, period)
    return new_tat, new_tat - now - period


def reserve(
    tats: tuple[float, float],
    now: float,
    limit: RateLimit,
    *,
    requests: float = 1.0,
    tokens: float = 0.0,
) -> tuple[Grant, tuple[float, float]]:
    """Reserve ``requests`` and ``tokens`` on the (request TAT, token TAT) pair, all or none.

    A call needing more tokens than one period allows can never fit: it is refused with
    ``retry_after`` infinity.
    """
    request_tat, token_tat = tats
    over = 0.0
    new_request_tat, new_token_tat = request_tat, token_tat
    if limit.rpm is not None:
        new_request_tat, late = _fits(request_tat, now, requests, limit.rpm, limit.period)
        over = max(over, late)
    if limit.tpm is not None:
        if tokens > limit.tpm:
            return Grant(False, math.inf), tats
        new_token_tat, late = _fits(token_tat, now, tokens, limit.tpm, limit.period)
        over = max(over, late)
    if over > 1e-9:
        return Grant(False, over), tats
    return Grant(True), (new_request_tat, new_token_tat)


def settle(
    tats: tuple[float, float], now: float, limit: RateLimit, *, token_delta: float
) -> tuple[float, float]:
    """Correct a reservation by ``token_delta`` tokens (negative: a refund)."""
    if limit.tpm is None or token_delta == 0:
        return tats
    request_tat, token_tat = tats
    token_tat += token_delta * _interval(limit.tpm, limit.period)
    return request_tat, max(token_tat, now) if token_delta < 0 else token_tat
