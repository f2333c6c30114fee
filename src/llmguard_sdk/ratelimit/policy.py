"""Rate-limit maths: the generic cell rate algorithm (GCRA) with a cost per call.

One state per key, a *theoretical arrival time* (TAT), whatever the traffic: a limit of
``limit`` units per ``period`` seconds emits one unit every ``period / limit`` seconds and lets
a burst of up to ``limit`` units through. A call costing ``n`` units moves the TAT forward by
``n`` emission intervals; it fits when the new TAT is at most one ``period`` ahead of now.
There are no window boundaries, so no double bursts at a minute's edge.

Requests and tokens are two limits of one key; a call reserves both or neither. Tokens are
reserved before the call (estimated input plus the output limit) and settled afterwards to
what the call really used (:func:`settle`: a refund moves the TAT back, a debit forward).

Waiting is scheduling: a call that may wait ``max_wait`` seconds takes the next free slot even
when it lies in the future, and is told to wait until then. Slots are handed out in arrival
order, so waiting calls are served first-in first-out whatever their size, and the wait bound
is the queue bound. A ``batch`` call leaves ``batch_headroom`` of each period to interactive
calls: it only gets a slot that keeps that share free. Providers' own counters correct the
state (:func:`learn`): fewer remaining units than ours, or a 429, move the TATs forward.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigurationError

__all__ = ["Grant", "Priority", "RateLimit", "learn", "reserve", "settle"]


@dataclass(frozen=True)
class RateLimit:
    """Limits of one route (or tenant): requests and tokens per minute, either optional.

    Args:
        rpm: requests per minute.
        tpm: tokens (input plus output) per minute.
        period: the period the limits are stated for, in seconds (60).
        reserve_output_tokens: output tokens reserved for a call that sets no ``max_tokens``
            (settled to the real count afterwards).
        max_wait: seconds a call may wait for a slot (within its deadline); 0 refuses at once.
        batch_headroom: share of each period that ``batch`` calls leave to interactive ones.
    """

    rpm: float | None = None
    tpm: float | None = None
    period: float = 60.0
    reserve_output_tokens: int = 1024
    max_wait: float = 0.0
    batch_headroom: float = 0.2

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not (0 < value < math.inf):
                raise ConfigurationError(f"RateLimit.{name} must be a positive number")
        if not (0 < self.period < math.inf):
            raise ConfigurationError("RateLimit.period must be a positive number of seconds")
        if self.rpm is None and self.tpm is None:
            raise ConfigurationError("a RateLimit needs rpm, tpm or both")
        if not (0 <= self.max_wait < math.inf) or not (0 <= self.batch_headroom < 1):
            raise ConfigurationError("max_wait must be >= 0 and batch_headroom in [0, 1)")


@dataclass(frozen=True)
class Grant:
    """The answer to a reservation.

    ``allowed`` with ``wait`` seconds to wait before sending (0: now); or refused, with
    ``retry_after`` seconds until the call would fit.
    """

    allowed: bool
    retry_after: float = 0.0
    wait: float = 0.0


def _interval(limit: float, period: float) -> float:
    return period / limit


def _fits(
    tat: float, now: float, cost: float, interval: float, capacity: float
) -> tuple[float, float]:
    """(new TAT, seconds over) for ``cost`` units, when the call may use ``capacity`` seconds
    of the period ahead."""
    new_tat = max(tat, now) + cost * interval
    return new_tat, new_tat - now - capacity


Priority = Literal["interactive", "batch"]


def reserve(
    tats: tuple[float, float],
    now: float,
    limit: RateLimit,
    *,
    requests: float = 1.0,
    tokens: float = 0.0,
    priority: Priority = "interactive",
    max_wait: float | None = None,
) -> tuple[Grant, tuple[float, float]]:
    """Reserve ``requests`` and ``tokens`` on the (request TAT, token TAT) pair, all or none.

    The call may wait up to ``max_wait`` (at most the limit's own ``max_wait``) for a slot.
    A call needing more tokens than one period allows can never fit: it is refused with
    ``retry_after`` infinity.
    """
    request_tat, token_tat = tats
    share = 1.0 - (limit.batch_headroom if priority == "batch" else 0.0)
    capacity = limit.period * share
    patience = limit.max_wait if max_wait is None else max(0.0, min(max_wait, limit.max_wait))
    over = 0.0
    new_request_tat, new_token_tat = request_tat, token_tat
    if limit.rpm is not None:
        new_request_tat, late = _fits(
            request_tat, now, requests, _interval(limit.rpm, limit.period), capacity
        )
        over = max(over, late)
    if limit.tpm is not None:
        if tokens > limit.tpm * share:
            return Grant(False, math.inf), tats
        new_token_tat, late = _fits(
            token_tat, now, tokens, _interval(limit.tpm, limit.period), capacity
        )
        over = max(over, late)
    if over > patience + 1e-9:
        return Grant(False, over), tats
    return Grant(True, wait=max(0.0, over)), (new_request_tat, new_token_tat)


def learn(
    tats: tuple[float, float],
    now: float,
    limit: RateLimit,
    *,
    remaining_requests: float | None = None,
    remaining_tokens: float | None = None,
    pause: float | None = None,
) -> tuple[float, float]:
    """Bring the state down to what the provider says remains (never up).

    ``remaining_*`` come from ``x-ratelimit-remaining-*``; ``pause`` is a 429's wait: no
    room at all until it has passed.
    """
    request_tat, token_tat = tats
    if limit.rpm is not None:
        interval = _interval(limit.rpm, limit.period)
        if remaining_requests is not None:
            request_tat = max(request_tat, now + limit.period - remaining_requests * interval)
        if pause is not None:
            request_tat = max(request_tat, now + limit.period + pause)
    if limit.tpm is not None:
        interval = _interval(limit.tpm, limit.period)
        if remaining_tokens is not None:
            token_tat = max(token_tat, now + limit.period - remaining_tokens * interval)
        if pause is not None:
            token_tat = max(token_tat, now + limit.period + pause)
    return request_tat, token_tat


def settle(
    tats: tuple[float, float], now: float, limit: RateLimit, *, token_delta: float
) -> tuple[float, float]:
    """Correct a reservation by ``token_delta`` tokens (negative: a refund)."""
    if limit.tpm is None or token_delta == 0:
        return tats
    request_tat, token_tat = tats
    token_tat += token_delta * _interval(limit.tpm, limit.period)
    return request_tat, max(token_tat, now) if token_delta < 0 else token_tat
