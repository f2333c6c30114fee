"""Prices read from Pydantic's ``genai-prices`` package, converted once per model and moment.

``genai-prices`` keeps prices per provider and model with date ranges, long-context tiers
(``TieredPrices``: past a number of input tokens, every token of the call pays the tier's
rate) and variants per request context (``service_tier`` flex / priority / fast, and
``processing`` batch). This module turns what one model costs at one moment and one service
tier into a :class:`~llmguard_sdk.budget.Price`, so that the per-call path only does float
maths on a price looked up once (the :class:`~llmguard_sdk.budget.PriceTable` caches it).
The data is read once into a compact table of our own (``_genai_table``), and genai-prices'
objects are let go of.

Time-of-day windows (DeepSeek's peak hours) apply as genai-prices applies them: in UTC, from
the window's start (included) to its end (excluded), past midnight when it ends before it
starts; the last price whose constraint holds counts. :meth:`GenaiSource.windows` gives the
times of day where a window opens or closes, for the table's cache.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from . import _genai_table
from ._genai_table import CONTEXT, FIELDS
from ._tool_fees import TOOLS, with_model_fees

if TYPE_CHECKING:
    from ._price import Price

__all__ = ["TIERS", "GenaiSource", "instant", "moment", "normal_tier"]

TIERS = tuple(CONTEXT)
"""The service tiers priced apart from the standard one: batch, flex, priority, fast."""

_NAMES = {
    "input_mtok": "input",
    "output_mtok": "output",
    "cache_read_mtok": "cached_input",
    "cache_write_mtok": "cache_write",
    "cache_write_1h_mtok": "cache_write_1h",
    "output_reasoning_mtok": "reasoning",
    "input_audio_mtok": "input_audio",
    "output_audio_mtok": "output_audio",
    "requests_kcount": "per_request",
    "web_searches_kcount": "web_search",
    "storage_searches_kcount": "file_search",
    "code_executions_kcount": "code_execution",
}
"""The :class:`~llmguard_sdk.budget.Price` field of each of genai-prices' rates read."""
assert tuple(_NAMES) == FIELDS


def normal_tier(tier: str | None) -> str | None:
    """A provider's service tier name as the price tables know it: ``"flex"``,
    ``"priority"``, ``"batch"`` or ``"fast"``; ``None`` for the standard tier (OpenAI's
    ``"default"`` and ``"auto"``, Anthropic's ``"standard"``) and names without a price of
    their own."""
    if tier is None:
        return None
    name = tier.strip().lower()
    return name if name in TIERS else None


class GenaiSource:
    """Lookups in the ``genai-prices`` data (read on first use)."""

    def find(self, model: str, provider: str | None, at: dt.date, tier: str | None) -> Price | None:
        """The price of ``model`` (served by ``provider`` when it names a provider the data
        knows) at ``at`` (a datetime, naive meaning UTC; a date: its 00:00 UTC) at service
        tier ``tier``; None when the data has no token price for it (or none for that
        tier)."""
        table = _genai_table.load()
        found = _genai_table.find(table, model, provider) if table is not None else None
        if table is None or found is None:
            return None
        owner, info = found
        conditional, variants = _genai_table.prices(table, info)
        when = _ordinal(at)
        fields = _standard(conditional, when)
        if tier is not None:
            own = _genai_table.owns(table, owner, info)  # variants are the owner's only
            overrides = _variant(variants, when, CONTEXT[tier]) if own else None
            if not overrides:
                return None
            fields = {**fields, **overrides}
        price = _to_price(fields, tier)
        # a chat search model's fee is its own (genai-prices lists gpt-4o-mini-search-preview
        # under gpt-4o-mini, at the web search tool's fee)
        return price if price is None else with_model_fees(price, model, genai=True)

    def owner(self, model: str, provider: str | None) -> str | None:
        """The id of the provider whose data :meth:`find` prices ``model`` from
        (``"anthropic"``, ``"openai"``, ``"google"`` ...); None when the data has no such
        model."""
        table = _genai_table.load()
        found = _genai_table.find(table, model, provider) if table is not None else None
        return table.provider_ids[found[0]] if table is not None and found is not None else None

    def models(self) -> Iterator[tuple[str, str]]:
        """``(provider id, model id)`` of every model with a token price that its id finds."""
        when = _ordinal(dt.datetime.now(dt.timezone.utc))
        table = _genai_table.load()
        if table is None:
            return
        for provider, info in _genai_table.models(table):
            fields = _standard(_genai_table.prices(table, info)[0], when)
            if "input_mtok" in fields and "output_mtok" in fields:
                yield provider, table.model_ids[info]

    def windows(self) -> tuple[int, ...] | None:
        """The times of day (microseconds into the UTC day, sorted) where a time-of-day
        price window opens or closes; ``None`` while the data is not read yet (this does
        not read it)."""
        return _genai_table.windows()

    @property
    def version(self) -> str:
        """``genai-prices <version> (<snapshot date>)``, or why its data is not read."""
        table = _genai_table.load()
        installed = _genai_table.version()
        if installed is None:
            return "genai-prices (not installed)"
        if table is None:
            low, high = _genai_table.READS
            return f"genai-prices {installed} (not read: this reads >={low},<{high})"
        return f"genai-prices {installed} ({table.snapshot_date})"


_DAY_NS = 86_400 * 10**9
_today: tuple[int, dt.date] = (-1, dt.date(1970, 1, 1))
_last_moment: tuple[object, tuple[dt.date, int]] = (None, (dt.date(1970, 1, 1), 0))


def moment(at: dt.date | None) -> tuple[dt.date, int]:
    """``(UTC day, microseconds into it)`` of ``at``, as genai-prices reads a request's
    timestamp (a naive datetime is UTC); a date is its 00:00; ``None`` is now (today's date
    made once a day: a price lookup is on every call's path)."""
    global _today, _last_moment
    if isinstance(at, dt.datetime):
        last = _last_moment  # the call's start, asked for its hold, then for its cost
        if last[0] is at:
            return last[1]
        given = at
        if at.tzinfo is not None:
            at = at.astimezone(dt.timezone.utc)
        found = at.date(), _genai_table.micros(at)
        _last_moment = (given, found)
        return found
    if at is not None:
        return at, 0
    number, rest = divmod(time.time_ns(), _DAY_NS)
    if number != _today[0]:
        _today = (number, dt.date(1970, 1, 1) + dt.timedelta(days=number))
    return _today[1], rest // 1000


def instant(day: dt.date, micros: int) -> dt.datetime:
    """The UTC moment ``micros`` microseconds into ``day``."""
    start = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
    return start + dt.timedelta(microseconds=micros)


def _ordinal(at: dt.date) -> tuple[int, int]:
    day, micros = moment(at)
    return day.toordinal(), micros


def _active(since: int | list[int] | None, when: tuple[int, int]) -> bool:
    return _genai_table.active(since, *when)


def _fields(rates: list[Any]) -> dict[str, Any]:
    return {key: rate for key, rate in zip(FIELDS, rates, strict=True) if rate is not None}


def _standard(conditional: list[Any], when: tuple[int, int]) -> dict[str, Any]:
    chosen = conditional[0][1]
    for since, rates in reversed(conditional):
        if _active(since, when):
            chosen = rates
            break
    return _fields(chosen)


def _variant(
    variants: list[Any], at: tuple[int, int], context: Mapping[str, str]
) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for when, since, rates in variants:
        if _active(since, at) and all(context.get(key) == value for key, value in when):
            for key, rate in _fields(rates).items():
                overrides.setdefault(key, rate)
    return overrides


def _rate(value: Any, above: int | None) -> float:
    """A flat rate, or a tiered one's rate for a call of more than ``above`` input tokens."""
    if isinstance(value, float):
        return value
    rate: float
    rate, steps = value
    if above is not None:
        for start, price in steps:
            if above >= start:
                rate = price
    return rate


def _to_price(fields: Mapping[str, Any], tier: str | None) -> Price | None:
    from ._price import Price

    if "input_mtok" not in fields or "output_mtok" not in fields:
        return None
    tiered = [value for value in fields.values() if not isinstance(value, float)]
    starts = sorted({start for value in tiered for start, _ in value[1]})

    def at(above: int | None) -> Price:
        rates: dict[str, Any] = {_NAMES[k]: _rate(value, above) for k, value in fields.items()}
        for fee in ("per_request", *(tool.fee for tool in TOOLS)):  # (per thousand)
            if fee in rates:
                rates[fee] /= 1000.0
        return Price(**rates, tier=tier)

    flat = at(None)
    if not starts:
        return flat
    rates: dict[str, Any] = {name: getattr(flat, name) for name in _NAMES.values()}
    return Price(
        **rates,
        tier=tier,
        long_context=tuple((start, at(start)) for start in starts),
    )
