"""A cascade's ``cost_usd`` is its total: the rejected tiers' answers and the serving tier's.
Where the serving tier's model has no price, the total was dropped (``None``), the rejected
tiers' known cost with it; it is now what is known, marked ``cost_source="estimated"`` (a
part of it unknown), as a rejected tier without a price already marks it."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Cascade, Guard, OpenAICompatibleProvider, TaskRouter
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.router import json_schema
from llmguard_sdk.testing import FakeProvider

SCHEMA: dict[str, Any] = {"type": "object", "required": ["answer"]}
ONLY_SMALL = PriceTable.default_table().with_prices({"small-model": Price(input=1.0, output=2.0)})


def test_an_unpriced_serving_tier_keeps_the_rejected_tiers_cost() -> None:
    with (
        FakeProvider(model="small-model", name="small", reply=lambda b: "not JSON") as small,
        FakeProvider(model="unpriced-model", name="large", reply=lambda b: '{"answer": 4}') as big,
    ):
        routes = [
            OpenAICompatibleProvider(s.base_url, model=s.model, name=s.name) for s in (small, big)
        ]
        router = TaskRouter(
            {"small": ["small"], "large": ["large"]},
            cascades={"auto": Cascade(["small", "large"], checks=[json_schema(SCHEMA)])},
            default="auto",
        )
        with Guard(routes, tasks=router, prices=ONLY_SMALL, environ={}) as guard:
            answer = guard.chat([{"role": "user", "content": "q"}], max_tokens=20)
    (tried,) = answer.metadata["cascade"]["escalated_from"]
    assert answer.route == "large"
    assert tried["cost_usd"] > 0
    assert answer.cost_usd == pytest.approx(tried["cost_usd"])  # what is known of it
    assert answer.cost_source == "estimated"  # (the large tier's part is unknown)
