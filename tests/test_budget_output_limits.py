"""A call that sets both ``max_tokens`` and ``max_completion_tokens``: a provider may follow
either, so budgets and rate limits hold the larger, and clamping lowers both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import BudgetExceededError, Guard, RateLimit
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

MakeGuard = Callable[..., Guard]

# "hello there" is 6 input tokens at the fake provider: $0.0006 at $100 per million
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


def _long(body: dict[str, Any]) -> str:
    return " ".join(["w"] * 500)


def _follows_max_tokens(body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """A server that follows ``max_tokens`` (not ``max_completion_tokens``) to the end."""
    return {**usage, "completion_tokens": body.get("max_tokens", usage["completion_tokens"])}


def test_a_call_with_both_limits_is_held_at_the_larger(make_guard: MakeGuard) -> None:
    """$0.02 holds 97 output tokens: a call allowing 400 under ``max_tokens`` (and 10 under
    ``max_completion_tokens``) was held for 10, sent, billed 400 and overspent fourfold."""
    with FakeProvider(model="fake-model", usage=_follows_max_tokens, reply=_long) as server:
        guard = make_guard(server, budgets=Budgets([Budget(limit_usd=0.02)], prices=PRICES))
        with pytest.raises(BudgetExceededError):
            guard.chat(USER, max_tokens=400, max_completion_tokens=10)
        assert server.stats.requests == 0
        answer = guard.chat(USER, max_tokens=50, max_completion_tokens=10)  # both fit
        assert answer.cost_usd is not None
        assert answer.cost_usd <= 0.02


@pytest.mark.parametrize("smaller", [100, 10])
def test_clamping_lowers_both_limits(make_guard: MakeGuard, smaller: int) -> None:
    """$0.01 holds about 47 output tokens: the clamped call sends no limit above that under
    either name (only ``max_completion_tokens`` was lowered, ``max_tokens`` sent as asked),
    keeps a smaller one as asked, and stays within the limit."""
    with FakeProvider(model="fake-model", usage=_follows_max_tokens, reply=_long) as server:
        budgets = Budgets([Budget(limit_usd=0.01)], prices=PRICES, clamp_max_tokens=True)
        guard = make_guard(server, budgets=budgets)
        answer = guard.chat(USER, max_tokens=400, max_completion_tokens=smaller)
        body = server.requests[-1].body
        assert 16 <= body["max_tokens"] < 50
        assert body["max_completion_tokens"] == min(smaller, body["max_tokens"])
        assert answer.cost_usd is not None
        assert answer.cost_usd <= 0.01


def test_a_rate_limit_reserves_the_larger_limit(make_guard: MakeGuard) -> None:
    """The primary's output limit, 100 tokens an hour, never fits a call that may produce
    400: it goes to the backup (it had reserved 10 on the primary, and been sent there)."""
    with (
        FakeProvider(model="fake-model", name="primary") as primary,
        FakeProvider(model="fake-model", name="backup") as backup,
    ):
        limit = RateLimit(output_tpm=100, period=3600, reserve_output_tokens=10)
        guard = make_guard(primary, backup, rate_limits={"primary": limit}, retry=None)
        answer = guard.chat(USER, max_tokens=400, max_completion_tokens=10)
        assert (answer.route, primary.stats.requests) == ("backup", 0)
