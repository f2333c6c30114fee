"""A call may neither ask for several choices through ``extra_body={"n": ...}`` nor set its
output limit there: the Guard returns one choice, the provider bills every one, and a budget
holds one call's ``max_tokens`` of output. A $0.0025 hard cap, held for one call of 3 output
tokens, settled a call of ``n=8`` at $0.0054 (8 x 3 output tokens billed): past the cap that
"is never overspent"."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_budget_guard import PRICES, MakeGuard


def _billed_per_choice(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's usage for ``n`` choices: each one's completion tokens."""
    choices = int(body.get("n", 1))
    completion = counted["completion_tokens"] * choices
    return {**counted, "completion_tokens": completion,
            "total_tokens": counted["prompt_tokens"] + completion}  # fmt: skip


@pytest.mark.parametrize("budgeted", [True, False])
def test_extra_body_n_is_refused_before_anything_is_sent(
    make_guard: MakeGuard, budgeted: bool
) -> None:
    with FakeProvider(usage=_billed_per_choice) as fake:
        budgets = Budgets([Budget(limit_usd=0.0025)], prices=PRICES) if budgeted else None
        guard = make_guard(fake, budgets=budgets, prices=PRICES)
        with pytest.raises(RequestValidationError, match="'n'"):
            guard.chat(USER, max_tokens=3, extra_body={"n": 8})
        assert fake.stats.requests == 0
        answer = guard.chat(USER, max_tokens=3, extra_body={"n": 1})  # one choice: as it was
        assert answer.usage is not None
        assert answer.usage.output_tokens == 3


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
def test_an_output_limit_in_extra_body_is_refused_before_anything_is_sent(
    make_guard: MakeGuard, limit: str
) -> None:
    """``extra_body`` is sent over the request's own fields: ``max_tokens=3`` held, and
    ``extra_body={"max_tokens": 400}`` sent, settled a $0.0025 hard cap at $0.0806."""
    with FakeProvider(reply=lambda body: " ".join(["word"] * 400)) as fake:
        budgets = Budgets([Budget(limit_usd=0.0025)], prices=PRICES)
        guard = make_guard(fake, budgets=budgets)
        with pytest.raises(RequestValidationError, match=repr(limit)):
            guard.chat(USER, max_tokens=3, extra_body={limit: 400})
        assert fake.stats.requests == 0
        (row,) = guard.budget_status()
        assert (row["spent_usd"], row["held_usd"]) == (0.0, 0.0)


def test_a_model_in_extra_body_is_refused_before_anything_is_sent(make_guard: MakeGuard) -> None:
    """``extra_body={"model": ...}`` was sent over the route's model, the one the call is
    held and priced at: a route of $100 / $200 per million tokens sent ``o1-pro`` ($150 /
    $600), charged as the route's model."""
    with FakeProvider() as fake:
        guard = make_guard(fake, budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES))
        with pytest.raises(RequestValidationError, match="'model'"):
            guard.chat(USER, max_tokens=3, extra_body={"model": "o1-pro"})
        assert fake.stats.requests == 0
