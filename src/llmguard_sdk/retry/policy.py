"""Backoff maths and retry decisions: pure functions of (policy, attempt, error, time left).

Nothing here sleeps or does I/O; the Guard and the standalone :func:`~llmguard_sdk.retry.retry`
ask :func:`decide` what to do and do it.

Jitter strategies (AWS Architecture Blog, "Exponential Backoff And Jitter"), for the ``n``-th
retry (``n`` from 0) with ``t = min(cap, base * 2**n)``:

========================= ===================================================
``"full"`` (default)      ``uniform(0, t)``
``"equal"``               ``t / 2 + uniform(0, t / 2)``
``"decorrelated"``        ``min(cap, uniform(base, 3 * previous_wait))``
``"none"``                ``t`` (plain exponential: clients retry in waves)
========================= ===================================================

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigurationError, ProviderError, StreamInterruptedError

__all__ = ["MIN_ATTEMPT_SECONDS", "Decision", "Jitter", "RetryPolicy", "backoff", "decide"]

Jitter = Literal["full", "equal", "decorrelated", "none"]
"""The backoff strategies :class:`RetryPolicy` can use."""

_JITTERS = ("full", "equal", "decorrelated", "none")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")  # RFC 9110 token
_MAX_EXPONENT = 1000  # 2.0 ** 1024 overflows; any cap is reached long before this

MIN_ATTEMPT_SECONDS = 0.05
"""Time an attempt needs at least: a retry whose wait leaves less is not taken."""


def backoff(
    jitter: Jitter,
    retry: int,
    *,
    base: float,
    cap: float,
    previous: float = 0.0,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``retry`` (0 for the first retry).

    ``previous`` is the wait before the previous retry (decorrelated jitter grows from it;
    ``0`` means there was none). The result always lies in ``[0, cap]``.
    """
    draw = (rng or random).uniform
    ceiling = min(cap, base * 2.0 ** min(retry, _MAX_EXPONENT))
    if jitter == "full":
        return draw(0.0, ceiling)
    if jitter == "equal":
        return ceiling / 2 + draw(0.0, ceiling / 2)
    if jitter == "decorrelated":
        upper = max(base, 3.0 * (previous or base))
        return min(cap, draw(base, upper))
    if jitter == "none":
        return ceiling
    raise ConfigurationError(f"unknown jitter {jitter!r}; choose one of {_JITTERS}")


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried. Safe by default: bounded attempts *and* bounded total time.

    Args:
        attempts: attempts per route, the first one included (1 turns retries off).
        base: the first backoff ceiling, in seconds.
        cap: the longest wait; a server hint beyond it hands the call to the next route.
        timeout: total seconds for all attempts when used standalone (a Guard call uses its
            own ``timeout``).
        jitter: ``"full"`` (default), ``"equal"``, ``"decorrelated"`` or ``"none"``.
        idempotency_header: header carrying a per-call key, sent unchanged on every attempt
            so the provider can drop duplicates. ``None`` sends none; then a call is retried
            only when the failed attempt provably never reached the provider.

    .. versionadded:: 0.1.0
    """

    attempts: int = 3
    base: float = 0.5
    cap: float = 8.0
    timeout: float = 60.0
    jitter: Jitter = "full"
    idempotency_header: str | None = "Idempotency-Key"

    def __post_init__(self) -> None:
        attempts = self.attempts
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            raise ConfigurationError("RetryPolicy.attempts must be an integer >= 1")
        for name in ("base", "cap", "timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) and 0 < value < math.inf
            ):
                raise ConfigurationError(f"RetryPolicy.{name} must be a positive number")
        if self.cap < self.base:
            raise ConfigurationError("RetryPolicy.cap must be at least base")
        if self.jitter not in _JITTERS:
            raise ConfigurationError(f"RetryPolicy.jitter must be one of {_JITTERS}")
        header = self.idempotency_header
        if header is not None and not (isinstance(header, str) and _HEADER_NAME.match(header)):
            raise ConfigurationError(
                f"RetryPolicy.idempotency_header must be a header name or None, got {header!r}"
            )

    @property
    def idempotent(self) -> bool:
        """Whether calls carry an idempotency key (so any retryable failure may be retried)."""
        return self.idempotency_header is not None


Reason = Literal[
    "retry",
    "not-retryable",
    "stream-delivered",
    "not-idempotent",
    "attempts-exhausted",
    "hint-beyond-cap",
    "deadline",
    "budget-exhausted",
]


@dataclass(frozen=True)
class Decision:
    """What to do after a failed attempt: ``retry`` after ``wait`` seconds, or stop.

    ``reason`` says why (``"retry"``, ``"not-retryable"``, ``"attempts-exhausted"``,
    ``"hint-beyond-cap"``, ``"deadline"``, ``"not-idempotent"``, ``"stream-delivered"``,
    ``"budget-exhausted"``). ``hinted`` is true when the wait came from the server.
    """

    retry: bool
    wait: float
    reason: Reason
    hinted: bool = False


def decide(
    policy: RetryPolicy,
    *,
    attempt: int,
    retryable: bool,
    hint: float | None,
    remaining: float,
    previous_wait: float = 0.0,
    idempotent: bool = True,
    request_sent: bool = True,
    rng: random.Random | None = None,
) -> Decision:
    """Decide after failed attempt number ``attempt`` (1-based), ``remaining`` seconds left.

    A server ``hint`` within the cap replaces the computed wait; one beyond the cap or the
    remaining time means: do not sleep, hand over at once. A wait is taken only when the next
    attempt still has :data:`MIN_ATTEMPT_SECONDS` after it, so a retry never turns the real
    error into a timeout. A hint that is not a finite, non-negative number is ignored.
    """
    if hint is not None and not (0.0 <= hint < math.inf):
        hint = None
    if not retryable:
        return Decision(False, 0.0, "not-retryable")
    if not idempotent and request_sent:
        return Decision(False, 0.0, "not-idempotent")
    if attempt >= policy.attempts:
        return Decision(False, 0.0, "attempts-exhausted")
    if hint is not None:
        if hint > policy.cap:
            return Decision(False, hint, "hint-beyond-cap", hinted=True)
        if not hint + MIN_ATTEMPT_SECONDS <= remaining:  # (a NaN left: no time)
            return Decision(False, hint, "deadline", hinted=True)
        return Decision(True, hint, "retry", hinted=True)
    wait = backoff(
        policy.jitter,
        attempt - 1,
        base=policy.base,
        cap=policy.cap,
        previous=previous_wait,
        rng=rng,
    )
    if not wait + MIN_ATTEMPT_SECONDS <= remaining:
        return Decision(False, wait, "deadline")
    return Decision(True, wait, "retry")


def why_not(decision: Decision, policy: RetryPolicy, *, attempt: int, remaining: float) -> str:
    """Why a failure after attempt number ``attempt`` was not retried (``remaining``: the
    seconds then left of the timeout), in words for a note on the error; empty when the
    failure is not one to retry (nothing to explain)."""
    wait, left = decision.wait, max(0.0, remaining)
    asked = f"the server asked to wait {wait:g} s (Retry-After)"
    if decision.reason == "hint-beyond-cap":
        return f"not retried: {asked}, more than RetryPolicy.cap={policy.cap:g} s"
    if decision.reason == "deadline" and decision.hinted:
        return f"not retried: {asked}, more than the {left:.2f} s left of the timeout"
    if decision.reason == "deadline" and left <= 0:
        return "not retried: no time is left of the timeout"
    if decision.reason == "deadline":
        return (
            f"not retried: a backoff wait of {wait:.2f} s would leave no time for another "
            f"attempt in the {left:.2f} s left of the timeout"
        )
    if decision.reason == "attempts-exhausted":
        return f"gave up after {attempt} attempts (RetryPolicy.attempts={policy.attempts})"
    if decision.reason == "budget-exhausted":
        return "not retried: the retry budget is spent (RetryBudgetPolicy: too many retries lately)"
    return ""


def decide_for_error(
    policy: RetryPolicy,
    error: ProviderError,
    *,
    attempt: int,
    remaining: float,
    previous_wait: float = 0.0,
    delivered: bool = False,
    rng: random.Random | None = None,
) -> Decision:
    """:func:`decide` for a provider error raised inside a Guard call."""
    if delivered or isinstance(error, StreamInterruptedError):
        return Decision(False, 0.0, "stream-delivered")
    return decide(
        policy,
        attempt=attempt,
        retryable=error.retryable,
        hint=error.retry_after,
        remaining=remaining,
        previous_wait=previous_wait,
        idempotent=policy.idempotent,
        request_sent=error.request_sent,
        rng=rng,
    )
