"""One price table per Guard: ``Guard(prices=)``, ``Budgets(prices=)`` and
``ReleasePlan(prices=)`` name the same table or only one of them names one; two different
tables are a ConfigurationError as the Guard is built, and the one table given prices the
budgets, the answers and the releases alike."""

from __future__ import annotations

import datetime as dt

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.releases import Release, ReleaseEvent, ReleasePlan
from llmguard_sdk.testing import FakeProvider

USER = [{"role": "user", "content": "hello there"}]
MODEL = "fake-model-2025-01-01"  # (a pinned id: a release refuses a moving alias)
CHEAP = {MODEL: Price(input=1.0, output=2.0)}
DEAR = {MODEL: Price(input=100.0, output=200.0)}


def _route(fake: FakeProvider) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, model=MODEL, name="primary")


def test_two_different_tables_for_one_guard_are_refused(fake: FakeProvider) -> None:
    """The Guard's ``prices=`` replaced the budgets' own table without a word: a budget
    configured at $100/M input was charged $1/M."""
    with pytest.raises(ConfigurationError, match=r"Budgets\(prices=\)"):
        Guard(
            _route(fake),
            prices=PriceTable(CHEAP),
            budgets=Budgets([Budget(10.0)], prices=PriceTable(DEAR)),
            environ={},
            telemetry=False,
        )


def test_a_release_plan_table_that_differs_is_refused(fake: FakeProvider) -> None:
    plan = ReleasePlan(Release("bot", "v1", _route(fake)), prices=PriceTable(CHEAP))
    with pytest.raises(ConfigurationError, match=r"ReleasePlan\(prices=\)"):
        Guard(release=plan, budgets=Budgets(prices=PriceTable(DEAR)), environ={}, telemetry=False)


def test_the_same_table_given_twice_prices_the_budgets_and_the_answers(
    fake: FakeProvider,
) -> None:
    """The same table (one object, or one built alike) is no conflict: the budget is
    charged what the answer says it cost, at the table's prices."""
    for given in (PriceTable(DEAR), PriceTable(DEAR.copy())):
        table = PriceTable(DEAR)
        budgets = Budgets([Budget(10.0)], prices=table)
        with Guard(_route(fake), prices=given, budgets=budgets, environ={}) as guard:
            answer = guard.chat(USER, max_tokens=8)
            usage = answer.usage
            assert usage is not None
            assert answer.cost_usd is not None
            expected = (usage.input_tokens * 100.0 + usage.output_tokens * 200.0) / 1e6
            assert answer.cost_usd == pytest.approx(expected)
            (status,) = guard.budget_status()
            assert status["spent_usd"] == pytest.approx(expected)


def test_the_budgets_table_prices_the_releases_too(fake: FakeProvider) -> None:
    """A table given in ``Budgets`` only: the releases read the default table instead, so
    a pinned model retiring by the user's own table was never warned about."""
    retiring = dt.date(2026, 1, 10)
    table = PriceTable({MODEL: Price(input=1.0, output=2.0, retires_on=retiring)})
    events: list[ReleaseEvent] = []
    plan = ReleasePlan(
        Release("bot", "v1", _route(fake)),
        hooks=[events.append],
        clock=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp(),
    )
    with Guard(
        release=plan, budgets=Budgets([Budget(10.0)], prices=table), environ={}, telemetry=False
    ):
        pass
    assert [(e.kind, e.model, e.day) for e in events] == [("retiring", MODEL, retiring)]
