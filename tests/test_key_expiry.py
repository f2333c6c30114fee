"""Every key the Redis stages write expires (per-tenant state too, once idle): each path of
the budgets, rate limits, breakers, retry budget and leases is run once, then no key of the
prefix may be left without a TTL. (A breaker isolated by hand is the one key meant to stay:
until it is reset.)"""

from __future__ import annotations

import redis

from llmguard_sdk._state.steps import run
from llmguard_sdk.breaker import BreakerPolicy, RedisBreakerBackend
from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.retry import RetryBudgetPolicy
from llmguard_sdk.retry.redis import RedisRetryBudget
from llmguard_sdk.router.leases import LeaseAsk, RedisLeases
from llmguard_sdk.store import RedisStore

SPECS = [
    CounterSpec("global", nano(1.0), "day", 3600.0, (0.5, 1.0), "global", 0),
    CounterSpec("tenant.t1", nano(0.5), "month", 3600.0, (1.0,), "tenant", 0),
    CounterSpec("user.u1", nano(0.5), "rolling", 3600.0, (0.5,), "user", 0),
]
HOLD = {"per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}


def exercise(store: RedisStore) -> None:
    budgets = RedisBudgetBackend(store, name="expiry")
    assert budgets.reserve("r1", SPECS, base=nano(0.3), **HOLD).allowed
    budgets.settle("r1", SPECS, actual=nano(0.3), ttl=60.0)
    assert not budgets.reserve("r2", SPECS, base=nano(0.4), **HOLD).allowed  # refused
    budgets.reserve("r3", SPECS, base=nano(0.1), **HOLD)
    budgets.status(SPECS)
    limits = {
        "route": [
            RateLimit(rpm=100, tpm=10_000, per_tenant=True),
            RateLimit(concurrency=1, max_queue=3, max_wait=5.0),
        ],
        "split": [RateLimit(input_tpm=1000, output_tpm=1000, per_tenant=True)],
    }
    limiter = RedisRateLimiter(store, limits)
    assert limiter.reserve("route", tokens=100, tenant="t1", lease="c1").allowed
    limiter.reserve("route", tokens=100, tenant="t2", lease="c2")  # waits for the slot
    limiter.learn("route", remaining_requests=5, remaining_tokens=100, pause=2.0)
    limiter.settle("route", tenant="t1", token_delta=-50, lease="c1")
    limiter.release("route", tenant="t2", lease="c2")
    limiter.reserve("split", input_tokens=10, output_tokens=10, tenant="t3", lease="x")
    limiter.settle("split", tenant="t3", input_delta=5, output_delta=-5, lease="x")
    policy = BreakerPolicy(minimum_calls=2, window=10, failure_rate=0.5, half_open_permits=2)
    breakers = RedisBreakerBackend(store, policy)
    for outcome in ("ok", "fail", "fail"):
        breakers.record("a", outcome)
    breakers.clock_offset += policy.open_seconds + 1
    breakers.acquire("a")
    breakers.acquire("a")
    breakers.release("a")
    breakers.record("a", "ok")
    breakers.record("b", "rate_limited", 3.0)
    breakers.end_open_wait("b")
    RedisRetryBudget(store, RetryBudgetPolicy(0.1, 1.0, 10.0)).try_spend("route")
    run(RedisLeases(store).take_steps(LeaseAsk("g", ["a", "b"], None, 0, "call", 30.0)))


def test_every_key_the_stages_write_expires(redis_url: str, redis_prefix: str) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    exercise(store)
    store.close()
    client = redis.Redis.from_url(redis_url)
    keys = [key.decode() for key in client.scan_iter(match=f"{redis_prefix}:*")]
    kinds = {key.split(":")[1] for key in keys}
    assert kinds >= {"budget", "rl", "cb", "rb", "rt"}  # each stage wrote
    assert [key for key in keys if client.ttl(key) == -1] == []
    client.close()
