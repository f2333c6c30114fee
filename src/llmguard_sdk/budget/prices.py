"""Prices per model, and the cost of a call from its usage.

A :class:`PriceTable` holds, per provider and model, the USD price per million tokens of
input, output, cached input (read from the provider's prompt cache), cache writes (Anthropic's
5-minute and OpenAI's 30-minute ones; Anthropic's 1-hour and OpenAI's 12-hour ones at their
own rates), reasoning output and audio input and output, each from an effective date, per
service tier, with long-context tiers. The default table is the user's prices over the
maintained ``genai-prices`` data over the table the package ships (``prices.json``). An
unknown model is an :class:`UnknownModelPriceError`, or the table's configured ``default``
price: never a silent $0.

Costs from usage follow :class:`~llmguard_sdk.models.Usage`: ``input_tokens`` counts every
input token (cache reads and writes among them, audio among those neither), ``output_tokens``
every output token (reasoning and audio among them), so, at the rates of the call's
long-context tier::

    cost = (input - cached - written - audio_in) * input + audio_in * input_audio
           + cached * cached_input
           + (written - written_1h - written_12h) * cache_write
           + written_1h * cache_write_1h + written_12h * cache_write_12h
           + (output - reasoning - audio_out) * output + audio_out * output_audio
           + reasoning * reasoning
           + per_request   (a fee per request, USD: Perplexity's Sonar models)
           + web_searches * web_search   (a fee per web search the provider ran, USD)
           + file_searches * file_search + code_executions * code_execution   (alike)

A cost the provider reported (``ChatResponse.cost_usd`` with ``cost_source="reported"``) wins
over the table; a cost from the table is always ``"estimated"``.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import json
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, UnknownModelPriceError
from ..models import ChatResponse, Usage
from ._price import Cost, Price
from ._price_layers import PriceLayers
from ._source import GenaiSource, instant, moment, normal_tier
from ._tool_fees import with_model_fees

__all__ = [
    "Cost",
    "Price",
    "PriceTable",
    "UnknownModelPriceError",
    "cost_of_response",
]

_DAY_MICROS = 86_400 * 1_000_000


class PriceTable(PriceLayers):
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
    ``batch_discount`` (OpenAI, Anthropic and Google bill batches at half price), as it is in
    the ``genai-prices`` source for those three providers' models that it lists no batch rates
    for (another provider's: its standard price, with a warning). A lookup is
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

    _base: PriceTable | None  # (the layer below: a table of its own)

    def __init__(
        self,
        entries: Mapping[str, Price | Iterable[Price]] | None = None,
        *,
        default: Price | None = None,
        version: str = "custom",
        batch_discount: float = 0.5,
        _base: PriceTable | None = None,
        _source: GenaiSource | None = None,
        _merges: bool = False,
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
        self._merges = _merges
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
        self,
        entries: Mapping[str, Price | Iterable[Price]],
        *,
        default: Price | None = None,
        replace: bool = False,
    ) -> PriceTable:
        """A new table whose ``entries`` (and ``default``) win over this one's.

        A price given for a model this table knows changes the rates it sets: each rate it
        leaves unset (``cached_input``, ``cache_write``, ``cache_write_1h``,
        ``cache_write_12h``, ``reasoning``, ``per_request``: ``None``) is the one this table
        gives the same lookup (model, provider or route, day, tier), so
        ``Price(input=..., output=...)`` keeps the model's cache and reasoning rates and its
        per-request fee; its dates and long-context tiers are its own. ``replace=True``: each
        price given is the model's whole price, its unset rates defaulting to its own
        ``input`` / ``cache_write`` / ``output`` (no per-request fee).
        """
        if not isinstance(replace, bool):
            raise ConfigurationError(f"replace must be True or False, got {replace!r}")
        return PriceTable(
            entries,
            default=default if default is not None else self.default,
            batch_discount=self.batch_discount,
            _base=self,
            _merges=not replace,
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
        try:  # as asked, per day and stretch between window edges (one read: another
            return self._cache[key]  # thread may clear the memo between a test and a read)
        except KeyError:
            pass
        wanted = normal_tier(tier)
        found = self._find(
            model.lower(), provider.lower() if provider else None, instant(day, micros), wanted
        )
        if found is not None:  # our own fees where it has none (a chat search model's)
            found = with_model_fees(found, model)
        if self._windows is None:  # the lookup may have read the source's windows
            key = (provider, model, day, bisect.bisect_right(self._read_windows(), micros), tier)
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[key] = found
        return found

    def stretch(self, started_ns: int) -> tuple[int, int] | None:
        """``(UTC day number, stretch of the day between the time-of-day windows' edges)``
        of the moment ``started_ns`` (epoch nanoseconds): every lookup in it finds what
        :meth:`find` finds at that moment (its own cache's key); ``None`` while a source's
        windows are not read yet.

        .. versionadded:: 0.2.0
        """
        windows = self._windows
        if windows is None:
            return None
        day, micros = divmod(started_ns // 1000, _DAY_MICROS)
        return day, bisect.bisect_right(windows, micros)

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
    price = response_price(
        table,
        model,
        provider=provider,
        answered=response.model,
        tier=usage.service_tier or tier,
        at=at,
    )
    return None if price is None else Cost(price.cost(usage), "estimated")


def response_price(
    table: PriceTable,
    model: str,
    *,
    provider: str | None,
    answered: str | None,
    tier: str | None,
    at: dt.date | None,
) -> Price | None:
    """The price :func:`cost_of_response` prices a usage at: ``model``'s, else that of the
    model the provider says ``answered``, else the table's default (``None``: none)."""
    price = table.find(model, provider=provider, tier=tier, at=at)
    if price is None and answered and answered != model:
        price = table.find(answered, provider=provider, tier=tier, at=at)
    return price if price is not None else table.default_price()


@functools.lru_cache(maxsize=1)
def _default() -> PriceTable:
    return PriceTable(_source=GenaiSource(), _base=_shipped())


@functools.lru_cache(maxsize=1)
def _shipped() -> PriceTable:
    from ._price_json import parse_table

    text = resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8")
    return parse_table(json.loads(text))
