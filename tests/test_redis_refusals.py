"""Redis that answers "this command failed" (a key of another kind where a stage keeps its
state, a script error) is no Redis outage: it paused every stage of the store, logged as
"Redis unavailable", again at each call, while Redis served everything else."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.ratelimit.redis import RedisRateLimiter
from llmguard_sdk.store import RedisStore

SPEC = CounterSpec("tenant.acme", nano(1.0), "day", 3600.0, (), "tenant", 0)
HOLD: dict[str, Any] = {"base": nano(0.1), "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}


def test_a_key_of_another_kind_fails_that_decision_and_pauses_nothing(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    budgets = RedisBudgetBackend(store, name="refused")
    client = redis.Redis.from_url(redis_url)
    client.set(budgets._keys([SPEC])[0], "another application's value", ex=60)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        first = budgets.reserve("r1", [SPEC], **HOLD)
        second = budgets.reserve("r2", [SPEC], **HOLD)
    assert first.unavailable
    assert second.unavailable
    assert store.health.failures == 0  # Redis answered: no pause
    assert second.retry_after == 0.0
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1  # once, not at each call
    assert "refused" in logged[0]
    assert "WRONGTYPE" in logged[0]
    assert "unavailable" not in logged[0]
    # the other stages of the store go on in Redis: a limit shared with another process
    limits = {"route": [RateLimit(rpm=1, batch_headroom=0)]}
    assert RedisRateLimiter(store, limits).reserve("route").allowed
    other = RedisStore(redis_url, key_prefix=redis_prefix)
    assert not RedisRateLimiter(other, limits).reserve("route").allowed  # (the one is taken)
    other.close()
    client.close()
    store.close()
