"""Whose counters a call is counted by, as a SaaS sets its budgets up: per-tenant plans (one
limit for every tenant, a larger one for a tenant that pays for it) and per-user caps inside
each tenant, in memory and shared through a real Redis."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import BudgetExceededError, Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
CALL_USD = (6 * 100 + 3 * 200) / 1e6  # "hello there": 6 input and 3 output tokens, $0.0012


def _served(guard: Guard, most: int, *, tenant: str | None = None, user: str | None = None) -> int:
    """How many calls of this scope are served (``most`` at most) before a budget refuses."""
    for served in range(most):
        try:
            guard.chat(USER, max_tokens=10, tenant=tenant, user=user)
        except BudgetExceededError:
            return served
    return most


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> str | RedisStore:
    if request.param == "memory":
        return "memory"
    url: str = request.getfixturevalue("redis_url")
    return RedisStore(url, key_prefix=request.getfixturevalue("redis_prefix"))


def test_a_user_budget_counts_each_tenants_user_of_its_own(
    fake: FakeProvider, make_guard: MakeGuard, store: str | RedisStore
) -> None:
    """Tenants name their users themselves ("42", "admin", an e-mail): a per-user cap counted
    one user of every tenant, so acme's user 42 used up globex's user 42's money, and the
    refusal told globex what acme's user had spent."""
    budgets = Budgets([Budget(limit_usd=0.006, scope="user", window="month")], prices=PRICES)
    guard = make_guard(fake, budgets=budgets, store=store)
    assert _served(guard, 10, tenant="acme", user="42") == 3
    assert _served(guard, 1, tenant="globex", user="42") == 1  # was refused: acme's $0.0036 spent
    (acme,) = guard.budget_status(tenant="acme", user="42")
    (globex,) = guard.budget_status(tenant="globex", user="42")
    assert acme["scope"] == globex["scope"] == "user:42"
    assert acme["counter"] != globex["counter"]
    assert acme["spent_usd"] == pytest.approx(3 * CALL_USD)
    assert globex["spent_usd"] == pytest.approx(CALL_USD)
    # a call without a tenant has a counter of its own too
    assert _served(guard, 1, user="42") == 1
    assert guard.budget_status(user="42")[0]["spent_usd"] == pytest.approx(CALL_USD)


def test_a_tenants_own_budget_takes_the_place_of_every_tenants(
    fake: FakeProvider, make_guard: MakeGuard, store: str | RedisStore
) -> None:
    """Plans: $0.006 a month for every tenant, $0.05 for bigco. bigco was counted by both and
    refused at the $0.006 every tenant gets: a tenant's own limit could only be lower."""
    budgets = Budgets(
        [
            Budget(limit_usd=0.006, scope="tenant", window="month"),
            Budget(limit_usd=0.05, scope="tenant", id="bigco", window="month"),
            Budget(limit_usd=0.005, scope="tenant", id="trial", window="month"),
            Budget(limit_usd=1.0, scope="tenant", window="day"),  # another window: counts
        ],
        prices=PRICES,
    )
    guard = make_guard(fake, budgets=budgets, store=store)
    assert _served(guard, 10, tenant="bigco") == 10  # was 3
    assert _served(guard, 10, tenant="small") == 3
    assert _served(guard, 10, tenant="trial") == 2  # a lower limit of its own holds too
    rows = guard.budget_status(tenant="bigco")
    assert [(r["window"], r["limit_usd"]) for r in rows] == [("month", 0.05), ("day", 1.0)]
    assert [r["spent_usd"] for r in rows] == pytest.approx([10 * CALL_USD] * 2)
    assert [r["limit_usd"] for r in guard.budget_status(tenant="small")] == [0.006, 1.0]
