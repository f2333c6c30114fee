"""bench/price_audit.py: every disagreement with LiteLLM's map explained by a rule that holds
on the data, and a disagreement no rule accounts for is counted, not hidden."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmguard_sdk.budget import Price
from llmguard_sdk.models import Usage

BENCH = Path(__file__).resolve().parents[1] / "bench"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("litellm") is None or importlib.util.find_spec("genai_prices") is None,
    reason="needs the bench extra (litellm) and genai-prices",
)


def test_the_audit_explains_every_disagreement_and_matches_every_fixture() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "price_audit.py"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["models_compared"] > 100
    assert result["agreements"] > len(result["disagreements"])
    assert result["unexplained"] == 0
    assert all(row["reason"] for row in result["disagreements"])
    assert {"model", "ours", "other", "reason"} <= set(result["disagreements"][0])
    assert len(result["fixtures"]) >= 6
    for row in result["fixtures"]:
        assert row["ours_usd"] == pytest.approx(row["expected_usd"], rel=1e-9), row["name"]


def test_a_wrong_cost_is_not_explained_away() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        price_audit = importlib.import_module("price_audit")  # (bench/ is no package)
    finally:
        sys.path.remove(str(BENCH))
    entry = {
        "litellm_provider": "openai",
        "input_cost_per_token": 1e-6,
        "output_cost_per_token": 4e-6,
        "cache_read_input_token_cost": 0.25e-6,
    }
    price = Price(input=1.0, output=4.0, cached_input=0.25)
    shape = price_audit.Shape("cached_read", Usage(input_tokens=1000, cached_input_tokens=800))
    right = price_audit.litellm_cost(entry, shape.usage, None)
    assert right == pytest.approx(price.cost(shape.usage))

    def case(ours_usd: float) -> object:
        return price_audit.Case("openai", "m", shape, price, price, True, entry, ours_usd, right)

    assert price_audit.explain(case(right * 2)) is None  # same data, a different sum
    cheaper = {**entry, "input_cost_per_token": 2e-6}  # the maps differ: explained
    moved = price_audit.Case(
        "openai",
        "m",
        shape,
        price,
        price,
        True,
        cheaper,
        right,
        price_audit.litellm_cost(cheaper, shape.usage, None),
    )
    reason = price_audit.explain(moved)
    assert reason is not None
    assert reason.startswith("base_rate_differs")
