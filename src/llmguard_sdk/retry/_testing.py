"""The test switch of every retry loop: waits off (and attempts capped) in tests, for
:func:`~llmguard_sdk.retry.retry`, :func:`~llmguard_sdk.retry.retry_context` and the Guard's
retry stage alike.

(Split from :mod:`llmguard_sdk.retry._api`.)
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

from ..errors import ConfigurationError
from .policy import MIN_ATTEMPT_SECONDS

__all__ = [
    "is_testing",
    "set_testing",
    "testing_attempts",
    "testing_remaining",
    "testing_wait",
    "waits_off",
]


class _Testing:
    lock = threading.Lock()
    enabled = False
    attempts: int | None = None


def set_testing(enabled: bool, *, attempts: int | None = None) -> None:
    """Turn waits off (``enabled=True``) in tests; optionally cap attempts too.

    While on, every wait of :func:`retry`, :func:`retry_context` *and* the Guard's retry stage
    is zero, so tests run fast without changing the code under test. A wait not taken does
    not count against the ``timeout`` of :func:`retry` and :func:`retry_context`, nor against
    a Guard call's (only the time really spent does), so their retries do not depend on the
    jitter's draws.
    """
    if attempts is not None and (
        not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1
    ):
        raise ConfigurationError(f"attempts must be a whole number >= 1, got {attempts!r}")
    with _Testing.lock:
        _Testing.enabled = enabled
        _Testing.attempts = attempts if enabled else None


@contextlib.contextmanager
def waits_off(*, attempts: int | None = None) -> Iterator[None]:
    """Turn waits off (and optionally cap attempts) for a block, then restore the setting.

    The switch is process-wide (it reaches code running in other threads too), as stamina's.
    """
    with _Testing.lock:
        saved = (_Testing.enabled, _Testing.attempts)
    set_testing(True, attempts=attempts)
    try:
        yield
    finally:
        with _Testing.lock:
            _Testing.enabled, _Testing.attempts = saved


def is_testing() -> bool:
    """Whether :func:`set_testing` turned waits off."""
    return _Testing.enabled


def testing_wait(wait: float) -> float:
    """``wait``, or 0 while testing mode is on."""
    return 0.0 if _Testing.enabled else wait


def testing_remaining(remaining: float) -> float:
    """The time left that a retry's wait must fit in: ``remaining`` seconds, or, while
    testing mode is on and an attempt still fits, no bound (a wait not taken cannot overrun
    the timeout: only the time really spent counts)."""
    if _Testing.enabled and remaining >= MIN_ATTEMPT_SECONDS:
        return math.inf
    return remaining


def testing_attempts(attempts: int) -> int:
    """``attempts``, capped while testing mode says so."""
    cap = _Testing.attempts
    return min(attempts, cap) if cap is not None else attempts
