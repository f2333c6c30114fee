"""The genai-prices source: a compact table of its prices, the same answers as genai-prices for
every model it lists, and few objects left for the garbage collector to walk."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest

from llmguard_sdk.budget import Price
from llmguard_sdk.budget._source import TIERS, GenaiSource
from llmguard_sdk.models import Usage

from .conftest import genai_prices_or_skip

genai_prices = genai_prices_or_skip()

_CONTEXT = {
    "batch": {"processing": "batch"},
    "flex": {"service_tier": "flex"},
    "priority": {"service_tier": "priority"},
    "fast": {"service_tier": "fast"},
}
_DAY = dt.datetime.now(dt.timezone.utc).date()
_EARLIER = dt.date(2025, 3, 1)  # before many models' current prices (and before some models)


def _evening(day: dt.date) -> dt.datetime:
    """A call's time on ``day``: outside every time-of-day window (DeepSeek's peak hours)."""
    return dt.datetime.combine(day, dt.time(20), dt.timezone.utc)


def _peak(day: dt.date) -> dt.datetime:
    """A call's time on ``day``: inside every time-of-day window genai-prices lists."""
    return dt.datetime.combine(day, dt.time(8), dt.timezone.utc)


def _listed() -> list[tuple[str, str, set[str]]]:
    """``(provider id, model id, tiers with rates of their own)`` of every model genai-prices
    lists that its id finds (a fresh snapshot: the source lets go of the one it read)."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    found: list[tuple[str, str, set[str]]] = []
    for provider in snapshot.providers:
        for info in provider.models:
            try:
                owner, model = snapshot.find_provider_model(info.id, None, provider.id, None)
            except LookupError:
                continue
            if model is not info or owner is not provider:
                continue
            tiers = {
                tier
                for tier, context in _CONTEXT.items()
                for variant in info.price_variants or ()
                if all(context.get(k) == v for k, v in variant.when.items())
            }
            found.append((provider.id, info.id, tiers))
    return found


def _theirs(
    usage: Usage,
    model: str,
    provider: str | None,
    tier: str | None,
    at: dt.datetime | None = None,
) -> float:
    """genai-prices' price of ``usage`` (its tokens and its per-request fee)."""

    def calc(input_tokens: int, cached: int, output_tokens: int) -> Decimal:
        found = genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=input_tokens,
                cache_read_tokens=cached,
                output_tokens=output_tokens,
            ),
            model,
            provider_id=provider,
            genai_request_timestamp=at or _evening(_DAY),
            price_context=_CONTEXT.get(tier or ""),
        )
        total: Decimal = found.total_price
        return total

    return float(calc(usage.input_tokens, usage.cached_input_tokens, usage.output_tokens))


def _usages(price: Price) -> list[Usage]:
    """Calls below, at and past each long-context threshold, with and without cache reads."""
    counts = {1, 1_000, 50_000}
    for threshold, _ in price.long_context:
        counts.update({threshold, threshold + 1, threshold * 2})
    return [
        Usage(input_tokens=n, cached_input_tokens=cached, output_tokens=out)
        for n in sorted(counts)
        for cached, out in [(0, 700), (n // 4, 3)]
    ]


@pytest.mark.parametrize(
    ("tier", "at"),
    [
        (None, _evening(_DAY)),
        (None, _peak(_DAY)),
        (None, _evening(_EARLIER)),
        *((tier, _evening(_DAY)) for tier in TIERS),
        ("batch", _peak(_DAY)),
    ],
)
def test_every_listed_model_costs_what_genai_prices_says(tier: str | None, at: dt.datetime) -> None:
    source = GenaiSource()
    compared = tiered = 0
    for provider, model, tiers in _listed():
        if tier is not None and tier not in tiers:
            continue  # no rates of the tier's own: the table bills the standard ones
        price = source.find(model, provider, at, tier)
        if price is None:
            continue  # no token price (an embedding or audio model priced otherwise)
        tiered += bool(price.long_context)
        for usage in _usages(price):
            theirs = _theirs(usage, model, provider, tier, at)
            assert price.cost(usage) == pytest.approx(theirs, rel=1e-12, abs=1e-15), (
                provider,
                model,
                tier,
                at,
                usage,
            )
            compared += 1
    assert compared > (5_000 if tier is None else 50)
    assert tier is not None or tiered > 50  # long-context tiers were compared


def test_names_other_than_ids_find_the_model_genai_prices_finds() -> None:
    source = GenaiSource()
    usage = Usage(input_tokens=300_000, cached_input_tokens=1_000, output_tokens=2_000)
    refs = [
        ("gpt-5-2025-08-07", "openai"),
        ("GPT-5", None),
        ("claude-sonnet-4-5-20250929", None),
        ("claude-sonnet-4-5", "google"),  # Google's fallback to Anthropic's models
        ("gpt-4o", "azure"),
        ("anthropic/claude-haiku-4-5", "litellm"),
        ("gemini-2.5-pro", None),
        ("gpt-5.2-20251211", "openai"),  # a compact date, as LiteLLM writes it
    ]
    for model, provider in refs:
        price = source.find(model.lower(), provider, _DAY, None)
        assert price is not None, model
        assert price.cost(usage) == pytest.approx(_theirs(usage, model, provider, None))
    assert source.find("surely-not-a-model-7b", None, _DAY, None) is None
    assert source.find("gpt-5", "no-such-provider", _DAY, None) is None


# DeepSeek lists its peak price under a time-of-day window, the off-peak one without
_DEEPSEEK = ["deepseek-chat", "deepseek-reasoner", "deepseek-v4-flash", "deepseek-v4-pro"]
_UTC = dt.timezone.utc
_BEIJING = dt.timezone(dt.timedelta(hours=8))
_OCTOBER = dt.date(2026, 10, 1)  # after every DeepSeek price's start date
_TIMES = [
    dt.datetime.combine(_OCTOBER, moment, _UTC)
    for moment in (
        dt.time(0, 0),
        dt.time(0, 29, 59, 999_999),  # chat, reasoner: peak 00:30-16:30
        dt.time(0, 30),
        dt.time(1, 0),  # V4: peak 01:00-04:00 and 06:00-10:00
        dt.time(3, 59, 59, 999_999),
        dt.time(4, 0),
        dt.time(6, 0),
        dt.time(9, 59, 59),
        dt.time(10, 0),
        dt.time(16, 29, 59),
        dt.time(16, 30),
        dt.time(23, 59, 59, 999_999),
    )
] + [
    dt.datetime(2026, 10, 1, 9, 30, tzinfo=_BEIJING),  # 01:30 UTC: an offset is read in UTC
    dt.datetime(2026, 10, 2, 0, 15, tzinfo=_BEIJING),  # 16:15 UTC the day before
    dt.datetime(2026, 10, 1, 7, 0),  # naive: UTC, as genai-prices reads it
    # a weekend: DeepSeek bills V4 models off-peak all day, but genai-prices' windows hold
    # every day (its data calls its weekend peak prices an upper bound), and so do ours
    dt.datetime(2026, 10, 3, 2, 0, tzinfo=_UTC),  # Saturday, in every model's peak
    dt.datetime(2026, 10, 4, 8, 0, tzinfo=_UTC),  # Sunday, likewise
    dt.datetime(2026, 10, 4, 20, 0, tzinfo=_UTC),  # Sunday evening: off-peak
]


@pytest.mark.parametrize("model", _DEEPSEEK)
def test_time_of_day_prices_are_the_ones_genai_prices_applies(model: str) -> None:
    from llmguard_sdk.budget import PriceTable

    source = GenaiSource()
    table = PriceTable.default_table()
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=200_000, output_tokens=300_000)
    inputs = set()
    for at in _TIMES:
        theirs = _theirs(usage, model, "deepseek", None, at)
        price = source.find(model, "deepseek", at, None)
        assert price is not None
        assert price.cost(usage) == pytest.approx(theirs, rel=1e-12), (model, at)
        # the table's cache, asked in this order on one day, never serves one stretch's
        # price in another
        assert table.cost(usage, model, provider="deepseek", at=at).usd == pytest.approx(
            theirs, rel=1e-12
        ), (model, at)
        inputs.add(price.input)
    assert len(inputs) == 2  # the peak price and the off-peak one both came up
    peak = table.price(model, provider="deepseek", at=_peak(_OCTOBER))
    evening = table.price(model, provider="deepseek", at=_evening(_OCTOBER))
    assert peak.input > evening.input
    assert peak.output > evening.output


def test_deepseek_chat_costs_twice_as_much_at_peak() -> None:
    """The case that was wrong: deepseek-chat billed $0.135/M input at any hour."""
    peak = GenaiSource().find("deepseek-chat", "deepseek", _peak(_OCTOBER), None)
    evening = GenaiSource().find("deepseek-chat", "deepseek", _evening(_OCTOBER), None)
    assert peak is not None
    assert evening is not None
    assert (peak.input, peak.output, peak.cached_rate) == (0.27, 1.1, 0.07)
    assert (evening.input, evening.output, evening.cached_rate) == (0.135, 0.55, 0.035)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (dt.time(22, 0, tzinfo=_UTC), dt.time(2, 0, tzinfo=_UTC)),  # wraps past midnight
        (dt.time(0, 30, tzinfo=_BEIJING), dt.time(8, 30, tzinfo=_BEIJING)),  # 16:30-00:30 UTC
        (dt.time(9, 0, tzinfo=_BEIJING), dt.time(12, 0, tzinfo=_BEIJING)),  # 01:00-04:00 UTC
        (dt.time(6, 0), dt.time(10, 0, 0, 500)),  # naive times are UTC
        (dt.time(5, 0), dt.time(5, 0)),  # empty: never
    ],
)
def test_a_window_holds_exactly_when_genai_prices_says_it_does(
    start: dt.time, end: dt.time
) -> None:
    """Windows genai-prices' data does not list yet, against its own constraint."""
    from genai_prices.types import TimeOfDateConstraint

    from llmguard_sdk.budget import _genai_table, _source

    constraint = TimeOfDateConstraint(start_time=start, end_time=end)
    since = _genai_table._since(constraint)
    day = dt.datetime(2026, 10, 1, tzinfo=_UTC)
    edges = [dt.timedelta(minutes=m) for m in range(0, 24 * 60, 30)]
    edges += [
        dt.timedelta(hours=h, microseconds=d)
        for h in (0, 1, 2, 4, 10, 16, 22)
        for d in (-1, 0, 500)
    ]
    for offset in edges:
        for at in (day + offset, (day + offset).astimezone(_BEIJING)):
            ours = _genai_table.active(since, *_source._ordinal(at))
            assert ours == constraint.active(at), (start, end, at)


_LOAD = """
import gc, json, sys, time
import genai_prices  # the package's own import (its modules) is not the price table
from llmguard_sdk.budget import PriceTable
gc.collect()
before = len(gc.get_objects())
start = time.perf_counter()
price = PriceTable.default_table().find("gemini-2.5-pro", provider="google")
seconds = time.perf_counter() - start
gc.collect()
added = len(gc.get_objects()) - before
usage = genai_prices.Usage(input_tokens=300_000, output_tokens=1_000)  # still usable
theirs = genai_prices.calc_price(usage, "gemini-2.5-pro", provider_id="google").total_price
print(json.dumps({"added": added, "seconds": seconds, "input": price.for_input(300_000).input,
                  "theirs": float(theirs)}))
"""


def test_the_price_table_leaves_few_objects_for_the_garbage_collector() -> None:
    """genai-prices' snapshot is ~16k tracked objects, which every full collection walked in
    a long-running server; the source keeps a compact table of its own instead."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD], capture_output=True, text=True, timeout=120, check=True
    )
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["added"] < 1_000, found
    assert found["theirs"] == pytest.approx((300_000 * found["input"] + 1_000 * 15.0) / 1e6)


_KEPT = """
import sys
from genai_prices import data_snapshot
snapshot = data_snapshot.get_snapshot()  # the application's own use of genai-prices
from llmguard_sdk.budget import PriceTable
assert PriceTable.default_table().find("gpt-5", provider="openai") is not None
assert "genai_prices.data" in sys.modules and data_snapshot.get_snapshot() is snapshot
"""


def test_data_genai_prices_loaded_for_someone_else_is_left_alone() -> None:
    subprocess.run([sys.executable, "-c", _KEPT], capture_output=True, timeout=120, check=True)
