"""When an unknown price is refused: at build for a route's own model, at the call for the
model a call names on a route without one.

The README said an unknown model's price is refused as the Guard is built; a route without a
model of its own is priced at the model each call names, which is known only then: a call
naming a model with no price is refused with :class:`UnknownModelPriceError` before anything
is held or sent, and a call naming a priced model goes on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, UnknownModelPriceError
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_budget_guard import PRICES


def test_a_route_model_is_checked_at_build_a_call_model_at_the_call(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    with pytest.raises(UnknownModelPriceError, match="no-such-model"):
        Guard(
            OpenAICompatibleProvider(fake.base_url, model="no-such-model", name="primary"),
            budgets=budgets,
            environ={},
        )
    guard = Guard(  # no model of its own: each call names one
        OpenAICompatibleProvider(fake.base_url, name="primary"),
        store=redis_url,
        key_prefix=redis_prefix,
        budgets=budgets,
        environ={},
    )
    try:
        with pytest.raises(UnknownModelPriceError, match="primary/no-such-model"):
            guard.chat(USER, model="no-such-model", max_tokens=5)
        assert fake.stats.requests == 0  # refused before it was sent
        (row,) = guard.budget_status()
        assert (row["spent_usd"], row["held_usd"]) == (0, 0)  # and before anything was held
        assert guard.chat(USER, model="fake-model", max_tokens=5).cost_usd
        assert fake.stats.requests == 1
    finally:
        guard.close()


def test_the_readme_says_when_each_is_refused() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    said = " ".join(readme[readme.index("An unknown model is an") :].split()[:90])
    assert "raised when the Guard is built) or" not in said  # (only a route's own model is)
    assert "a route whose own model has no price as it is built" in said
    assert "refused at the call, before anything is held or sent" in said
