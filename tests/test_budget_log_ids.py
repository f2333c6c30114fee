"""Budget events the SDK logs name their tenant or user hashed, never the raw id (the
``on_event`` callbacks still get the full scope)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk._state.stores import hash_id
from llmguard_sdk.budget import Budget, BudgetEvent, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
USER = [{"role": "user", "content": "hello there"}]
TENANT, USER_ID = "tenant-acme-77", "user-bob-99"


@pytest.mark.parametrize(("scope", "who"), [("tenant", TENANT), ("user", USER_ID)])
def test_an_alert_is_logged_without_the_raw_id(
    fake: FakeProvider,
    make_guard: MakeGuard,
    caplog: pytest.LogCaptureFixture,
    scope: str,
    who: str,
) -> None:
    seen: list[BudgetEvent] = []
    budgets = Budgets(
        [Budget(limit_usd=1.0, scope=scope, alerts=(0.000001,))],  # type: ignore[arg-type]
        prices=PRICES,
        on_event=[seen.append],
    )
    guard = make_guard(fake, budgets=budgets)
    with caplog.at_level(logging.DEBUG, logger="llmguard_sdk"):
        guard.chat(USER, max_tokens=10, tenant=TENANT, user=USER_ID)
    assert [e.scope for e in seen if e.kind == "alert"] == [f"{scope}:{who}"]
    logged = [r.getMessage() for r in caplog.records if "budget event" in r.getMessage()]
    assert len(logged) == 1
    assert who not in logged[0]
    assert f"{scope}:{hash_id(who)}" in logged[0]
