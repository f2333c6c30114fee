"""Prices per model, and the cost of a call from its usage.

A :class:`PriceTable` holds, per provider and model, the USD price per million tokens of
input, output, cached input (read from the provider's prompt cache) and cache writes, each
from an effective date. The package ships a versioned table (``prices.json``); user prices
override it. An unknown model is an :class:`UnknownModelPriceError`, or the table's configured
``default`` price: never a silent $0.

Costs from usage follow :class:`~llmguard_sdk.models.Usage`: ``input_tokens`` counts every
input token, ``cached_input_tokens`` and ``cache_write_input_tokens`` among them, so::

    cost = (input - cached - written) * input_price + cached * cached_input_price
           + written * cache_write_price + output * output_price

A cost the provider reported (``ChatResponse.cost_usd`` with ``cost_source="reported"``) wins
over the table; a cost from the table is always ``"estimated"``.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigurationError, UnknownModelPriceError
from ..models import ChatResponse, Usage

__all__ = [
    "Cost",
    "Price",
    "PriceTable",
    "UnknownModelPriceError",
    "cost_of_response",
]

_MILLION = 1_000_000.0
_DATED = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class Price:
    """USD per million tokens; ``cached_input`` and ``cache_write`` default to ``input``.

    ``effective_from`` is the first UTC day the price applies (entries of one model with
    later dates replace earlier ones from their date on).
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    effective_from: dt.date = _EPOCH

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input", "cache_write"):
            value = getattr(self, name)
            if value is None and name in ("cached_input", "cache_write"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value < math.inf
            ):
                raise ConfigurationError(f"price {name} must be a number >= 0, got {value!r}")
        if not isinstance(self.effective_from, dt.date):
            raise ConfigurationError("effective_from must be a datetime.date")

    @property
    def cached_rate(self) -> float:
        """Price of a cached input token read (per million)."""
        return self.input if self.cached_input is None else self.cached_input

    @property
    def write_rate(self) -> float:
        """Price of an input token written to the prompt cache (per million)."""
        return self.input if self.cache_write is None else self.cache_write

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at this price (cached tokens at their own rates)."""
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        written = min(usage.cache_write_input_tokens, usage.input_tokens - cached)
        plain = usage.input_tokens - cached - written
        return (
            plain * self.input
            + cached * self.cached_rate
            + written * self.write_rate
            + usage.output_tokens * self.output
        ) / _MILLION

    def worst_case(self, input_tokens: float, output_tokens: float) -> float:
        """The most a call of this many tokens can cost (no input counted as cached)."""
        return (
            input_tokens * max(self.input, self.write_rate) + output_tokens * self.output
        ) / _MILLION


@dataclass(frozen=True)
class Cost:
    """A call's cost in USD and where it came from (``"reported"`` or ``"estimated"``)."""

    usd: float
    source: Literal["reported", "estimated"]


class PriceTable:
    """Prices per ``(provider, model)`` with effective dates, plus user overrides.

    Lookups try, in order: the user's prices, then the shipped table; within each, the exact
    ``provider/model`` first, then the model under any provider, then both again with a date
    or ``-latest`` suffix removed (``gpt-4o-mini-2024-07-18`` finds ``gpt-4o-mini``). The
    Guard looks a route up with its route name as the provider, so prices can target a route::

        table = PriceTable.default().with_prices({
            "my-vllm/llama-3.3-70b": Price(input=0.2, output=0.2),   # one route
            "gpt-4o-mini": Price(input=0.1, output=0.4),             # any provider
        })

    Args:
        entries: ``{"provider/model" or "model": Price or [Price, ...]}``.
        default: the price of any model not found; ``None`` (default) makes an unknown model
            an :class:`UnknownModelPriceError`.
        version: a label for the table's origin.
    """

    def __init__(
        self,
        entries: Mapping[str, Price | Iterable[Price]] | None = None,
        *,
        default: Price | None = None,
        version: str = "custom",
        _base: PriceTable | None = None,
    ) -> None:
        self.version = version
        self.default = default
        self._base = _base
        self._entries: dict[str, tuple[Price, ...]] = {}
        for key, value in (entries or {}).items():
            prices = (value,) if isinstance(value, Price) else tuple(value)
            if not isinstance(key, str) or not key.strip("/") or not prices:
                raise ConfigurationError(f"bad price entry {key!r}")
            if not all(isinstance(p, Price) for p in prices):
                raise ConfigurationError(f"price entry {key!r} must hold Price objects")
            self._entries[key.lower()] = tuple(sorted(prices, key=lambda p: p.effective_from))
        self._cache: dict[tuple[str | None, str, dt.date], Price | None] = {}

    def __repr__(self) -> str:
        return f"PriceTable(version={self.version!r}, models={len(self._entries)})"

    @classmethod
    def default_table(cls) -> PriceTable:
        """The table shipped with the package (``prices.json``; see its ``version``)."""
        return _shipped()

    @classmethod
    def from_json(cls, source: str | Path | Mapping[str, Any]) -> PriceTable:
        """A table from a JSON file (or its parsed object) in the shipped table's shape."""
        if isinstance(source, Mapping):
            data: Any = source
        else:
            try:
                data = json.loads(Path(source).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ConfigurationError(f"cannot read price table {source}: {exc}") from None
        return _parse_table(data)

    def with_prices(
        self, entries: Mapping[str, Price | Iterable[Price]], *, default: Price | None = None
    ) -> PriceTable:
        """A new table whose ``entries`` (and ``default``) win over this one's."""
        return PriceTable(
            entries,
            default=default if default is not None else self.default,
            version=f"{self.version}+custom",
            _base=self,
        )

    def find(
        self, model: str, *, provider: str | None = None, at: dt.date | None = None
    ) -> Price | None:
        """The price of ``model`` on day ``at`` (default today, UTC), or None if unknown."""
        day = at or dt.datetime.now(dt.timezone.utc).date()
        key = (provider.lower() if provider else None, model.lower(), day)
        if key in self._cache:
            return self._cache[key]
        found = self._find(key[1], key[0], day)
        if len(self._cache) < 4096:
            self._cache[key] = found
        return found

    def _find(self, model: str, provider: str | None, day: dt.date) -> Price | None:
        names = [model]
        undated = _DATED.sub("", model)
        if undated != model:
            names.append(undated)
        layers: list[PriceTable] = []
        table: PriceTable | None = self
        while table is not None:
            layers.append(table)
            table = table._base
        for name in names:
            # this provider's own price first (user prices over shipped), then the model's
            # price for any provider, then the model under another provider: the shipped
            # (vendor) entries before a user's entry meant for one route
            keys = [f"{provider}/{name}"] if provider else []
            for key in [*keys, name]:
                for layer in layers:
                    price = _dated(layer._entries.get(key), day)
                    if price is not None:
                        return price
            for layer in reversed(layers):
                for key, prices in layer._entries.items():
                    if key.rpartition("/")[2] == name:
                        price = _dated(prices, day)
                        if price is not None:
                            return price
        return None

    def price(self, model: str, *, provider: str | None = None, at: dt.date | None = None) -> Price:
        """Like :meth:`find`, but an unknown model gives the default price or raises
        :class:`UnknownModelPriceError`."""
        found = self.find(model, provider=provider, at=at)
        if found is not None:
            return found
        if self.default is not None:
            return self.default
        base = self._base
        while base is not None:
            if base.default is not None:
                return base.default
            base = base._base
        raise UnknownModelPriceError(provider, model)

    def cost(
        self, usage: Usage, model: str, *, provider: str | None = None, at: dt.date | None = None
    ) -> Cost:
        """The estimated cost of ``usage`` on ``model`` (raises for an unknown model)."""
        return Cost(self.price(model, provider=provider, at=at).cost(usage), "estimated")


def cost_of_response(
    response: ChatResponse,
    table: PriceTable,
    *,
    model: str,
    provider: str | None = None,
    usage: Usage | None = None,
) -> Cost | None:
    """The provider's reported cost when there is one, else the table's estimate from
    ``usage`` (default: the response's); ``None`` when there is no usage or the model has no
    price."""
    if response.cost_usd is not None and response.cost_source == "reported":
        return Cost(response.cost_usd, "reported")
    usage = usage or response.usage
    if usage is None:
        return None
    price = table.find(model, provider=provider)
    if price is None and response.model and response.model != model:
        price = table.find(response.model, provider=provider)
    if price is None:
        price = table.default
        if price is None:
            return None
    return Cost(price.cost(usage), "estimated")


def _dated(prices: tuple[Price, ...] | None, day: dt.date) -> Price | None:
    usable = [p for p in prices or () if p.effective_from <= day]
    return usable[-1] if usable else None


def _parse_table(data: Any) -> PriceTable:
    if not isinstance(data, Mapping) or not isinstance(data.get("prices"), list):
        raise ConfigurationError("a price table is an object with a 'prices' list")
    if data.get("schema", 1) != 1:
        raise ConfigurationError(f"unsupported price table schema {data.get('schema')!r}")
    entries: dict[str, list[Price]] = {}
    for row in data["prices"]:
        if not isinstance(row, Mapping) or not isinstance(row.get("model"), str):
            raise ConfigurationError(f"bad price row {row!r}")
        try:
            price = Price(
                input=row["input"],
                output=row["output"],
                cached_input=row.get("cached_input"),
                cache_write=row.get("cache_write"),
                effective_from=dt.date.fromisoformat(row.get("effective_from", "1970-01-01")),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigurationError(f"bad price row {row!r}: {exc}") from None
        provider = row.get("provider")
        key = f"{provider}/{row['model']}" if provider else str(row["model"])
        entries.setdefault(key, []).append(price)
    default = data.get("default")
    return PriceTable(
        entries,
        default=None
        if default is None
        else Price(input=default["input"], output=default["output"]),
        version=str(data.get("version", "unversioned")),
    )


@functools.lru_cache(maxsize=1)
def _shipped() -> PriceTable:
    text = resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8")
    return _parse_table(json.loads(text))
