"""A rolling window's 100 % alert at a refusal (the settled spend alone leaves no room for a
call) fires once, and again when a call is refused once the spend has fallen back under what
it was then: it fired at every refusal (7 alerts for 7 refused calls), the rolling window
re-arming it at once because its spend was under the limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk.budget.memory import BudgetBackend, HoldArgs, MemoryBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.store import RedisStore

SPEC = CounterSpec("rolling-alerts", 1000, "rolling", 60.0, (1.0,), "global", 0)
HOLD: HoldArgs = {"base": 600, "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 30.0}


def _refusals_alerted(backend: BudgetBackend, tag: str) -> list[bool]:
    """Spend 600 of 1,000, then three calls of 600 refused: which were the 100 % alert."""
    assert backend.reserve(f"{tag}-spent", [SPEC], **HOLD).allowed
    assert backend.settle(f"{tag}-spent", [SPEC], actual=600, ttl=60.0).applied
    found = []
    for n in range(3):
        result = backend.reserve(f"{tag}-refused-{n}", [SPEC], **HOLD)
        assert not result.allowed
        found.append(result.alerted)
    return found


def _check(backend: BudgetBackend, later: Callable[[], None]) -> None:
    assert _refusals_alerted(backend, "first") == [True, False, False]
    later()  # (a minute on: the spend left the window)
    assert _refusals_alerted(backend, "again") == [True, False, False]


def test_a_rolling_windows_refusal_alert_fires_once_in_memory() -> None:
    now = [1_000_000.0]
    backend = MemoryBudgetBackend(clock=lambda: now[0])
    _check(backend, lambda: now.__setitem__(0, now[0] + 61.0))


@pytest.mark.redis
def test_a_rolling_windows_refusal_alert_fires_once_in_redis(
    redis_url: str, redis_prefix: str
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    backend = RedisBudgetBackend(store, name="rolling-alerts")

    def later() -> None:
        backend.clock_offset += 61.0

    try:
        _check(backend, later)
    finally:
        store.close()
