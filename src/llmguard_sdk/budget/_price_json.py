"""The price table's JSON shape (the shipped ``prices.json``, :meth:`PriceTable.from_json`)
read into a :class:`~llmguard_sdk.budget.prices.PriceTable`.

A table is an object with a ``prices`` list (``schema`` 1, optional ``version`` and
``default``); a row names its ``model`` (and ``provider``), its rates (``per_request``: a
fee per request, USD; ``web_search``, ``file_search``, ``code_execution``: a fee per use of
the tool, USD), and optionally its
``effective_from``, ``tier``, ``deprecated_on``, ``retires_on`` and ``long_context`` steps
(``{"above": tokens, ...rates}``). A malformed table or row is a
:class:`~llmguard_sdk.errors.ConfigurationError`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from .prices import Price, PriceTable

__all__ = ["parse_table"]


def parse_table(data: Any) -> PriceTable:
    """A table from the parsed JSON object ``data``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("prices"), list):
        raise ConfigurationError("a price table is an object with a 'prices' list")
    if data.get("schema", 1) != 1:
        raise ConfigurationError(f"unsupported price table schema {data.get('schema')!r}")
    entries: dict[str, list[Price]] = {}
    for row in data["prices"]:
        if not isinstance(row, Mapping) or not isinstance(row.get("model"), str):
            raise ConfigurationError(f"bad price row {row!r}")
        try:
            price = _row_price(row)
            price = dataclasses.replace(
                price,
                effective_from=dt.date.fromisoformat(row.get("effective_from", "1970-01-01")),
                tier=row.get("tier"),
                deprecated_on=_day(row.get("deprecated_on")),
                retires_on=_day(row.get("retires_on")),
                long_context=tuple(
                    (int(step["above"]), _row_price(step)) for step in row.get("long_context", ())
                ),
            )
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"bad price row {row!r}: {exc}") from None
        provider = row.get("provider")
        key = f"{provider}/{row['model']}" if provider else str(row["model"])
        entries.setdefault(key, []).append(price)
    default = data.get("default")
    try:
        fallback = (
            None if default is None else Price(input=default["input"], output=default["output"])
        )
    except (KeyError, TypeError) as exc:
        raise ConfigurationError(f"bad default price {default!r}: {exc}") from None
    return PriceTable(entries, default=fallback, version=str(data.get("version", "unversioned")))


def _day(text: Any) -> dt.date | None:
    return None if text is None else dt.date.fromisoformat(text)


def _row_price(row: Mapping[str, Any]) -> Price:
    return Price(
        input=row["input"],
        output=row["output"],
        cached_input=row.get("cached_input"),
        cache_write=row.get("cache_write"),
        cache_write_1h=row.get("cache_write_1h"),
        cache_write_12h=row.get("cache_write_12h"),
        reasoning=row.get("reasoning"),
        input_audio=row.get("input_audio"),
        output_audio=row.get("output_audio"),
        per_request=row.get("per_request"),
        web_search=row.get("web_search"),
        file_search=row.get("file_search"),
        code_execution=row.get("code_execution"),
    )
