"""Estimating a monthly bill (``llmguard cost estimate``).

:func:`estimate` prices a workload under each option (one model, or a routing split such as
70 % small / 30 % large)::

    monthly = requests/day x days x (1 - cache hit rate) x (1 + retry rate)
              x (input tokens x input price + output tokens x output price
                 + the fee per request, ``Price.per_request``)

at the p50 and the p95 token counts; input read from a provider's prompt cache
(``cached_input_share``) is priced at the cached rate, every call at the prices of its
service ``tier`` (``"batch"``: the batch discount) and of its long-context tier. A day's
calls are priced at the dearest price in force during that day: a model with time-of-day
prices (DeepSeek's peak hours) is forecast at its peak price, whatever the hour the estimate
is made at (a budget forecast must not under-estimate).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from . import _genai_table
from ._source import instant, moment
from .prices import Price, PriceTable

__all__ = ["Option", "estimate"]


@dataclass(frozen=True)
class Option:
    """One priced option of an estimate: per request and per month, at p50 and p95."""

    name: str
    per_request_p50_usd: float
    per_request_p95_usd: float
    monthly_p50_usd: float
    monthly_p95_usd: float


def _request_cost(price: Price, input_tokens: float, output_tokens: float, cached: float) -> float:
    price = price.for_input(input_tokens)
    plain = input_tokens * (1.0 - cached)
    return (price.per_request or 0.0) + (
        plain * price.input
        + input_tokens * cached * price.cached_rate
        + output_tokens * price.output
    ) / 1_000_000


def _day_prices(table: PriceTable, name: str, tier: str | None, day: dt.date) -> list[Price]:
    """The prices of ``name`` in force during ``day`` (UTC): at its start and at each
    time-of-day window's edge (between two edges a price holds)."""
    provider, _, model = name.rpartition("/")
    first = table.price(model, provider=provider or None, at=day, tier=tier)  # reads the data
    edges = _genai_table.windows() or ()
    return [first] + [
        table.price(model, provider=provider or None, at=instant(day, edge), tier=tier)
        for edge in edges
    ]


def _dearest(
    prices: list[Price], input_tokens: float, output_tokens: float, cached: float
) -> float:
    return max(_request_cost(p, input_tokens, output_tokens, cached) for p in prices)


def estimate(
    table: PriceTable,
    *,
    requests_per_day: float,
    input_tokens: tuple[float, float],
    output_tokens: tuple[float, float],
    options: list[tuple[str, dict[str, float]]],
    cache_hit_rate: float = 0.0,
    cached_input_share: float = 0.0,
    retry_rate: float = 0.0,
    days: float = 30.0,
    tier: str | None = None,
    at: dt.date | None = None,
) -> list[Option]:
    """Price each option: ``(name, {model: share})`` with shares summing to 1, at service
    ``tier`` (``None``: standard), each model at the dearest price in force during the UTC
    day of ``at`` (a datetime or a date; default: today), so that a forecast never depends
    on the hour it is made at nor under-estimates (DeepSeek: its peak price)."""
    billed = requests_per_day * days * (1.0 - cache_hit_rate) * (1.0 + retry_rate)
    day = moment(at)[0]
    found: list[Option] = []
    for name, split in options:
        prices = [(_day_prices(table, model, tier, day), share) for model, share in split.items()]
        p50 = sum(
            share * _dearest(p, input_tokens[0], output_tokens[0], cached_input_share)
            for p, share in prices
        )
        p95 = sum(
            share * _dearest(p, input_tokens[1], output_tokens[1], cached_input_share)
            for p, share in prices
        )
        found.append(Option(name, p50, p95, p50 * billed, p95 * billed))
    return found
