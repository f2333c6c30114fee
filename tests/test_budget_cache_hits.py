"""A call the response cache answers costs nothing and is served whatever the budgets have
left; what its reservation learned on the way (a window's 100 % alert, once) is still told."""

from __future__ import annotations

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, BudgetEvent, Budgets
from llmguard_sdk.errors import BudgetExceededError
from llmguard_sdk.testing import FakeProvider

from .conftest import MODES, chat_in_mode
from .test_budget_guard import CALL_USD, PRICES, MakeGuard


def _refused(guard: Guard) -> BudgetExceededError:
    with pytest.raises(BudgetExceededError) as info:
        guard.chat([{"role": "user", "content": "a new question"}], max_tokens=3, tenant="acme")
    return info.value


@pytest.mark.parametrize("mode", MODES)
def test_a_cache_hit_past_the_limit_still_tells_the_windows_100_percent_alert(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    """The settled spend alone left no room for a call: a cached answer is served (free),
    and the window's 100 % alert, which its reservation marked fired, reaches ``on_event``.
    It was dropped with the call's refusal notes, and the window's real refusals after it
    never told it."""
    events: list[BudgetEvent] = []
    budgets = Budgets(
        [Budget(limit_usd=1.5 * CALL_USD, scope="tenant", alerts=(1.0,))],
        prices=PRICES,
        on_event=[events.append],
    )
    guard = make_guard(fake, budgets=budgets, cache=True)
    assert chat_in_mode(guard, mode, max_tokens=3, tenant="acme").cost_usd == CALL_USD
    cached = chat_in_mode(guard, mode, max_tokens=3, tenant="acme")
    assert (cached.route, cached.cost_usd) == ("cache", 0.0)
    _refused(guard)
    alerts = [(event.kind, event.threshold) for event in events if event.kind == "alert"]
    assert alerts == [("alert", 1.0)]
    assert [event.action for event in events if event.kind == "exhausted"] == ["refused"]
