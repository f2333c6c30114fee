"""Retry budgets: the pure maths, and the same contract in memory and in a real Redis."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.retry import MemoryRetryBudget, RedisRetryBudget, RetryBudgetPolicy
from llmguard_sdk.retry.budget import BudgetState, deposit, spend
from llmguard_sdk.store import RedisStore, hash_id
from tests.conftest import RawRedis, RedisTarget, redis_store

# A long window makes decay negligible over a test, so counts are time-independent.
STEADY = RetryBudgetPolicy(ratio=0.1, min_per_second=0.0, window=1e9)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_retries_are_a_share_of_requests() -> None:
    state = BudgetState()
    for _ in range(100):
        state = deposit(state, 0.0, STEADY)
    allowed = 0
    for _ in range(50):
        ok, state = spend(state, 0.0, STEADY)
        allowed += ok
    assert allowed == 10


def test_the_floor_allows_retries_without_traffic() -> None:
    policy = RetryBudgetPolicy(ratio=0.1, min_per_second=1.0, window=10.0)
    state, allowed = BudgetState(), 0
    for _ in range(30):
        ok, state = spend(state, 0.0, policy)
        allowed += ok
    assert allowed == 10  # min_per_second * window


def test_counts_decay_so_the_budget_refills() -> None:
    clock = Clock()
    budget = MemoryRetryBudget(
        RetryBudgetPolicy(ratio=0.0, min_per_second=1.0, window=10.0), clock=clock
    )
    spent = sum(budget.try_spend("r") for _ in range(20))
    assert spent == 10
    assert not budget.try_spend("r")
    clock.now += 30.0  # three windows: retries decay to about 5 % of what they were
    assert budget.try_spend("r")
    assert budget.state("r").retries < 2


def test_routes_have_their_own_budgets() -> None:
    budget = MemoryRetryBudget(STEADY)
    for _ in range(10):
        budget.record_request("a")
    assert budget.try_spend("a")
    assert not budget.try_spend("b")


def test_idle_routes_are_forgotten_after_ten_windows() -> None:
    clock = Clock()
    policy = RetryBudgetPolicy(ratio=0.1, min_per_second=1.0, window=10.0)
    budget = MemoryRetryBudget(policy, clock=clock)
    for user in range(1000):  # a route per tenant: each seen once
        budget.record_request(f"tenant-{user}")
        budget.try_spend(f"tenant-{user}")
    assert len(budget._states) == 1000
    clock.now += 101.0  # ten windows and a bit: as Redis expires a budget's key
    budget.record_request("active")
    assert len(budget._states) == 1
    assert budget.state("tenant-7") == BudgetState()


def test_an_active_route_keeps_its_counts_while_idle_ones_go() -> None:
    clock = Clock()
    policy = RetryBudgetPolicy(ratio=0.1, min_per_second=0.5, window=10.0)
    budget = MemoryRetryBudget(policy, clock=clock)
    expected, outcomes, wanted = BudgetState(), [], []
    for step in range(400):  # 200 s: twenty windows; a fresh tenant every step
        clock.now += 0.5
        budget.record_request(f"tenant-{step}")
        budget.record_request("active")
        expected = deposit(expected, clock.now, policy)
        if step % 3 == 0:
            outcomes.append(budget.try_spend("active"))
            ok, expected = spend(expected, clock.now, policy)
            wanted.append(ok)
    assert outcomes == wanted
    assert budget.state("active") == expected
    assert len(budget._states) <= 202  # the last ten windows' tenants, and the active one


def run_contract(budget: MemoryRetryBudget | RedisRetryBudget) -> list[bool]:
    outcomes = []
    for _ in range(40):
        budget.record_request("route-1")
    for _ in range(8):
        outcomes.append(budget.try_spend("route-1"))
    outcomes.append(budget.try_spend("route-2"))
    return outcomes


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_memory_and_redis_budgets_agree(kind: str, redis_target: RedisTarget) -> None:
    url, prefix = redis_target(kind)
    store = redis_store(url, prefix)
    expected = [True] * 4 + [False] * 4 + [False]
    assert run_contract(MemoryRetryBudget(STEADY)) == expected
    assert run_contract(RedisRetryBudget(store, STEADY)) == expected
    client: RawRedis = store.client
    keys = list(client.scan_iter(match=f"{prefix}:rb:*"))
    assert len(keys) == 2
    assert all(client.ttl(k) > 0 for k in keys)
    store.close()


@pytest.mark.parametrize("kind", ["memory", "redis", "cluster"])
def test_a_refund_gives_a_spent_retry_back_never_more(kind: str, redis_target: RedisTarget) -> None:
    store = redis_store(*redis_target(kind)) if kind != "memory" else None
    budget = MemoryRetryBudget(STEADY) if store is None else RedisRetryBudget(store, STEADY)
    for _ in range(10):
        budget.record_request("r")
    assert budget.try_spend("r")
    assert not budget.try_spend("r")  # 10 % of 10 requests: one retry
    budget.refund("r")  # that retry was not made
    assert budget.try_spend("r")
    budget.refund("r")
    budget.refund("r")  # one too many: no retry is owed
    assert [budget.try_spend("r") for _ in range(2)] == [True, False]
    if store is not None:
        store.close()


def test_two_processes_share_one_redis_budget(redis_url: str, redis_prefix: str) -> None:
    first = RedisRetryBudget(RedisStore(redis_url, key_prefix=redis_prefix), STEADY)
    second = RedisRetryBudget(RedisStore(redis_url, key_prefix=redis_prefix), STEADY)
    for _ in range(20):
        first.record_request("shared")
        second.record_request("shared")
    spent = [first.try_spend("shared") for _ in range(3)] + [
        second.try_spend("shared") for _ in range(3)
    ]
    assert sum(spent) == 4  # 10 % of the 40 requests both sent


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_async_redis_budget(kind: str, redis_target: RedisTarget) -> None:
    store = redis_store(*redis_target(kind))
    budget = RedisRetryBudget(store, STEADY)

    async def run() -> list[bool]:
        for _ in range(20):
            await budget.arecord_request("a")
        results = [await budget.atry_spend("a") for _ in range(4)]
        await store.aclose()
        return results

    assert anyio.run(run) == [True, True, False, False]


def test_a_dead_redis_falls_back_to_a_local_budget() -> None:
    # local_share=1: the process alone keeps the whole floor (the default keeps a quarter)
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.2, local_share=1.0)
    budget = RedisRetryBudget(store, RetryBudgetPolicy(ratio=0.0, min_per_second=0.2, window=10))
    for _ in range(5):
        budget.record_request("r")
    assert [budget.try_spend("r") for _ in range(3)] == [True, True, False]


def test_guard_uses_a_redis_budget_with_a_redis_store(redis_url: str, redis_prefix: str) -> None:
    guard = Guard(store=redis_url, key_prefix=redis_prefix, environ={})
    assert isinstance(guard._stages.retry_budget, RedisRetryBudget)
    assert isinstance(Guard(environ={})._stages.retry_budget, MemoryRetryBudget)
    assert Guard(retry_budget=None, environ={})._stages.retry_budget is None
    guard.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"ratio": -1},
        {"window": 0},
        {"min_per_second": float("inf")},
        # wrong types raised a bare TypeError from a comparison
        {"ratio": "0.1"},
        {"window": None},
        {"min_per_second": True},
    ],
)
def test_bad_budget_policies(bad: dict[str, object]) -> None:
    from llmguard_sdk import ConfigurationError

    with pytest.raises(ConfigurationError):
        RetryBudgetPolicy(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: RedisRetryBudget("redis://127.0.0.1:6379"), "RedisStore"),  # type: ignore[arg-type]  # a URL
        (lambda: RedisRetryBudget(None), "RedisStore"),  # type: ignore[arg-type]
        (lambda: MemoryRetryBudget(clock=5), "clock"),  # type: ignore[arg-type]
    ],
)
def test_budgets_of_the_wrong_parts_are_configuration_errors(build: Any, match: str) -> None:
    """A URL for the store raised AttributeError ('str' object has no attribute
    'resend_seconds'); a clock that is no callable raised TypeError at the first call."""
    from llmguard_sdk import ConfigurationError

    with pytest.raises(ConfigurationError, match=match):
        build()


def test_redis_a_very_long_window_still_counts_in_redis(redis_url: str, redis_prefix: str) -> None:
    """A window whose keys' TTL (ten windows) is beyond what EXPIRE takes: the counts still
    live in Redis (EXPIRE failed the script: Redis taken for down by every stage of the
    store, fail-closed spend budgets refusing every call, the budget decided locally)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    budget = RedisRetryBudget(store, RetryBudgetPolicy(ratio=0.5, min_per_second=0, window=1e16))
    budget.record_request("r")
    budget.record_request("r")
    assert budget.try_spend("r")
    assert not budget.try_spend("r")  # 0.5 of 2 requests: one retry
    assert store.health.outages == 0
    client: RawRedis = store.client
    assert client.ttl(store.key("rb", hash_id("r"))) > 0
    store.close()
