"""Prices per model, and the cost of a call from its usage.

A :class:`PriceTable` holds, per provider and model, the USD price per million tokens of
input, output, cached input (read from the provider's prompt cache), cache writes (Anthropic's
5-minute and OpenAI's 30-minute ones; Anthropic's 1-hour and OpenAI's 12-hour ones at their
own rates) and reasoning output, each from an effective date, per service tier, with long-context
tiers. The default table is the user's prices over the maintained ``genai-prices`` data over
the table the package ships (``prices.json``). An unknown model is an
:class:`UnknownModelPriceError`, or the table's configured ``default`` price: never a silent $0.

Costs from usage follow :class:`~llmguard_sdk.models.Usage`: ``input_tokens`` counts every
input token (cache reads and writes among them), ``output_tokens`` every output token
(reasoning among them), so, at the rates of the call's long-context tier::

    cost = (input - cached - written) * input + cached * cached_input
           + (written - written_1h - written_12h) * cache_write
           + written_1h * cache_write_1h + written_12h * cache_write_12h
           + (output - reasoning) * output + reasoning * reasoning

A cost the provider reported (``ChatResponse.cost_usd`` with ``cost_source="reported"``) wins
over the table; a cost from the table is always ``"estimated"``.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import functools
import json
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..errors import ConfigurationError, UnknownModelPriceError
from ..models import ChatResponse, Usage
from ..telemetry._repeats import log_repeated
from . import _genai_table
from ._source import TIERS, GenaiSource, instant, moment, normal_tier

__all__ = [
    "Cost",
    "Price",
    "PriceTable",
    "UnknownModelPriceError",
    "cost_of_response",
]

logger = logging.getLogger("llmguard_sdk")
_MILLION = 1_000_000.0
_DATED = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")
_EPOCH = dt.date(1970, 1, 1)
_NO_12H = (
    "llmguard prices: %d tokens written to the prompt cache for 12 hours were priced at the "
    "model's cache-write rate: its price has no cache_write_12h (PriceTable.with_prices sets it)"
)
_RATES = (
    "input",
    "output",
    "cached_input",
    "cache_write",
    "cache_write_1h",
    "reasoning",
    "cache_write_12h",
)


@dataclass(frozen=True)
class Price:
    """USD per million tokens; ``cached_input`` and ``cache_write`` default to ``input``.

    ``effective_from`` is the first UTC day the price applies (entries of one model with
    later dates replace earlier ones from their date on). ``cache_write_1h`` is the rate of
    cache writes kept for an hour (Anthropic's 1-hour TTL; default: ``cache_write``),
    ``cache_write_12h`` that of writes kept for 12 hours (OpenAI's 12-hour retention; default:
    ``cache_write``, with a warning when a call's writes are priced so), ``reasoning`` the
    rate of reasoning output tokens (default: ``output``). ``tier`` names the service tier
    the price is for (``"flex"``, ``"priority"``, ``"batch"``, ``"fast"``; ``None``:
    standard). ``long_context`` holds ``(threshold, price)`` pairs: a call of more
    than ``threshold`` input tokens pays that price for all of its tokens.

    .. versionchanged:: 0.2.0 ``cache_write_1h``, ``cache_write_12h``, ``reasoning``,
       ``tier`` and ``long_context``.
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    effective_from: dt.date = _EPOCH
    cache_write_1h: float | None = None
    reasoning: float | None = None
    tier: str | None = None
    long_context: tuple[tuple[int, Price], ...] = ()
    deprecated_on: dt.date | None = None
    retires_on: dt.date | None = None
    cache_write_12h: float | None = None

    def __post_init__(self) -> None:
        for name in _RATES:
            value = getattr(self, name)
            if value is None and name not in ("input", "output"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value < math.inf
            ):
                raise ConfigurationError(f"price {name} must be a number >= 0, got {value!r}")
        for day in (self.effective_from, self.deprecated_on or _EPOCH, self.retires_on or _EPOCH):
            if not isinstance(day, dt.date):
                raise ConfigurationError("effective_from, deprecated_on, retires_on are dates")
        if self.tier is not None and self.tier not in TIERS:
            raise ConfigurationError(f"tier must be one of {TIERS} or None, got {self.tier!r}")
        steps = tuple(self.long_context)
        if not all(
            isinstance(step, tuple)
            and len(step) == 2
            and isinstance(step[0], int)
            and step[0] >= 0
            and isinstance(step[1], Price)
            for step in steps
        ):
            raise ConfigurationError("long_context holds (threshold, Price) pairs")
        object.__setattr__(self, "long_context", tuple(sorted(steps, key=lambda s: s[0])))
        # the rates that default to others, and the dearest input and output rates: read by
        # every call's worst case and cost (attributes, not fields; a Price never changes)
        write = self.input if self.cache_write is None else self.cache_write
        rates = (
            self.input if self.cached_input is None else self.cached_input,
            write,
            write if self.cache_write_1h is None else self.cache_write_1h,
            self.output if self.reasoning is None else self.reasoning,
            write if self.cache_write_12h is None else self.cache_write_12h,
        )
        object.__setattr__(self, "_rates", rates)
        object.__setattr__(self, "_input_max", max(self.input, rates[1], rates[2], rates[4]))
        object.__setattr__(self, "_output_max", max(self.output, rates[3]))

    # cached, write, write_1h, reasoning, write_12h
    _rates: ClassVar[tuple[float, float, float, float, float]]
    _input_max: ClassVar[float]
    _output_max: ClassVar[float]

    @property
    def cached_rate(self) -> float:
        """Price of a cached input token read (per million)."""
        return self._rates[0]

    @property
    def write_rate(self) -> float:
        """Price of an input token written to the prompt cache (per million)."""
        return self._rates[1]

    @property
    def write_1h_rate(self) -> float:
        """Price of an input token written to the prompt cache for an hour (per million)."""
        return self._rates[2]

    @property
    def write_12h_rate(self) -> float:
        """Price of an input token written to the prompt cache for 12 hours (per million)."""
        return self._rates[4]

    @property
    def reasoning_rate(self) -> float:
        """Price of a reasoning output token (per million)."""
        return self._rates[3]

    def for_input(self, input_tokens: float) -> Price:
        """The price a call of ``input_tokens`` input tokens pays (its long-context tier)."""
        found = self
        for threshold, price in self.long_context:
            if input_tokens > threshold:
                found = price
        return found

    def scaled(self, factor: float, *, tier: str | None = None) -> Price:
        """Every rate times ``factor`` (a batch discount), long-context tiers included."""
        rates: dict[str, Any] = {
            name: None if getattr(self, name) is None else getattr(self, name) * factor
            for name in _RATES
        }
        steps = tuple((t, p.scaled(factor, tier=tier)) for t, p in self.long_context)
        return dataclasses.replace(self, **rates, tier=tier, long_context=steps)

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at this price: cached reads, cache writes by retention
        (5 or 30 minutes, 1 hour, 12 hours) and reasoning output at their own rates, the
        long-context tier of its input."""
        price = self.for_input(usage.input_tokens)
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        written = min(usage.cache_write_input_tokens, usage.input_tokens - cached)
        hour = min(usage.cache_write_1h_input_tokens, written)
        half_day = min(usage.cache_write_12h_input_tokens, written - hour)
        plain = usage.input_tokens - cached - written
        reasoning = min(usage.reasoning_tokens, usage.output_tokens)
        cached_rate, write_rate, write_1h_rate, reasoning_rate, write_12h_rate = price._rates
        if half_day and price.cache_write_12h is None:  # (genai-prices lists none for OpenAI)
            log_repeated(logger, logging.WARNING, "prices:12h", _NO_12H, half_day)
        return (
            plain * price.input
            + cached * cached_rate
            + (written - hour - half_day) * write_rate
            + hour * write_1h_rate
            + half_day * write_12h_rate
            + (usage.output_tokens - reasoning) * price.output
            + reasoning * reasoning_rate
        ) / _MILLION

    def worst_case(self, input_tokens: float, output_tokens: float) -> float:
        """The most a call of this many tokens can cost: no input counted as cached, every
        input token written to the cache at the dearest rate, every output token at the
        dearer of the output and reasoning rates, in the call's long-context tier."""
        price = self.for_input(input_tokens)
        return (input_tokens * price._input_max + output_tokens * price._output_max) / _MILLION

    @property
    def output_max(self) -> float:
        """The dearer of the output and reasoning rates (per million)."""
        return self._output_max


@dataclass(frozen=True)
class Cost:
    """A call's cost in USD and where it came from (``"reported"`` or ``"estimated"``)."""

    usd: float
    source: Literal["reported", "estimated"]


class PriceTable:
    """Prices per ``(provider, model)`` with effective dates and service tiers, in layers.

    The default table (:meth:`default_table`) has three layers: the user's prices (added with
    :meth:`with_prices`), then the maintained ``genai-prices`` data (thousands of models, with
    cache, long-context and service-tier prices), then the table the package ships
    (``prices.json``) for what that lacks. Each layer, from the top, is asked for the exact
    ``provider/model``, then the model under any provider; then all of them again with a date
    or ``-latest`` suffix removed (``gpt-4o-mini-2024-07-18`` finds ``gpt-4o-mini``). The Guard
    looks a route up with its route name as the provider, so prices can target a route::

        table = PriceTable.default_table().with_prices({
            "my-vllm/llama-3.3-70b": Price(input=0.2, output=0.2),   # one route
            "gpt-4o-mini": Price(input=0.1, output=0.4),             # any provider
        })

    The first layer that knows a model decides its price for every tier: its price for the
    tier if it has one, else its standard price; in the user's and the shipped entries (which
    list no tiers unless told) the ``"batch"`` tier is the standard price less
    ``batch_discount`` (OpenAI, Anthropic and Google bill batches at half price). A lookup is
    done once per model, tier, day and stretch of the day between the source's time-of-day
    windows' edges (DeepSeek's peak hours), then cached.

    Args:
        entries: ``{"provider/model" or "model": Price or [Price, ...]}``.
        default: the price of any model not found; ``None`` (default) makes an unknown model
            an :class:`UnknownModelPriceError`.
        version: a label for the table's origin.
        batch_discount: the share taken off a standard price for a batch call whose model
            has no batch price of its own.
    """

    def __init__(
        self,
        entries: Mapping[str, Price | Iterable[Price]] | None = None,
        *,
        default: Price | None = None,
        version: str = "custom",
        batch_discount: float = 0.5,
        _base: PriceTable | None = None,
        _source: GenaiSource | None = None,
    ) -> None:
        if isinstance(batch_discount, bool) or not (
            isinstance(batch_discount, (int, float)) and 0 <= batch_discount < 1
        ):
            raise ConfigurationError("batch_discount must be a fraction in [0, 1)")
        if default is not None and not isinstance(default, Price):
            raise ConfigurationError(f"default must be a Price or None, got {default!r}")
        if entries is not None and not isinstance(entries, Mapping):
            raise ConfigurationError("price entries are a mapping of model name to Price")
        self._label = version
        self.default = default
        self.batch_discount = float(batch_discount)
        self._base = _base
        self._source = _source
        self._entries: dict[str, tuple[Price, ...]] = {}
        for key, value in (entries or {}).items():
            if not isinstance(value, (Price, Iterable)) or isinstance(value, (str, bytes)):
                raise ConfigurationError(f"price entry {key!r} must hold Price objects")
            prices = (value,) if isinstance(value, Price) else tuple(value)
            if not isinstance(key, str) or not key.strip("/") or not prices:
                raise ConfigurationError(f"bad price entry {key!r}")
            if not all(isinstance(p, Price) for p in prices):
                raise ConfigurationError(f"price entry {key!r} must hold Price objects")
            self._entries[key.lower()] = tuple(sorted(prices, key=lambda p: p.effective_from))
        self._cache: dict[tuple[str | None, str, dt.date, int, str | None], Price | None] = {}
        self._windows: tuple[int, ...] | None = None  # see _read_windows
        self._unread = False  # a source's data was not read yet: see _read_windows

    def __repr__(self) -> str:
        return f"PriceTable(version={self.version!r}, models={len(self._entries)})"

    @property
    def version(self) -> str:
        """Where the prices come from: the layers' labels, the source's snapshot date."""
        if self._source is not None and self._base is not None:
            return f"{self._source.version} over llmguard {self._base.version}"
        if self._base is not None:
            return f"{self._base.version}+{self._label}"
        return self._label

    @classmethod
    def default_table(cls) -> PriceTable:
        """``genai-prices`` over the table shipped with the package (``prices.json``)."""
        return _default()

    @classmethod
    def shipped_table(cls) -> PriceTable:
        """The table shipped with the package alone (``prices.json``; see its ``version``)."""
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
        from ._price_json import parse_table  # (it builds tables: imported when one is read)

        return parse_table(data)

    def with_prices(
        self, entries: Mapping[str, Price | Iterable[Price]], *, default: Price | None = None
    ) -> PriceTable:
        """A new table whose ``entries`` (and ``default``) win over this one's."""
        return PriceTable(
            entries,
            default=default if default is not None else self.default,
            batch_discount=self.batch_discount,
            _base=self,
        )

    def entries(self) -> dict[str, tuple[Price, ...]]:
        """This layer's own prices (not those of the layers below), by key."""
        return dict(self._entries)

    def models(self) -> list[str]:
        """Every ``provider/model`` this table has a price for (sorted)."""
        found: set[str] = set()
        table: PriceTable | None = self
        while table is not None:
            found.update(table._entries)
            if table._source is not None:
                found.update(f"{p}/{m}" for p, m in table._source.models())
            table = table._base
        return sorted(found)

    def find(
        self,
        model: str,
        *,
        provider: str | None = None,
        at: dt.date | None = None,
        tier: str | None = None,
    ) -> Price | None:
        """The price of ``model`` at ``at`` at service tier ``tier`` (``None``: standard), or
        None if unknown. ``at`` is a moment (a datetime; naive means UTC) or a day (its 00:00
        UTC); default: now. Time-of-day prices (DeepSeek's peak hours) count at that moment.
        """
        day, micros = moment(at)
        windows = self._windows if self._windows is not None else self._read_windows()
        key = (provider, model, day, bisect.bisect_right(windows, micros), tier)
        if key in self._cache:  # as asked, per day and stretch between window edges
            return self._cache[key]
        wanted = normal_tier(tier)
        found = self._find(
            model.lower(), provider.lower() if provider else None, instant(day, micros), wanted
        )
        if self._windows is None:  # the lookup may have read the source's windows
            key = (provider, model, day, bisect.bisect_right(self._read_windows(), micros), tier)
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[key] = found
        return found

    def _read_windows(self) -> tuple[int, ...]:
        """The times of day where a source's time-of-day price starts or ends (a key of the
        cache: a price found between two of them holds until the next); kept once every
        source has read its data, and none (the layers not walked again) until then."""
        if self._unread and _genai_table.windows() is None:
            return ()
        read = [layer._source.windows() for layer in self._layers() if layer._source is not None]
        windows = tuple(sorted({edge for edges in read for edge in edges or ()}))
        self._unread = None in read
        if not self._unread:
            self._windows = windows
        return windows

    def _layers(self) -> list[PriceTable]:
        layers: list[PriceTable] = []
        table: PriceTable | None = self
        while table is not None:
            layers.append(table)
            table = table._base
        return layers

    def _own(
        self, name: str, provider: str | None, when: dt.datetime, tier: str | None
    ) -> Price | None:
        """This layer's price (entries, then source) for ``provider/name`` or ``name``."""
        key = f"{provider}/{name}" if provider else name
        prices = self._entries.get(key)
        if prices is not None:
            day = when.date()
            own = _dated(tuple(p for p in prices if p.tier == tier), day)
            if own is not None or tier is None:
                return own
            return self._tiered(_dated(tuple(p for p in prices if p.tier is None), day), tier)
        if self._source is None:
            return None
        found = self._source.find(name, provider, when, tier)
        if found is not None or tier is None:
            return found
        # the source lists tiers model by model: a model without the tier's rates (one
        # without a batch API, say) is billed at its standard rates
        standard = self._source.find(name, provider, when, None)
        if standard is not None and tier == "priority":  # dearer than standard: say so
            logger.warning(
                "llmguard prices: %s lists no %s rates for %s; its standard rates count",
                self._source.version,
                tier,
                name,
            )
        return standard

    def _tiered(self, standard: Price | None, tier: str) -> Price | None:
        """A tier's price from the standard one: batch at the discount, others as is."""
        if standard is None or tier != "batch":
            return standard
        return standard.scaled(1.0 - self.batch_discount, tier="batch")

    def _find(
        self, model: str, provider: str | None, when: dt.datetime, tier: str | None
    ) -> Price | None:
        names = [model]
        undated = _DATED.sub("", model)
        if undated != model:
            names.append(undated)
        layers = self._layers()
        for name in names:
            # user prices over the source over shipped; in each, this provider's own price,
            # then the model's price for any provider; then the model under another
            # provider: the shipped (vendor) entries before a user's entry for one route
            for layer in layers:
                for owner in [provider, None] if provider else [None]:
                    price = layer._own(name, owner, when, tier)
                    if price is not None:
                        return price
            for layer in reversed(layers):
                for key in layer._entries:
                    owner, _, bare = key.rpartition("/")
                    if bare == name and owner:
                        price = layer._own(name, owner, when, tier)
                        if price is not None:
                            return price
        return None

    def lifecycle(
        self, model: str, *, provider: str | None = None
    ) -> tuple[dt.date | None, dt.date | None]:
        """``(deprecated_on, retires_on)`` of ``model`` (or of its undated name), from the
        first layer's entries that give either (``(None, None)``: none announced).

        .. versionadded:: 0.2.0
        """
        name = model.lower()
        names = [name] + ([_DATED.sub("", name)] if _DATED.sub("", name) != name else [])
        for candidate in names:
            keys = [f"{provider.lower()}/{candidate}"] if provider else []
            for layer in self._layers():
                for key in [
                    *keys,
                    candidate,
                    *(k for k in layer._entries if k.endswith("/" + candidate)),
                ]:
                    for price in reversed(layer._entries.get(key, ())):
                        if price.deprecated_on or price.retires_on:
                            return price.deprecated_on, price.retires_on
        return None, None

    def price(
        self,
        model: str,
        *,
        provider: str | None = None,
        at: dt.date | None = None,
        tier: str | None = None,
    ) -> Price:
        """Like :meth:`find`, but an unknown model gives the default price or raises
        :class:`UnknownModelPriceError`."""
        found = self.find(model, provider=provider, at=at, tier=tier) or self.default_price()
        if found is None:
            raise UnknownModelPriceError(provider, model)
        return found

    def default_price(self) -> Price | None:
        """The price of a model no layer knows: the ``default`` of the top layer that sets
        one (``None``: an unknown model is an :class:`UnknownModelPriceError`).

        .. versionadded:: 0.2.0
        """
        return next((t.default for t in self._layers() if t.default is not None), None)

    def cost(
        self,
        usage: Usage,
        model: str,
        *,
        provider: str | None = None,
        at: dt.date | None = None,
        tier: str | None = None,
    ) -> Cost:
        """The estimated cost of ``usage`` on ``model`` at its service tier (``tier``, else
        the one ``usage`` reports); raises for an unknown model."""
        price = self.price(model, provider=provider, at=at, tier=tier or usage.service_tier)
        return Cost(price.cost(usage), "estimated")


def cost_of_response(
    response: ChatResponse,
    table: PriceTable,
    *,
    model: str,
    provider: str | None = None,
    usage: Usage | None = None,
    tier: str | None = None,
    at: dt.date | None = None,
) -> Cost | None:
    """The provider's reported cost when there is one, else the table's estimate from
    ``usage`` (default: the response's) at the service tier the usage reports (else
    ``tier``, the one asked for) and the prices in force at ``at`` (the call's start, as
    genai-prices prices a request at its timestamp; default: now); ``None`` when there is no
    usage or the model has no price."""
    if response.cost_usd is not None and response.cost_source == "reported":
        return Cost(response.cost_usd, "reported")
    usage = usage or response.usage
    if usage is None:
        return None
    wanted = usage.service_tier or tier
    price = table.find(model, provider=provider, tier=wanted, at=at)
    if price is None and response.model and response.model != model:
        price = table.find(response.model, provider=provider, tier=wanted, at=at)
    if price is None:
        price = table.default_price()
        if price is None:
            return None
    return Cost(price.cost(usage), "estimated")


def _dated(prices: tuple[Price, ...] | None, day: dt.date) -> Price | None:
    usable = [p for p in prices or () if p.effective_from <= day]
    return usable[-1] if usable else None


@functools.lru_cache(maxsize=1)
def _default() -> PriceTable:
    return PriceTable(_source=GenaiSource(), _base=_shipped())


@functools.lru_cache(maxsize=1)
def _shipped() -> PriceTable:
    from ._price_json import parse_table

    text = resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8")
    return parse_table(json.loads(text))
