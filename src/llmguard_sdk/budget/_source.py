"""Prices read from Pydantic's ``genai-prices`` package, converted once per model and day.

``genai-prices`` keeps prices per provider and model with date ranges, long-context tiers
(``TieredPrices``: past a number of input tokens, every token of the call pays the tier's
rate) and variants per request context (``service_tier`` flex / priority / fast, and
``processing`` batch). This module turns what one model costs on one day and one service tier
into a :class:`~llmguard_sdk.budget.Price`, so that the per-call path only does float maths
on a price looked up once (the :class:`~llmguard_sdk.budget.PriceTable` caches it).

Off-peak prices (a time-of-day window, DeepSeek's) are not applied: the standard price
counts, which is the higher one.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .prices import Price

__all__ = ["TIERS", "GenaiSource", "normal_tier"]

TIERS = ("batch", "flex", "priority", "fast")
"""The service tiers priced apart from the standard one."""

_CONTEXT: dict[str, dict[str, str]] = {
    "batch": {"processing": "batch"},
    "flex": {"service_tier": "flex"},
    "priority": {"service_tier": "priority"},
    "fast": {"service_tier": "fast"},
}
_FIELDS = {
    "input_mtok": "input",
    "output_mtok": "output",
    "cache_read_mtok": "cached_input",
    "cache_write_mtok": "cache_write",
    "cache_write_1h_mtok": "cache_write_1h",
    "output_reasoning_mtok": "reasoning",
}
_DATE = re.compile(r"(?:verified|as of|checked)[a-z ]* (20\d\d-\d\d-\d\d)")


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
    """Lookups in the ``genai-prices`` data (imported on first use)."""

    def __init__(self) -> None:
        self._snapshot: Any = None

    def _data(self) -> Any:
        if self._snapshot is None:
            self._snapshot = _snapshot()
        return self._snapshot

    def find(
        self, model: str, provider: str | None, day: dt.date, tier: str | None
    ) -> Price | None:
        """The price of ``model`` (served by ``provider`` when it names a provider the data
        knows) on ``day`` at service tier ``tier``; None when the data has no token price for
        it (or none for that tier)."""
        found = self._model(model, provider) if self._data() is not _ABSENT else None
        if found is None:
            return None
        owner, info = found
        fields = _standard(info, day)
        if tier is not None:
            own = any(info is m for m in owner.models)  # variants are the owner's only
            overrides = _variant(info, day, _CONTEXT[tier]) if own else None
            if not overrides:
                return None
            fields = {**fields, **overrides}
        return _to_price(fields, tier)

    def _model(self, model: str, provider: str | None) -> tuple[Any, Any] | None:
        """The provider named (when the data knows it), else the one whose models' names
        look like ``model``, else the first provider listing it."""
        data = self._data()
        try:
            found: tuple[Any, Any] = data.find_provider_model(model, None, provider, None)
            return found
        except LookupError:
            if provider is not None:
                return None
        for owner in data.providers:
            info = owner.find_model(model)
            if info is not None:
                return owner, info
        return None

    def models(self) -> Iterator[tuple[str, str]]:
        """``(provider id, model id)`` of every model with a token price that its id finds."""
        day = dt.datetime.now(dt.timezone.utc).date()
        for provider in _providers():
            for info in provider.models:
                fields = _standard(info, day)
                if "input_mtok" in fields and "output_mtok" in fields and info.is_match(info.id):
                    yield provider.id, info.id

    @property
    def version(self) -> str:
        """``genai-prices <version> (<snapshot date>)``."""
        if self._data() is _ABSENT:
            return "genai-prices (not installed)"
        from genai_prices import __version__

        return f"genai-prices {__version__} ({snapshot_date()})"


_ABSENT = object()


def _snapshot() -> Any:
    """genai-prices' data (a snapshot it was given with ``UpdatePrices``, else the bundled
    one); ``_ABSENT`` when the package is not installed (Python 3.10)."""
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return _ABSENT
    return data_snapshot.get_snapshot()


def _providers() -> list[Any]:
    data = _snapshot()
    return [] if data is _ABSENT else list(data.providers)


@functools.lru_cache(maxsize=1)
def snapshot_date() -> str:
    """The newest day the bundled data says its prices were verified on."""
    providers = _providers()
    dates = [
        day
        for provider in providers
        for info in [provider, *provider.models]
        for day in _DATE.findall(info.price_comments or "")
    ]
    return max(dates, default="undated")


def _active(constraint: Any, day: dt.date) -> bool:
    if constraint is None:
        return True
    start = getattr(constraint, "start_date", None)
    return start is not None and start <= day  # time-of-day windows: never (see module doc)


def _standard(info: Any, day: dt.date) -> dict[str, Any]:
    prices = info.prices
    if isinstance(prices, list):
        chosen = prices[0].prices
        for conditional in reversed(prices):
            if _active(conditional.constraint, day):
                chosen = conditional.prices
                break
        prices = chosen
    return {k: v for k, v in vars(prices).items() if k in _FIELDS and v is not None}


def _variant(info: Any, day: dt.date, context: Mapping[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for variant in info.price_variants or ():
        if not _active(variant.constraint, day):
            continue
        if all(context.get(key) == value for key, value in variant.when.items()):
            for key, value in vars(variant.prices).items():
                if key in _FIELDS and value is not None:
                    overrides.setdefault(key, value)
    return overrides


def _rate(value: Any, above: int | None) -> float:
    """A flat rate, or a tiered one's rate for a call of more than ``above`` input tokens."""
    if isinstance(value, Decimal):
        return float(value)
    rate = value.base
    if above is not None:
        for tier in value.tiers:
            if above >= tier.start:
                rate = tier.price
    return float(rate)


def _to_price(fields: Mapping[str, Any], tier: str | None) -> Price | None:
    from .prices import Price

    if "input_mtok" not in fields or "output_mtok" not in fields:
        return None
    tiered = [value for value in fields.values() if not isinstance(value, Decimal)]
    starts = sorted({step.start for value in tiered for step in value.tiers})

    def at(above: int | None) -> Price:
        rates: dict[str, Any] = {_FIELDS[k]: _rate(value, above) for k, value in fields.items()}
        return Price(**rates, tier=tier)

    flat = at(None)
    if not starts:
        return flat
    rates: dict[str, Any] = {name: getattr(flat, name) for name in _FIELDS.values()}
    return Price(
        **rates,
        tier=tier,
        long_context=tuple((start, at(start)) for start in starts),
    )
