"""The bounded memo of the tables a call looks up by tenant (a scope's budget counters, a
tenant's rate-limit cells): the same answers as computing them, for any number of tenants,
in a table that never holds more than its bound."""

from __future__ import annotations

from llmguard_sdk._state.recent import Recent
from llmguard_sdk.budget.policy import Budget
from llmguard_sdk.budget.scopes import ScopeCounters
from llmguard_sdk.context import CallContext, Scope
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit


def test_a_value_is_made_once_while_remembered_and_the_table_stays_bounded() -> None:
    made: list[int] = []

    def square(n: int) -> int:
        made.append(n)
        return n * n

    recent: Recent[int, int] = Recent(square, size=100)
    assert [recent(n) for n in (3, 4, 3, 3)] == [9, 16, 9, 9]
    assert made == [3, 4]  # remembered
    assert all(recent(n) == n * n for n in range(10_000))
    assert len(recent) <= 100


def test_scope_counters_of_many_tenants_are_right_and_bounded() -> None:
    budgets = [
        Budget(limit_usd=5.0, scope="global"),
        Budget(limit_usd=1.0, scope="tenant"),
        Budget(limit_usd=2.0, scope="tag", id="beta"),
    ]
    scopes = ScopeCounters(budgets)
    request = ChatRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "metadata": {"tags": "x, beta"}}
    )
    keys = set()
    for i in range(10_000):
        ctx = CallContext(request=request, scope=Scope(tenant=f"t{i}"), deadline=1e12)
        found = scopes.of_call(ctx)
        assert found == scopes.of(tenant=f"t{i}", tags=["x", "beta"])
        assert [spec.scope for spec in found] == ["global", f"tenant:t{i}", "tag:beta"]
        keys.add(found[1].key)
    assert len(keys) == 10_000  # one counter per tenant
    assert len(scopes._recent) <= 4096


def test_a_limiter_of_many_tenants_keeps_each_tenant_apart_and_its_memo_bounded() -> None:
    clock = [1_000.0]
    limiter = MemoryRateLimiter(
        {"route": [RateLimit(rpm=1_000_000), RateLimit(rpm=1, per_tenant=True, batch_headroom=0)]},
        clock=lambda: clock[0],
    )
    for i in range(6_000):
        assert limiter.reserve("route", tokens=1, tenant=f"t{i}").allowed
    assert len(limiter._recent_keys) <= 4096
    assert not limiter.reserve("route", tokens=1, tenant="t0").allowed  # its own minute
    assert not limiter.reserve("route", tokens=1, tenant="t5999").allowed
    assert limiter.reserve("route", tokens=1, tenant="someone-new").allowed
