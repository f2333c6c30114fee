"""``PriceTable.with_prices``: a price given for a model the table knows changes the rates it
gives, the others are the table's (a partial override); ``replace=True`` replaces the whole
entry, as every override did."""

from __future__ import annotations

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.models import Usage

from .conftest import genai_prices_or_skip

LISTED = Price(
    input=1.0,
    output=4.0,
    cached_input=0.1,
    cache_write=1.25,
    cache_write_1h=2.5,
    cache_write_12h=2.0,
    reasoning=6.0,
)
TABLE = PriceTable({"m": LISTED, "vendor/v": LISTED}, version="listed")
RATES = ("cached_input", "cache_write", "cache_write_1h", "cache_write_12h", "reasoning")


def test_a_partial_override_keeps_the_rates_it_does_not_give() -> None:
    """``with_prices({"m": Price(input=0.8, output=3.2)})`` lost the table's cache_write_12h
    (a 12-hour write then paid the 30-minute rate, with a warning), its cached-read rate (a
    read then paid the full input rate) and the others."""
    price = TABLE.with_prices({"m": Price(input=0.8, output=3.2)}).price("m")
    assert (price.input, price.output) == (0.8, 3.2)
    assert [getattr(price, rate) for rate in RATES] == [getattr(LISTED, rate) for rate in RATES]
    usage = Usage(
        input_tokens=1000, cache_write_input_tokens=1000, cache_write_12h_input_tokens=1000
    )
    assert price.cost(usage) == pytest.approx(1000 * 2.0 / 1e6)


def test_a_rate_given_wins_and_replace_keeps_the_whole_entry() -> None:
    given = Price(input=0.8, output=3.2, cached_input=0.2)
    price = TABLE.with_prices({"m": given}).price("m")
    assert (price.cached_input, price.cache_write_12h) == (0.2, 2.0)
    replaced = TABLE.with_prices({"m": given}, replace=True).price("m")
    assert replaced == given  # (its unset rates default to its own input, as before)
    assert replaced.write_12h_rate == 0.8


def test_a_route_price_keeps_the_rates_the_table_gives_its_model() -> None:
    """A price for one route (``"route/model"``) over the model's price for any provider, and
    over the vendor's price under another provider: the rates the table gave that route."""
    table = TABLE.with_prices({"route/m": Price(input=0.5, output=2.0)})
    assert table.price("m", provider="route").cache_write_12h == 2.0
    assert table.price("m").input == 1.0  # (other routes: the table's)
    vendor = TABLE.with_prices({"mine/v": Price(input=0.5, output=2.0)})
    assert vendor.price("v", provider="mine").cached_input == 0.1


def test_a_model_the_table_lacks_is_the_price_given() -> None:
    given = Price(input=0.5, output=2.0)
    assert TABLE.with_prices({"new": given}).price("new") == given


def test_the_default_table_keeps_its_cache_rates_under_a_partial_override() -> None:
    genai_prices_or_skip()
    listed = PriceTable.default_table().price("gpt-4o-mini", provider="openai")
    assert listed.cached_input is not None
    mine = PriceTable.default_table().with_prices({"gpt-4o-mini": Price(input=0.1, output=0.4)})
    price = mine.price("gpt-4o-mini", provider="openai")
    assert (price.input, price.output, price.cached_input) == (0.1, 0.4, listed.cached_input)


def test_replace_is_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="replace must be True or False"):
        TABLE.with_prices({"m": LISTED}, replace="yes")  # type: ignore[arg-type]
