"""The price source: genai-prices under the user's prices, over the shipped table; tiers."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk.budget import Price, PriceTable, UnknownModelPriceError
from llmguard_sdk.budget._source import GenaiSource
from llmguard_sdk.models import Usage

from .conftest import genai_prices_or_skip

genai_prices = genai_prices_or_skip()


def test_the_default_table_knows_the_models_people_use_and_says_its_snapshot() -> None:
    table = PriceTable.default_table()
    for model, provider in [
        ("gpt-5", "openai"),
        ("gpt-4.1-mini-2025-04-14", "openai"),
        ("claude-sonnet-4-5", "anthropic"),
        ("claude-haiku-4-5-20251001", None),
        ("gemini-2.5-pro", None),
        ("gemini-2.5-flash", "google"),
    ]:
        price = table.price(model, provider=provider)
        assert price.input > 0
        assert price.output > 0
    assert table.version.startswith(f"genai-prices {genai_prices.__version__} (20")
    assert "llmguard 2025-06-01" in table.version
    assert len(table.models()) > 1000


def test_unknown_models_stay_an_error_or_the_explicit_default() -> None:
    table = PriceTable.default_table()
    with pytest.raises(UnknownModelPriceError):
        table.price("surely-not-a-model-7b")
    assert table.find("surely-not-a-model-7b") is None
    assert table.with_prices({}, default=Price(9, 9)).price("surely-not-a-model-7b").input == 9


def test_user_prices_and_route_prices_win_over_the_source() -> None:
    table = PriceTable.default_table().with_prices(
        {"gpt-5": Price(input=1.0, output=2.0), "cheap/claude-haiku-4-5": Price(0.1, 0.2)}
    )
    assert table.price("gpt-5", provider="openai").input == 1.0
    assert table.price("claude-haiku-4-5", provider="cheap").input == 0.1
    assert table.price("claude-haiku-4-5", provider="anthropic").input == 1.0  # the source's
    # the first layer that knows a model decides every tier: the user's batch is discounted
    assert table.price("gpt-5", tier="batch").output == pytest.approx(1.0)
    assert table.price("gpt-5", tier="priority").output == 2.0  # no tier price: standard


def test_the_shipped_table_fills_what_the_source_lacks() -> None:
    shipped = PriceTable({"acme/only-ours": Price(input=3.0, output=4.0)}, version="ours")
    table = PriceTable(_source=GenaiSource(), _base=shipped)
    assert table.price("only-ours", provider="acme").output == 4.0
    assert table.price("gpt-5").output == 10.0


def test_service_tiers_long_context_and_cache_ttls_from_the_source() -> None:
    table = PriceTable.default_table()
    assert table.price("gpt-5", tier="flex").input == pytest.approx(0.625)
    assert table.price("gpt-5", tier="priority").output == pytest.approx(20.0)
    assert table.price("gpt-5", tier="batch").output == pytest.approx(5.0)
    assert table.price("gpt-5", tier="default") == table.price("gpt-5")  # the standard tier
    sonnet = table.price("claude-sonnet-4-5", provider="anthropic")
    assert (sonnet.write_rate, sonnet.write_1h_rate, sonnet.cached_rate) == (3.75, 6.0, 0.3)
    assert table.price("claude-sonnet-4-5", tier="batch").write_1h_rate == pytest.approx(3.0)
    pro = table.price("gemini-2.5-pro")
    assert pro.for_input(200_000).input == 1.25
    assert pro.for_input(200_001).input == 2.5  # past the threshold every token pays more
    assert pro.cost(Usage(input_tokens=250_000, output_tokens=1_000)) == pytest.approx(
        (250_000 * 2.5 + 1_000 * 15) / 1e6
    )


class _Counting(GenaiSource):
    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def find(self, model: str, provider: str | None, day: dt.date, tier: str | None) -> Any:
        self.lookups += 1
        return super().find(model, provider, day, tier)


def test_a_model_is_looked_up_once_not_per_call() -> None:
    source = _Counting()
    table = PriceTable(_source=source, _base=PriceTable.shipped_table())
    usage = Usage(input_tokens=100, output_tokens=10)
    for _ in range(50):
        table.cost(usage, "gpt-5", provider="openai")
    assert 1 <= source.lookups <= 2  # one call's lookups, then the cache


def test_a_price_is_cached_per_stretch_between_time_of_day_windows_edges() -> None:
    """A cache per model and day served the first price asked all day: DeepSeek's off-peak
    price at peak hours, or the reverse."""
    source = _Counting()
    table = PriceTable(_source=source, _base=PriceTable.shipped_table())
    day = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    hours = [20, 8, 20.5, 8.5, 23.99, 0.6, 16.49, 16.5, 0.25]  # chat's peak: 00:30-16:30
    costs = [
        table.cost(usage, "deepseek-chat", provider="deepseek", at=day + dt.timedelta(hours=h))
        for h in hours
    ]
    assert [cost.usd for cost in costs] == pytest.approx(
        [0.135, 0.27, 0.135, 0.27, 0.135, 0.27, 0.27, 0.135, 0.135]
    )
    # one lookup per stretch asked: 16:30-..., 06:00-10:00, 00:30-01:00, 10:00-16:30,
    # 00:00-00:30 (V4's windows cut the day too)
    assert source.lookups == 5
    day_only = table.price("deepseek-chat", provider="deepseek", at=day.date())
    assert day_only.input == 0.135  # a day is its 00:00 UTC: off-peak


class _CountingWindows(GenaiSource):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def windows(self) -> tuple[int, ...] | None:
        self.reads += 1
        return super().windows()


def test_the_windows_are_not_read_again_while_the_data_is_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table whose prices all came from the user's entries never reads genai-prices' data:
    every lookup walked the layers for their sources' time-of-day windows, twice. (Whole
    prices, ``replace=True``: a partial one takes its unset rates from the layers below,
    which reads the data.)"""
    from llmguard_sdk.budget import _genai_table

    monkeypatch.setattr(_genai_table, "_loaded", [])  # genai-prices' data not read yet
    source = _CountingWindows()
    under = PriceTable(_source=source, _base=PriceTable.shipped_table())
    table = under.with_prices({"mine": Price(input=1.0, output=2.0)}, replace=True)
    day = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)
    for hour in range(50):
        at = day + dt.timedelta(hours=hour / 3)
        assert table.price("mine", at=at) == Price(input=1.0, output=2.0)
    assert source.reads == 1
    # once a lookup reads the data, its windows count (and are kept): no behaviour change
    peak = table.price("deepseek-chat", provider="deepseek", at=day + dt.timedelta(hours=8))
    off = table.price("deepseek-chat", provider="deepseek", at=day + dt.timedelta(hours=20))
    assert (peak.input, off.input) == (0.27, 0.135)
    reads = source.reads
    table.price("mine", at=day)
    table.price("deepseek-chat", provider="deepseek", at=day + dt.timedelta(hours=1))
    assert source.reads == reads


def test_a_moment_finds_the_users_dated_prices_too() -> None:
    table = PriceTable(
        {"m": [Price(1.0, 2.0), Price(3.0, 4.0, effective_from=dt.date(2026, 6, 1))]}
    )
    before = dt.datetime(2026, 5, 31, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-2)))
    assert table.price("m", at=before).input == 3.0  # 01:00 UTC on June 1st
    assert table.price("m", at=dt.datetime(2026, 5, 31, 23, 0)).input == 1.0  # naive: UTC


_MODELS = [
    ("gpt-5", "openai", None),
    ("gpt-5", "openai", "flex"),
    ("gpt-5", "openai", "priority"),
    ("gpt-4.1-mini", "openai", "batch"),
    ("o4-mini", "openai", None),
    ("claude-sonnet-4-5", "anthropic", None),
    ("claude-sonnet-4-5", "anthropic", "batch"),
    ("claude-haiku-4-5", "anthropic", None),
    ("gemini-2.5-pro", "google", None),
    ("gemini-2.5-flash", "google", None),
]
_CONTEXT = {"batch": {"processing": "batch"}, "flex": {"service_tier": "flex"}}
_CONTEXT["priority"] = {"service_tier": "priority"}


@settings(max_examples=150, deadline=None)
@given(
    case=st.sampled_from(_MODELS),
    plain=st.integers(0, 400_000),
    cached=st.integers(0, 50_000),
    short=st.integers(0, 20_000),
    hour=st.integers(0, 20_000),
    visible=st.integers(0, 30_000),
    reasoning=st.integers(0, 30_000),
)
def test_our_float_maths_matches_genai_prices_own_calculation(
    case: tuple[str, str, str | None],
    plain: int,
    cached: int,
    short: int,
    hour: int,
    visible: int,
    reasoning: int,
) -> None:
    model, provider, tier = case
    if provider != "anthropic":
        short = hour = 0  # writes are billed apart only by Anthropic
    usage = Usage(
        input_tokens=plain + cached + short + hour,
        cached_input_tokens=cached,
        cache_write_input_tokens=short + hour,
        cache_write_1h_input_tokens=hour,
        output_tokens=visible + reasoning,
        reasoning_tokens=reasoning,
    )
    ours = PriceTable.default_table().cost(usage, model, provider=provider, tier=tier).usd
    theirs = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input_tokens,
            cache_read_tokens=cached,
            cache_write_tokens=short + hour,
            cache_write_1h_tokens=hour,
            output_tokens=usage.output_tokens,
        ),
        model,
        provider_id=provider,
        price_context=_CONTEXT.get(tier or ""),
    )
    assert ours == pytest.approx(float(theirs.total_price), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    "bad",
    [
        {"input": 1, "output": 1, "tier": "gold"},
        {"input": 1, "output": 1, "cache_write_1h": -1},
        {"input": 1, "output": 1, "long_context": ((10, "x"),)},
    ],
)
def test_bad_tier_prices(bad: dict[str, Any]) -> None:
    from llmguard_sdk.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        Price(**bad)


def test_a_json_table_carries_tiers_and_long_context(tmp_path: Any) -> None:
    path = tmp_path / "prices.json"
    row = {"provider": "acme", "model": "m", "input": 2, "output": 4, "cache_write_1h": 4}
    long = {"above": 1000, "input": 3, "output": 6}
    rows = [{**row, "long_context": [long]}, {**row, "tier": "flex", "input": 1, "output": 2}]
    path.write_text(json.dumps({"schema": 1, "version": "t", "prices": rows}))
    table = PriceTable.from_json(path)
    assert table.price("m", provider="acme").for_input(1001).output == 6
    assert table.price("m", provider="acme", tier="flex").input == 1
    assert table.price("m", provider="acme", tier="batch").input == 1.0  # 2 at half price


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "llmguard_sdk.cli", "cost", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_cost_estimate_knows_source_models_the_batch_discount_and_shows_the_snapshot() -> None:
    common = ["--requests-per-day", "1000", "--input-tokens", "2000", "--output-tokens", "500"]
    standard = json.loads(_cli("estimate", *common, "--model", "claude-sonnet-4-5", "--json"))
    batch = json.loads(
        _cli(
            "estimate", *common, "--model", "claude-sonnet-4-5", "--service-tier", "batch", "--json"
        )
    )
    assert standard["options"][0]["per_request_p50_usd"] == pytest.approx(
        (2000 * 3 + 500 * 15) / 1e6
    )
    assert batch["options"][0]["monthly_p50_usd"] == pytest.approx(
        standard["options"][0]["monthly_p50_usd"] / 2
    )
    text = _cli("estimate", *common, "--model", "gpt-5")
    assert f"prices: genai-prices {genai_prices.__version__} (20" in text
    assert "claude-sonnet-4-5" in _cli("models", "sonnet-4-5")


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("claude-3-5-haiku", None),
        ("claude-3-7-sonnet", "anthropic"),
        ("claude-sonnet-4", None),
        ("claude-opus-4", None),
        ("claude-opus-4-1", "anthropic"),
        ("gemini-2.0-flash", "google"),
    ],
)
def test_a_batch_of_a_provider_that_halves_batches_is_half_price_without_batch_rates(
    caplog: pytest.LogCaptureFixture, model: str, provider: str | None
) -> None:
    """genai-prices lists no batch rates for these models: their batches were priced (and
    held) at the full standard rates, twice what Anthropic and Google bill."""
    table = PriceTable(_source=GenaiSource(), _base=PriceTable.shipped_table())
    standard = table.price(model, provider=provider)
    with caplog.at_level("WARNING", logger="llmguard_sdk"):
        batch = table.price(model, provider=provider, tier="batch")
    assert batch.tier == "batch"
    assert (batch.input, batch.output) == pytest.approx((standard.input / 2, standard.output / 2))
    assert caplog.records == []


@pytest.mark.parametrize(
    ("model", "provider", "tier"),
    [("gemini-2.5-pro", "google", "priority"), ("grok-3", "x-ai", "batch")],
)
def test_a_tier_without_its_rates_is_standard_and_said_once(
    caplog: pytest.LogCaptureFixture, model: str, provider: str, tier: str
) -> None:
    """A priority call without priority rates, a batch of a provider not known to halve
    batches without batch rates (it was standard without a word): standard, said once."""
    table = PriceTable(_source=GenaiSource(), _base=PriceTable.shipped_table())
    with caplog.at_level("WARNING", logger="llmguard_sdk"):
        for _ in range(3):
            price = table.price(model, provider=provider, tier=tier)
    assert price == table.price(model, provider=provider)  # standard rates
    said = [r for r in caplog.records if f"no {tier} rates for {model}" in r.message]
    assert len(said) == 1
