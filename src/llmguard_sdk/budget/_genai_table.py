"""A compact copy of genai-prices' data, and model lookups in it made as genai-prices makes them.

The package's data is some 16,000 objects the garbage collector tracks (providers, models,
match clauses, prices), which every full collection of a long-running server would walk. So it
is read once, into a :class:`Table` of columns: flat tuples of strings, ints and bools (a full
collection stops tracking a tuple whose items are not tracked; nested tuples would lose one
level per collection), each model's prices one JSON string (decoded when it is looked up).
When this module was the one that loaded the bundled data, that module and genai-prices' cache
of it are dropped again: nothing else refers to them, and genai-prices loads them anew if it is
asked itself. A snapshot given to genai-prices (``UpdatePrices``) before the first lookup is
the one read.

Models are found as genai-prices finds them: its match clauses (kept in prefix order in one
flat tuple), a provider named by its id or its own match clause, the providers a provider falls
back to, ``litellm`` names (``anthropic/claude-...``) and compact dates (``-20251211``).

Only the releases in :data:`READS` are read (pyproject.toml's pin, which needs Python 3.11):
an older one, as the 0.1 releases that pydantic-ai brings on Python 3.10, may shape its data
otherwise, and the shipped table prices alone.

A price's constraint is kept as genai-prices applies it: a start date as its day's ordinal, a
time-of-day window (DeepSeek's peak hours) as ``[start, end]`` in microseconds into the UTC day
(the window's times turned to UTC as genai-prices turns them; ``end < start`` wraps past
midnight). :attr:`Table.windows` lists every window's ends, so that a cache of prices per day
can tell the stretches of a day within which no window opens or closes.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

__all__ = [
    "CONTEXT",
    "FIELDS",
    "READS",
    "Table",
    "active",
    "find",
    "load",
    "micros",
    "models",
    "owns",
    "prices",
    "readable",
    "version",
    "windows",
]

READS = ("0.2.3", "0.3")
"""The genai-prices releases whose data is read: from the first, before the second."""

CONTEXT: dict[str, dict[str, str]] = {
    "batch": {"processing": "batch"},
    "flex": {"service_tier": "flex"},
    "priority": {"service_tier": "priority"},
    "fast": {"service_tier": "fast"},
}
"""The request context that selects each service tier's price variants."""

FIELDS = (
    "input_mtok",
    "output_mtok",
    "cache_read_mtok",
    "cache_write_mtok",
    "cache_write_1h_mtok",
    "output_reasoning_mtok",
    "input_audio_mtok",
    "output_audio_mtok",
    "requests_kcount",
    "web_searches_kcount",
    "storage_searches_kcount",
    "code_executions_kcount",
)
"""The prices read, in the order of each price's rates: per million tokens, and the fees per
thousand requests, web searches, file searches and code executions."""

_DATE = re.compile(r"(?:verified|as of|checked)[a-z ]* (20\d\d-\d\d-\d\d)")
_COMPACT_DATE = re.compile(r"(-)(20\d{2})(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?=-|:|$)")


class Table(NamedTuple):
    """genai-prices' data in columns (one entry per provider, or per model)."""

    provider_ids: tuple[str, ...]
    first_model: tuple[int, ...]
    """Provider ``i``'s models are ``first_model[i]`` to ``first_model[i + 1]`` (excluded)."""
    model_match: tuple[int, ...]
    """Per provider: where its model clause starts in ``clauses`` (-1: none)."""
    provider_match: tuple[int, ...]
    """Per provider: where its provider id clause starts in ``clauses`` (-1: none)."""
    fallback: tuple[str, ...]
    """Per provider: the ids of the providers whose models it also serves, as JSON."""
    model_ids: tuple[str, ...]
    match: tuple[int, ...]
    """Per model: where its clause starts in ``clauses``."""
    listed: tuple[bool, ...]
    """Per model: whether its own id finds it."""
    prices: tuple[str, ...]
    """Per model: ``[prices, variants]`` as JSON (see :func:`prices`)."""
    clauses: tuple[str | int, ...]
    """Match clauses in prefix order: ``kind, text`` with kind ``==``, ``^``, ``$``, ``in``
    or ``re``; ``or`` / ``and``, the number of clauses, those clauses."""
    windows: tuple[int, ...]
    """Every time-of-day window's start and end (microseconds into the UTC day), sorted."""
    snapshot_date: str
    """The newest day the data says its prices were verified on."""


_lock = threading.Lock()
_loaded: list[Table | None] = []  # the table, once read
_json = json.JSONEncoder(separators=(",", ":")).encode  # made once, not per model


def load() -> Table | None:
    """genai-prices' data (a snapshot it was given, else the bundled one) as a table, read
    once; ``None`` when the package is not installed or is a release outside :data:`READS`
    (Python 3.10)."""
    if not _loaded:
        with _lock:
            if not _loaded:
                _loaded.append(_read())
    return _loaded[0]


def windows() -> tuple[int, ...] | None:
    """The table's :attr:`~Table.windows` (``()`` without the package); ``None`` while it is
    not read yet (this never reads it)."""
    if not _loaded:
        return None
    table = _loaded[0]
    return () if table is None else table.windows


def version() -> str | None:
    """The installed genai-prices' version (``None``: not installed)."""
    try:
        from genai_prices import __version__
    except ImportError:
        return None
    return str(__version__)


def readable(release: str) -> bool:
    """Whether the data of genai-prices ``release`` (a version) is read: one in :data:`READS`."""
    low, high = (_numbers(bound) for bound in READS)
    return low <= _numbers(release) < high


def _numbers(release: str) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", release)[:3])


def _read() -> Table | None:
    installed = version()
    if installed is None or not readable(installed):
        return None
    from genai_prices import data_snapshot

    loaded = "genai_prices.data" in sys.modules
    table = _build(data_snapshot.get_snapshot().providers)
    if not loaded:
        _release(data_snapshot)
    return table


def _release(data_snapshot: Any) -> None:
    """Drop the bundled data this module made genai-prices load: its module and the cached
    snapshot that holds it."""
    bundled = getattr(data_snapshot, "_bundled_snapshot", None)
    if bundled is not None and hasattr(bundled, "cache_clear"):
        bundled.cache_clear()
    sys.modules.pop("genai_prices.data", None)
    package = sys.modules.get("genai_prices")
    if package is not None and hasattr(package, "data"):
        delattr(package, "data")


def _build(providers: Any) -> Table:
    intern = sys.intern
    columns: dict[str, list[Any]] = {name: [] for name in Table._fields[:-3]}
    clauses: list[str | int] = []
    dates: list[str] = []
    windows: set[int] = set()
    for provider in providers:
        columns["provider_ids"].append(intern(provider.id))
        columns["first_model"].append(len(columns["model_ids"]))
        columns["model_match"].append(_clause(provider.model_match, clauses))
        columns["provider_match"].append(_clause(provider.provider_match, clauses))
        columns["fallback"].append(json.dumps(list(provider.fallback_model_providers or ())))
        dates.extend(_DATE.findall(provider.price_comments or ""))
        for info in provider.models:
            columns["model_ids"].append(intern(info.id))
            at = _clause(info.match, clauses)
            columns["match"].append(at)
            columns["listed"].append(_matches(clauses, at, info.id.lower())[0])
            rows = [_conditional(info.prices), _variants(info.price_variants)]
            windows.update(_edges(rows))
            columns["prices"].append(_json(rows))
            dates.extend(_DATE.findall(info.price_comments or ""))
    columns["first_model"].append(len(columns["model_ids"]))
    flat = {name: tuple(values) for name, values in columns.items()}
    return Table(
        **flat,
        clauses=tuple(clauses),
        windows=tuple(sorted(windows)),
        snapshot_date=max(dates, default="undated"),
    )


def _edges(rows: list[Any]) -> Iterator[int]:
    """The ends of the time-of-day windows in one model's ``[prices, variants]``."""
    conditional, variants = rows
    for since in [since for since, _ in conditional] + [since for _, since, _ in variants]:
        if isinstance(since, list):
            yield from since


def _clause(clause: Any, out: list[str | int]) -> int:
    """Append ``clause`` to ``out`` in prefix order (its texts lowered where genai-prices
    lowers them); where it starts, -1 for none. A kind this module does not know matches
    nothing (an empty ``or``)."""
    if clause is None:
        return -1
    start = len(out)
    for kind, name in (("==", "equals"), ("^", "starts_with"), ("$", "ends_with")):
        if hasattr(clause, name):
            out += [kind, sys.intern(getattr(clause, name).lower())]
            return start
    if hasattr(clause, "contains"):
        out += ["in", sys.intern(clause.contains.lower())]
    elif hasattr(clause, "regex"):
        out += ["re", clause.regex]
    elif hasattr(clause, "or_") or hasattr(clause, "and_"):
        kind = "or" if hasattr(clause, "or_") else "and"
        children = getattr(clause, kind + "_")
        out += [kind, len(children)]
        for child in children:
            _clause(child, out)
    else:
        out += ["or", 0]
    return start


def _since(constraint: Any) -> int | list[int] | None:
    """When a price applies: the ordinal of its first day (1, ``date.min``, without a
    constraint), or ``[start, end]`` of its time-of-day window in microseconds into the UTC
    day; ``None`` for a constraint of a kind this module does not know (never applied)."""
    if constraint is None:
        return 1
    start = getattr(constraint, "start_date", None)
    if isinstance(start, dt.date):
        return start.toordinal()
    times = [getattr(constraint, name, None) for name in ("start_time", "end_time")]
    edges = [_utc_micros(value) for value in times if isinstance(value, dt.time)]
    return edges if len(edges) == 2 else None


def _utc_micros(value: dt.time) -> int:
    """A time of day as microseconds into the UTC day, turned to UTC as genai-prices'
    ``TimeOfDateConstraint`` turns it (a naive time is UTC; an offset is taken on
    1970-01-01)."""
    if value.tzinfo is not None:
        moment = dt.datetime.combine(dt.date(1970, 1, 1), value).astimezone(dt.timezone.utc)
        value = moment.time()
    return micros(value)


def micros(value: dt.time | dt.datetime) -> int:
    """Microseconds from midnight to ``value``'s time of day (its own clock: convert first)."""
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def active(since: int | list[int] | None, day: int, moment: int) -> bool:
    """Whether a price whose constraint is ``since`` (see :func:`_since`) applies on the day
    of ordinal ``day``, ``moment`` microseconds into it (UTC), as genai-prices decides:
    a window holds from its start (included) to its end (excluded), past midnight when it
    ends before it starts."""
    if since is None:
        return False
    if isinstance(since, int):
        return since <= day
    start, end = since
    if end < start:
        return moment >= start or moment < end
    return start <= moment < end


def _rates(prices: Any) -> list[Any]:
    """One rate per :data:`FIELDS` entry: ``None``, a float, or ``[base, [[start, rate],
    ...]]`` for long-context tiers (floats survive JSON exactly)."""
    values = vars(prices)
    found: list[Any] = []
    for key in FIELDS:
        value = values.get(key)
        if value is None or isinstance(value, Decimal):
            found.append(None if value is None else float(value))
        else:
            found.append([float(value.base), [[int(t.start), float(t.price)] for t in value.tiers]])
    return found


def _conditional(prices: Any) -> list[Any]:
    if not isinstance(prices, list):
        return [[1, _rates(prices)]]
    return [[_since(c.constraint), _rates(c.prices)] for c in prices]


def _variants(variants: Any) -> list[Any]:
    """The variants a service tier can select (others ask for request context we lack)."""
    return [
        [list(v.when.items()), _since(v.constraint), _rates(v.prices)]
        for v in variants or ()
        if any(all(c.get(k) == w for k, w in v.when.items()) for c in CONTEXT.values())
    ]


# ------------------------------------------------------------------ lookups


def prices(table: Table, model: int) -> tuple[list[Any], list[Any]]:
    """Model ``model``'s prices, ``[[constraint, rates], ...]`` (the last that is
    :func:`active` counts, else the first), and its variants, ``[[[[key, value], ...],
    constraint, rates], ...]``; a constraint as :func:`_since` gives it."""
    conditional, variants = json.loads(table.prices[model])
    return conditional, variants


def owns(table: Table, provider: int, model: int) -> bool:
    """Whether provider ``provider`` lists model ``model`` itself (not by a fallback)."""
    return table.first_model[provider] <= model < table.first_model[provider + 1]


def models(table: Table) -> Iterator[tuple[str, int]]:
    """``(provider id, model)`` of every model whose own id finds it."""
    for index, provider in enumerate(table.provider_ids):
        for model in range(table.first_model[index], table.first_model[index + 1]):
            if table.listed[model]:
                yield provider, model


def find(table: Table, model: str, provider: str | None) -> tuple[int, int] | None:
    """``(provider, model)``: of the provider named (when the data knows it), else the one
    whose models' names look like ``model``, else the first provider listing it."""
    found = _find_provider_model(table, model, provider)
    if found is not None or provider is not None:
        return found
    for index in range(len(table.provider_ids)):
        info = _find_model(table, index, model, fallback=False)
        if info is not None:
            return index, info
    return None


def _find_provider_model(table: Table, model: str, provider: str | None) -> tuple[int, int] | None:
    """genai-prices' ``DataSnapshot.find_provider_model`` (None where it raises)."""
    model = model.lower()
    if provider and provider.lower() == "litellm" and "/" in model:
        actual, rest = model.split("/", 1)
        if actual and _by_id(table, actual) is not None:
            provider, model = actual, rest
    index = _find_provider(table, model, provider)
    if index is None:
        return None
    info = _find_model(table, index, model, fallback=True)
    return None if info is None else (index, info)


def _find_provider(table: Table, model: str, provider: str | None) -> int | None:
    if provider is not None:
        index = _by_id(table, provider)
        if index is not None or provider.lower() != "litellm":
            return index
    if model:
        for index, at in enumerate(table.model_match):
            if at >= 0 and _matches(table.clauses, at, model)[0]:
                return index
    return None


def _by_id(table: Table, provider: str) -> int | None:
    wanted = provider.lower().strip()
    if wanted in table.provider_ids:
        return table.provider_ids.index(wanted)
    for index, at in enumerate(table.provider_match):
        if at >= 0 and _matches(table.clauses, at, wanted)[0]:
            return index
    return None


def _find_model(table: Table, provider: int, model: str, *, fallback: bool) -> int | None:
    """genai-prices' ``Provider.find_model``: the name as given, then with a compact date
    (``-20251211``) written out (``-2025-12-11``)."""
    model = model.lower()
    found = _match_model(table, provider, model, fallback)
    if found is not None:
        return found
    dashed = _COMPACT_DATE.sub(_dashed, model)
    return _match_model(table, provider, dashed, fallback) if dashed != model else None


def _dashed(match: re.Match[str]) -> str:
    year, month, day = (int(match.group(index)) for index in range(2, 5))
    try:
        dt.date(year, month, day)
    except ValueError:
        return match.group(0)
    return f"{match.group(1)}{year:04d}-{month:02d}-{day:02d}"


def _match_model(table: Table, provider: int, model: str, fallback: bool) -> int | None:
    for index in range(table.first_model[provider], table.first_model[provider + 1]):
        if _matches(table.clauses, table.match[index], model)[0]:
            return index
    for other in json.loads(table.fallback[provider]) if fallback else ():
        if other in table.provider_ids:  # one step of fallback only, as genai-prices
            found = _match_model(table, table.provider_ids.index(other), model, False)
            if found is not None:
                return found
    return None


def _matches(clauses: Sequence[str | int], at: int, text: str) -> tuple[bool, int]:
    """Whether the clause at ``at`` matches ``text`` (lowered), as genai-prices' clauses do;
    and where the next clause starts."""
    kind, value = str(clauses[at]), clauses[at + 1]
    at += 2
    if kind in ("or", "and"):
        found: list[bool] = []
        for _ in range(int(value)):
            ok, at = _matches(clauses, at, text)
            found.append(ok)
        return (any(found) if kind == "or" else all(found)), at
    value = str(value)
    if kind == "==":
        return text == value, at
    if kind == "^":
        return text.startswith(value), at
    if kind == "$":
        return text.endswith(value), at
    if kind == "in":
        return value in text, at
    return re.search(value, text) is not None, at
