"""A refusal that calls in flight explain (their holds take the room the settled spend
leaves) says to retry when the first of those holds expires at the latest, not at the
window's reset: a monthly budget said to wait 634 hours for a hold that a call settled a
second later. A refusal the settled spend alone explains still waits for the reset."""

from __future__ import annotations

import threading
import time

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.errors import BudgetExceededError
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_budget_guard import CALL_USD, PRICES, MakeGuard
from .test_fake_provider import wait_until

HOLD_SECONDS = 30.0
TIMEOUT = 5.0


def _refused(guard: Guard) -> BudgetExceededError:
    with pytest.raises(BudgetExceededError) as info:
        guard.chat(USER, max_tokens=3, tenant="acme")
    return info.value


def _refused_behind_a_call_in_flight(guard: Guard, fake: FakeProvider) -> BudgetExceededError:
    fake.script(Fault(latency=1.0))
    slow = threading.Thread(target=lambda: guard.chat(USER, max_tokens=3, tenant="acme"))
    slow.start()
    try:
        assert wait_until(lambda: fake.stats.requests == 1)
        return _refused(guard)
    finally:
        slow.join()


def _budgets() -> Budgets:
    # room for one call's hold, not two (a hold is a little more than a call's cost)
    budget = Budget(limit_usd=1.5 * CALL_USD, scope="tenant", window="month")
    return Budgets([budget], prices=PRICES, hold_seconds=HOLD_SECONDS)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_refusal_behind_calls_in_flight_retries_when_their_holds_free(
    fake: FakeProvider, make_guard: MakeGuard, store: str, request: pytest.FixtureRequest
) -> None:
    options = {}
    if store == "redis":
        options = {
            "store": request.getfixturevalue("redis_url"),
            "key_prefix": request.getfixturevalue("redis_prefix"),
        }
    guard = make_guard(fake, budgets=_budgets(), timeout=TIMEOUT, **options)
    started = time.time()
    error = _refused_behind_a_call_in_flight(guard, fake)
    assert error.spent_usd == 0.0
    assert error.retry_after is not None
    assert 0 < error.retry_after <= TIMEOUT + HOLD_SECONDS + 1  # the slow call's hold
    assert error.resets_at is not None
    assert error.resets_at > started + 3600  # the month's end: not what it waits for
    # the slow call settled: its spend alone leaves no room, and the reset is waited for
    error = _refused(guard)
    assert error.spent_usd == pytest.approx(CALL_USD)
    assert error.retry_after is not None
    assert error.retry_after > 3600
