"""How a :class:`~llmguard_sdk.budget.prices.PriceTable` looks a price up through its layers
(the user's prices, the ``genai-prices`` source, the shipped table): in each layer its entries
or its source; this provider's price, then the model's for any provider, then the model under
another provider; the dated name, then the undated one; a tier's price, else the standard one
(a batch at the table's discount). A price found in a layer of ``with_prices`` takes the rates
it leaves unset (``None``) from the price the layers below give the same lookup, unless the
layer replaces (``replace=True``). :class:`PriceLayers` holds this; ``PriceTable`` its API.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import threading

from . import _genai_table
from ._price import _FEES, _RATES, Price
from ._source import GenaiSource

__all__ = ["PriceLayers"]

logger = logging.getLogger("llmguard_sdk")
# the rates that default to others when unset (cached_input ...), and the fees (per request,
# per web search)
_DEFAULTED = (*_RATES[2:], *_FEES)
_DATED = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")
HALVED_BATCHES = frozenset({"anthropic", "openai", "google"})
"""The genai-prices providers that bill a batch at half the standard price (Anthropic's
Message Batches, OpenAI's Batch API, Gemini's Batch Mode): a model of theirs that the data
lists no batch rates for is priced at the table's ``batch_discount`` off its standard rates
in a batch; another provider's at its standard rates, with a warning."""


class PriceLayers:
    """A table's layers and the order its prices are looked up in (see the module docs)."""

    default: Price | None
    batch_discount: float
    _entries: dict[str, tuple[Price, ...]]
    _base: PriceLayers | None
    _source: GenaiSource | None
    _windows: tuple[int, ...] | None
    _unread: bool
    _merges: bool  # (a layer of with_prices: a price's unset rates are the layers below's)

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

    def _warm(self) -> threading.Thread | None:
        """Start reading the ``genai-prices`` data in a daemon thread where a layer prices from
        it and it is not read yet (a third of a second or more); returns the thread (None:
        nothing to read). A Guard calls it as it is built, as it loads its tokenizer: the
        first call priced no longer reads the data inside its deadline (a lookup meanwhile
        waits for the read under way, never reads twice)."""
        if _genai_table.windows() is not None:  # read already
            return None
        if not any(layer._source is not None for layer in self._layers()):
            return None
        thread = threading.Thread(target=_genai_table.load, name="llmguard-prices", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": the first lookup reads it instead
            return None
        return thread

    def _layers(self) -> list[PriceLayers]:
        layers: list[PriceLayers] = []
        table: PriceLayers | None = self
        while table is not None:
            layers.append(table)
            table = table._base
        return layers

    def _same_as(self, other: PriceLayers) -> bool:
        """Whether ``other`` prices every lookup as this table does: the same object, or
        one built alike (the same entries, default, batch discount and layers below, the
        same kind of source). A Guard given two tables that are not the same refuses them."""
        mine: list[PriceLayers] = self._layers()
        theirs: list[PriceLayers] = other._layers()
        return len(mine) == len(theirs) and all(
            a is b
            or (
                a._entries == b._entries
                and a.default == b.default
                and a.batch_discount == b.batch_discount
                and a._merges == b._merges
                and type(a._source) is type(b._source)
            )
            for a, b in zip(mine, theirs, strict=True)
        )

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
        # the source lists tiers model by model: a model without the tier's rates is billed
        # at its standard rates, a batch at the discount where its provider halves batches
        standard = self._source.find(name, provider, when, None)
        if standard is None:
            return None
        if tier == "batch" and self._source.owner(name, provider) in HALVED_BATCHES:
            return self._tiered(standard, tier)
        if tier in ("priority", "batch"):  # (dearer, or maybe cheaper, than standard: say so)
            logger.warning(  # (once: the table keeps what a lookup found)
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
                        return layer._filled(price, model, provider, when, tier)
            for layer in reversed(layers):
                for key in layer._entries:
                    owner, _, bare = key.rpartition("/")
                    if bare == name and owner:
                        price = layer._own(name, owner, when, tier)
                        if price is not None:
                            return layer._filled(price, model, provider, when, tier)
        return None

    def _filled(
        self, price: Price, model: str, provider: str | None, when: dt.datetime, tier: str | None
    ) -> Price:
        """``price`` found in this layer, its unset rates those the layers below give the
        same lookup, when this layer merges (``with_prices``; not with ``replace=True``)."""
        unset = [name for name in _DEFAULTED if getattr(price, name) is None]
        if not self._merges or self._base is None or not unset:
            return price
        below = self._base._find(model, provider, when, tier)
        kept = {name: getattr(below, name) for name in unset} if below is not None else {}
        return dataclasses.replace(price, **{k: v for k, v in kept.items() if v is not None})

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


def _dated(prices: tuple[Price, ...] | None, day: dt.date) -> Price | None:
    usable = [p for p in prices or () if p.effective_from <= day]
    return usable[-1] if usable else None
