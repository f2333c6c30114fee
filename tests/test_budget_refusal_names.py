"""A refusal names the budget that refused (``BudgetExceededError.budget``): two budgets on
one scope, a daily and a monthly cap, could be told apart only by ``resets_at``."""

from __future__ import annotations

import pickle

import pytest

from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.errors import BudgetExceededError, BudgetUnavailableError
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_budget_guard import CALL_USD, PRICES, MakeGuard

ROOM = 100 * CALL_USD  # room for many calls
NONE = CALL_USD / 10  # room for no call


@pytest.mark.parametrize("store", ["memory", "redis"])
@pytest.mark.parametrize(
    ("day", "month", "named"),
    [
        (NONE, ROOM, None),
        (ROOM, NONE, None),
        (NONE, ROOM, "daily"),
        (ROOM, NONE, "monthly"),
    ],
)
def test_a_refusal_names_the_budget_that_refused(
    fake: FakeProvider,
    make_guard: MakeGuard,
    request: pytest.FixtureRequest,
    store: str,
    day: float,
    month: float,
    named: str | None,
) -> None:
    budgets = [
        Budget(limit_usd=day, scope="tenant", window="day", name="daily" if named else None),
        Budget(limit_usd=month, scope="tenant", window="month", name="monthly" if named else None),
    ]
    refusing = budgets[0] if day < month else budgets[1]
    options = {}
    if store == "redis":
        options = {
            "store": request.getfixturevalue("redis_url"),
            "key_prefix": request.getfixturevalue("redis_prefix"),
        }
    guard = make_guard(fake, budgets=Budgets(budgets, prices=PRICES), **options)
    with pytest.raises(BudgetExceededError) as info:
        guard.chat(USER, max_tokens=3, tenant="acme")
    error = info.value
    assert error.budget == refusing.key_name == (named or f"tenant.each.{refusing.window}")
    assert error.scope == "tenant:acme"
    assert pickle.loads(pickle.dumps(error)).budget == error.budget
    with pytest.raises(AttributeError):
        error.budget = "other"  # type: ignore[misc]
    assert fake.stats.requests == 0


def test_an_unavailable_store_names_no_budget() -> None:
    error = BudgetUnavailableError("away", scope="*", limit_usd=1.0, spent_usd=float("nan"))
    assert error.budget is None


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_users_refusal_and_events_name_the_tenant(
    fake: FakeProvider, make_guard: MakeGuard, request: pytest.FixtureRequest, store: str
) -> None:
    """A user's budget is counted per tenant (tenants name their users themselves), but its
    events and refusals said ``user:u1`` alone: which tenant's u1 ran out was not told."""
    from llmguard_sdk.budget.policy import BudgetEvent, for_log

    events: list[BudgetEvent] = []
    budgets = Budgets(
        [Budget(limit_usd=NONE, scope="user", window="day")],
        prices=PRICES,
        on_event=[events.append],
    )
    options = {}
    if store == "redis":
        options = {
            "store": request.getfixturevalue("redis_url"),
            "key_prefix": request.getfixturevalue("redis_prefix"),
        }
    guard = make_guard(fake, budgets=budgets, **options)
    with pytest.raises(BudgetExceededError) as info:
        guard.chat(USER, max_tokens=3, tenant="acme", user="u1")
    assert (info.value.scope, info.value.tenant) == ("user:u1", "acme")
    assert pickle.loads(pickle.dumps(info.value)).tenant == "acme"
    exhausted = [event for event in events if event.kind == "exhausted"]
    assert [(event.scope, event.tenant) for event in exhausted] == [("user:u1", "acme")]
    logged = for_log(exhausted[0])
    assert logged.tenant not in (None, "acme")  # hashed, as the scope's id is
    assert logged.scope != "user:u1"
