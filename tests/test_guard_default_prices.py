"""A Guard given no ``prices=`` prices answers at ``PriceTable.default_table()`` (genai-prices
over the shipped table), as the README says; its docstring said "the table shipped with the
package", which knows neither gpt-5 nor o3."""

from __future__ import annotations

import inspect

from llmguard_sdk import Guard, OpenAICompatibleProvider, PriceTable
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, genai_prices_or_skip


def test_a_guard_without_prices_prices_at_the_default_table() -> None:
    genai_prices_or_skip()
    assert "gpt-5" not in PriceTable.shipped_table().models()
    with FakeProvider(model="gpt-5") as api:
        route = OpenAICompatibleProvider(api.base_url, model="gpt-5")
        with Guard(route, environ={}, retry=None) as guard:
            answer = guard.chat(USER, max_tokens=5)
    assert answer.cost_usd is not None
    assert answer.cost_usd > 0
    assert answer.cost_source == "estimated"


def test_the_guard_docstring_names_the_default_table() -> None:
    doc = " ".join((inspect.getdoc(Guard) or "").split())
    assert "default: PriceTable.default_table()" in doc.replace(":meth:", "").replace("`", "")
