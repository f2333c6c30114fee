"""Tenant and user ids stay out of what telemetry exports, error texts included: a span's
status carries the tenant hashed (as its ``llmguard.tenant`` attribute) and no user id."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import BudgetExceededError, Guard
from llmguard_sdk._state.stores import hash_id
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import PRICES, Exported, call_span, exporting

MakeGuard = Callable[..., Guard]
_otel = pytest.fixture(exporting, name="otel")
TENANT, USER_ID = "tenant-acme-77", "user-bob-99"


@pytest.mark.parametrize("scope", ["tenant", "user"])
def test_a_budget_refusal_names_no_tenant_or_user_on_the_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, scope: str
) -> None:
    budgets = Budgets([Budget(limit_usd=0.000001, scope=scope)], prices=PRICES)  # type: ignore[arg-type]
    guard = make_guard(fake, telemetry=otel.telemetry, budgets=budgets)
    with pytest.raises(BudgetExceededError) as raised:
        guard.chat(USER, max_tokens=10, tenant=TENANT, user=USER_ID)
    assert f"{scope}:" in str(raised.value)  # the caller's error names the scope in full
    span = call_span(otel)
    status = span.status.description or ""
    assert "has no room for this call" in status
    assert TENANT not in status
    assert USER_ID not in status
    if scope == "tenant":
        assert f"tenant:{hash_id(TENANT)}" in status
        assert span.attributes is not None
        assert span.attributes["llmguard.tenant"] == hash_id(TENANT)
    else:
        assert "user:[user]" in status
