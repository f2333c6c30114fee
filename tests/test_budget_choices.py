"""A call may not ask for several choices through ``extra_body={"n": ...}``: the Guard returns
one, the provider bills every one, and a budget holds one call's ``max_tokens`` of output. A
$0.0025 hard cap, held for one call of 3 output tokens, settled a call of ``n=8`` at $0.0054
(8 x 3 output tokens billed): past the cap that "is never overspent"."""

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
