"""Price audit: our costs against the bill (golden fixtures) and against LiteLLM's price map.

Two checks in one run, offline (nothing is downloaded; LiteLLM's map is read from the file
the ``litellm`` package ships, without importing the package, which would try to fetch a
newer map):

* **Fixtures** (``tests/fixtures/usage``): each recorded usage object is priced by the SDK's
  default :class:`~llmguard_sdk.budget.PriceTable` and compared with its hand-worked
  ``expected_usd``.
* **Grid**: every model that both ``genai-prices`` (our source) and LiteLLM's map list, under
  the same provider, is priced for a grid of usage shapes (plain, cached reads, 5-minute and
  1-hour cache writes, reasoning output, a long-context prompt, the batch / flex / priority
  tiers), by the SDK and by LiteLLM's map read with LiteLLM's field semantics
  (``input_cost_per_token``, ``cache_read_input_token_cost``,
  ``cache_creation_input_token_cost[_above_1hr]``, ``*_above_<N>k_tokens``, ``*_batches``,
  ``*_flex``, ``*_priority``, ``output_cost_per_reasoning_token``). Costs agree within a
  relative 1e-6.

Every disagreement is given the first rule that accounts for it: its precondition holds on
both sources' data for that model, and with its correction applied the two costs agree
(within 1e-6). A disagreement no rule accounts for counts in ``unexplained``. The rules:

* ``request_fee_missing_in_litellm``: our price has a per-request fee (genai-prices'
  ``requests_kcount``: Perplexity's Sonar models) that LiteLLM's token cost does not count
  (its map has ``search_context_cost_per_query`` instead, billed only for a web search's
  context size; genai-prices takes the highest): without the fee ours must give LiteLLM's
  cost.
* ``tier_missing_in_litellm``: LiteLLM has no rates for the shape's service tier (it bills
  the standard ones): our standard price must give LiteLLM's cost.
* ``tier_missing_in_genai_prices``: genai-prices has no rates for the tier (we bill the
  standard ones): LiteLLM's standard cost must give ours.
* ``long_context_tier_differs``: the prompt is past a long-context threshold only one source
  has, or the thresholds differ: without long-context tiers the costs must agree.
* ``one_hour_write_rate_missing_in_litellm``: a 1-hour cache write, and LiteLLM's map has no
  ``cache_creation_input_token_cost_above_1hr`` (it bills those at the 5-minute rate): ours,
  billed so, must give LiteLLM's cost.
* ``cache_rate_missing_in_one_source``: only one source has a rate for the shape's cache
  reads or writes: billed as plain input on both sides, the costs must agree.
* ``base_rate_differs``: the maps list different rates for the model (one is out of date or
  wrong): our formula on LiteLLM's rates must give LiteLLM's cost.

Usage: python bench/price_audit.py [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.util
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.budget._source import GenaiSource
from llmguard_sdk.models import Usage
from llmguard_sdk.providers.wire import usage_from_payload

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "usage"
TOLERANCE = 1e-6
# genai-prices provider id -> LiteLLM's litellm_provider values and key prefixes
PROVIDERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "openai": (("openai",), ("", "openai/")),
    "anthropic": (("anthropic",), ("", "anthropic/")),
    "google": (("gemini",), ("gemini/",)),
    "x-ai": (("xai",), ("xai/",)),
    "mistral": (("mistral",), ("mistral/",)),
    "groq": (("groq",), ("groq/",)),
    "deepseek": (("deepseek",), ("deepseek/",)),
    "together": (("together_ai",), ("together_ai/",)),
    "fireworks": (("fireworks_ai",), ("fireworks_ai/accounts/fireworks/models/",)),
    "perplexity": (("perplexity",), ("perplexity/",)),
    "cohere": (("cohere_chat", "cohere"), ("", "cohere/")),
    "openrouter": (("openrouter",), ("openrouter/",)),
    "novita": (("novita",), ("novita/",)),
    "cerebras": (("cerebras",), ("cerebras/",)),
}


@dataclass(frozen=True)
class Shape:
    """One usage shape of the grid: the usage, the tier, what it exercises."""

    name: str
    usage: Usage
    tier: str | None = None


def _shapes() -> list[Shape]:
    return [
        Shape("plain", Usage(input_tokens=10_000, output_tokens=1_000)),
        Shape(
            "cached_read",
            Usage(input_tokens=10_000, cached_input_tokens=8_000, output_tokens=1_000),
        ),
        Shape(
            "cache_write_5m",
            Usage(input_tokens=10_000, cache_write_input_tokens=4_000, output_tokens=1_000),
        ),
        Shape(
            "cache_write_1h",
            Usage(
                input_tokens=10_000,
                cache_write_input_tokens=4_000,
                cache_write_1h_input_tokens=4_000,
                output_tokens=1_000,
            ),
        ),
        Shape("reasoning", Usage(input_tokens=2_000, output_tokens=5_000, reasoning_tokens=4_000)),
        Shape("long_context", Usage(input_tokens=300_000, output_tokens=1_000)),
        Shape("batch", Usage(input_tokens=10_000, output_tokens=1_000), "batch"),
        Shape("flex", Usage(input_tokens=10_000, output_tokens=1_000), "flex"),
        Shape("priority", Usage(input_tokens=10_000, output_tokens=1_000), "priority"),
    ]


# -- LiteLLM's map, read with LiteLLM's semantics --------------------------------------------

_SUFFIX = {"batch": "_batches", "flex": "_flex", "priority": "_priority"}
_ABOVE = re.compile(r"^input_cost_per_token_above_(\d+)k_tokens$")


def litellm_map() -> dict[str, dict[str, Any]]:
    """LiteLLM's price map as its package ships it (the package is not imported)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("price_audit.py needs litellm (pip install 'llmguard-sdk[bench]')")
    path = Path(next(iter(spec.submodule_search_locations)))
    data: dict[str, dict[str, Any]] = json.loads(
        (path / "model_prices_and_context_window_backup.json").read_text(encoding="utf-8")
    )
    data.pop("sample_spec", None)
    return data


def litellm_threshold(entry: Mapping[str, Any], input_tokens: int) -> int | None:
    """The highest ``above_<N>k`` threshold of ``entry`` that ``input_tokens`` passes."""
    found = [int(m.group(1)) * 1000 for key in entry if (m := _ABOVE.match(key)) is not None]
    passed = [t for t in found if input_tokens > t]
    return max(passed) if passed else None


def _rate(entry: Mapping[str, Any], key: str, tier: str | None, above: int | None) -> Any:
    """LiteLLM's rate for ``key`` (per token) at the tier and long-context threshold: the
    most specific key present, else None."""
    names = [key]
    if above is not None:
        names.insert(0, f"{key}_above_{above // 1000}k_tokens")
    if tier is not None:
        names = [f"{n}{_SUFFIX[tier]}" for n in names] + names
    for name in names:
        value = entry.get(name)
        if isinstance(value, (int, float)):
            return value
    return None


def litellm_cost(entry: Mapping[str, Any], usage: Usage, tier: str | None) -> float:
    """What LiteLLM's map charges for ``usage`` (tokens not priced apart cost the input or
    output rate, as in LiteLLM's generic cost calculator)."""
    above = litellm_threshold(entry, usage.input_tokens)
    base_in = _rate(entry, "input_cost_per_token", tier, above) or 0.0
    base_out = _rate(entry, "output_cost_per_token", tier, above) or 0.0
    read = _rate(entry, "cache_read_input_token_cost", tier, above)
    write = _rate(entry, "cache_creation_input_token_cost", tier, above)
    hour = entry.get("cache_creation_input_token_cost_above_1hr")
    reasoning = entry.get("output_cost_per_reasoning_token")
    cached = usage.cached_input_tokens
    written = usage.cache_write_input_tokens
    hourly = usage.cache_write_1h_input_tokens
    plain = usage.input_tokens - cached - written
    think = usage.reasoning_tokens
    return float(
        plain * base_in
        + cached * (base_in if read is None else read)
        + (written - hourly) * (base_in if write is None else write)
        + hourly * (hour if hour is not None else (base_in if write is None else write))
        + (usage.output_tokens - think) * base_out
        + think * (base_out if reasoning is None else reasoning)
    )


def pairs(other: Mapping[str, Mapping[str, Any]]) -> Iterator[tuple[str, str, str]]:
    """``(genai provider, model id, LiteLLM key)`` of every chat model both sources list."""
    for provider, model in GenaiSource().models():
        litellm_providers, prefixes = PROVIDERS.get(provider, ((), ()))
        for prefix in prefixes:
            entry = other.get(prefix + model)
            if (
                entry is not None
                and entry.get("litellm_provider") in litellm_providers
                and entry.get("mode", "chat") in ("chat", "responses")
                and isinstance(entry.get("input_cost_per_token"), (int, float))
                and isinstance(entry.get("output_cost_per_token"), (int, float))
            ):
                yield provider, model, prefix + model
                break


# -- the rules that explain a disagreement ----------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One comparison: a model, a shape, both sources' data and costs."""

    provider: str
    model: str
    shape: Shape
    ours: Price  # the price the SDK used at the shape's tier
    standard: Price  # the SDK's standard-tier price
    own_tier: bool  # genai-prices has rates of its own for the shape's tier
    entry: Mapping[str, Any]
    ours_usd: float
    other_usd: float


Pair = tuple[float, float] | None


def _strip(entry: Mapping[str, Any], *prefixes: str) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if not k.startswith(prefixes)}


def _without_fee(price: Price) -> Price:
    """``price`` without its per-request fee (in its long-context tiers too)."""
    steps = tuple((at, dataclasses.replace(p, per_request=None)) for at, p in price.long_context)
    return dataclasses.replace(price, per_request=None, long_context=steps)


def _request_fee_missing(case: Case) -> Pair:
    """Our price has a per-request fee LiteLLM's token cost does not count: without it,
    ours must give LiteLLM's cost."""
    if not case.ours.per_request:
        return None
    return _without_fee(case.ours).cost(case.shape.usage), case.other_usd


def _tier_missing_in_litellm(case: Case) -> Pair:
    """LiteLLM has no rates for the tier: our standard price must give LiteLLM's cost."""
    tier = case.shape.tier
    if tier is None or f"input_cost_per_token{_SUFFIX[tier]}" in case.entry:
        return None
    return case.standard.cost(case.shape.usage), case.other_usd


def _tier_missing_in_genai(case: Case) -> Pair:
    """genai-prices has no rates for the tier (we bill the standard rates): LiteLLM's
    standard cost must give ours."""
    if case.shape.tier is None or case.own_tier:
        return None
    return case.ours_usd, litellm_cost(case.entry, case.shape.usage, None)


def _long_context_differs(case: Case) -> Pair:
    """The sources' long-context thresholds differ for this prompt: without long-context
    tiers on either side the costs must agree."""
    tokens = case.shape.usage.input_tokens
    ours = [t for t, _ in case.ours.long_context if tokens > t]
    if (max(ours) if ours else None) == litellm_threshold(case.entry, tokens):
        return None
    flat = dataclasses.replace(case.ours, long_context=())
    entry = {k: v for k, v in case.entry.items() if "_above_" not in k or "1hr" in k}
    return flat.cost(case.shape.usage), litellm_cost(entry, case.shape.usage, case.shape.tier)


def _hour_missing(case: Case) -> Pair:
    """LiteLLM has no 1-hour write rate: it bills 1-hour writes at the 5-minute rate; ours,
    billed so, must give LiteLLM's cost."""
    usage = case.shape.usage
    if (
        not usage.cache_write_1h_input_tokens
        or "cache_creation_input_token_cost_above_1hr" in case.entry
        or case.ours.cache_write_1h is None
    ):
        return None
    five = dataclasses.replace(case.ours, cache_write_1h=case.ours.cache_write)
    return five.cost(usage), case.other_usd


def _cache_rate_missing(case: Case) -> Pair:
    """Only one source has a rate for the shape's cache reads or writes: billed as plain
    input on both sides, the costs must agree."""
    usage = case.shape.usage
    read = bool(usage.cached_input_tokens) and (
        (case.ours.cached_input is None) != ("cache_read_input_token_cost" not in case.entry)
    )
    write = bool(usage.cache_write_input_tokens) and (
        (case.ours.cache_write is None) != ("cache_creation_input_token_cost" not in case.entry)
    )
    if not (read or write):
        return None
    plain = dataclasses.replace(case.ours, cached_input=None, cache_write=None, cache_write_1h=None)
    entry = _strip(case.entry, "cache_read_input_token_cost", "cache_creation_input_token_cost")
    return plain.cost(usage), litellm_cost(entry, usage, case.shape.tier)


def _base_rate_differs(case: Case) -> Pair:
    """The maps list different rates for the model: our formula on LiteLLM's rates must give
    LiteLLM's cost (the maths agree; one map's data is out of date or wrong)."""
    usage = case.shape.usage
    above = litellm_threshold(case.entry, usage.input_tokens)
    tier = case.shape.tier  # LiteLLM's rates as it bills them (standard ones without the tier)
    rates = {
        "input": _rate(case.entry, "input_cost_per_token", tier, above),
        "output": _rate(case.entry, "output_cost_per_token", tier, above),
        "cached_input": _rate(case.entry, "cache_read_input_token_cost", tier, above),
        "cache_write": _rate(case.entry, "cache_creation_input_token_cost", tier, above),
        "cache_write_1h": case.entry.get("cache_creation_input_token_cost_above_1hr"),
        "reasoning": case.entry.get("output_cost_per_reasoning_token"),
    }
    price = case.ours.for_input(usage.input_tokens)
    if all(
        theirs is None or math.isclose(getattr(price, name) or 0.0, theirs * 1e6, rel_tol=TOLERANCE)
        for name, theirs in rates.items()
    ):
        return None  # the rates agree: not this
    theirs = Price(**{k: None if v is None else v * 1e6 for k, v in rates.items()})
    return theirs.cost(usage), case.other_usd


RULES: list[tuple[str, str, Callable[[Case], Pair]]] = [
    (
        "request_fee_missing_in_litellm",
        "our price has a per-request fee (genai-prices' requests_kcount) that LiteLLM's token "
        "cost does not count (its search_context_cost_per_query is billed by search size)",
        _request_fee_missing,
    ),
    (
        "tier_missing_in_litellm",
        "LiteLLM lists no rates for this service tier: it bills the standard rates",
        _tier_missing_in_litellm,
    ),
    (
        "tier_missing_in_genai_prices",
        "genai-prices lists no rates for this service tier: ours are the standard rates",
        _tier_missing_in_genai,
    ),
    (
        "long_context_tier_differs",
        "the prompt is past a long-context threshold only one source has (or the thresholds "
        "differ)",
        _long_context_differs,
    ),
    (
        "one_hour_write_rate_missing_in_litellm",
        "LiteLLM has no 1-hour cache-write rate for this model: it bills 1-hour writes at the "
        "5-minute rate (the upstream error the issue names)",
        _hour_missing,
    ),
    (
        "cache_rate_missing_in_one_source",
        "only one source has a prompt-cache rate: the other bills those tokens as plain input",
        _cache_rate_missing,
    ),
    (
        "base_rate_differs",
        "the two maps list different rates for this model (one is out of date or wrong); "
        "our formula on LiteLLM's rates gives LiteLLM's cost",
        _base_rate_differs,
    ),
]


def explain(case: Case) -> str | None:
    """The first rule that accounts for a disagreement, ``"<rule>: <why>"``: its
    precondition holds on the data, and with its correction applied the two costs agree.
    None when no rule does."""
    for name, why, corrected in RULES:
        pair = corrected(case)
        if pair is not None and math.isclose(*pair, rel_tol=TOLERANCE, abs_tol=1e-12):
            return f"{name}: {why}"
    return None


def _compare(
    table: PriceTable, provider: str, model: str, entry: Mapping[str, Any], shape: Shape
) -> Case:
    today = dt.datetime.now(dt.timezone.utc).date()
    price = table.price(model, provider=provider, tier=shape.tier)
    own = shape.tier is None or GenaiSource().find(model, provider, today, shape.tier) is not None
    return Case(
        provider,
        model,
        shape,
        price,
        table.price(model, provider=provider),
        own,
        entry,
        price.cost(shape.usage),
        litellm_cost(entry, shape.usage, shape.tier),
    )


def audit_grid(table: PriceTable) -> dict[str, Any]:
    """Compare every shape on every model both sources list."""
    other = litellm_map()
    found = list(pairs(other))
    agreements, disagreements, unexplained = 0, [], 0
    by_rule: dict[str, int] = {}
    for provider, model, key in found:
        for shape in _shapes():
            case = _compare(table, provider, model, other[key], shape)
            if math.isclose(case.ours_usd, case.other_usd, rel_tol=TOLERANCE, abs_tol=1e-12):
                agreements += 1
                continue
            reason = explain(case)
            if reason is None:
                unexplained += 1
            else:
                rule = reason.partition(":")[0]
                by_rule[rule] = by_rule.get(rule, 0) + 1
            disagreements.append(
                {
                    "model": f"{provider}/{model}",
                    "litellm_key": key,
                    "shape": shape.name,
                    "ours": round(case.ours_usd, 9),
                    "other": round(case.other_usd, 9),
                    "reason": reason,
                }
            )
    return {
        "models_compared": len(found),
        "comparisons": len(found) * len(_shapes()),
        "agreements": agreements,
        "disagreements": disagreements,
        "unexplained": unexplained,
        "disagreements_by_rule": dict(sorted(by_rule.items())),
    }


def fixture_usage(fixture: Mapping[str, Any]) -> Usage | None:
    """The usage a recorded fixture carries (its body's, or its stream's last report)."""
    if "body" in fixture:
        body = fixture["body"]
        return usage_from_payload(body["usage"], service_tier=body.get("service_tier"))[0]
    merged: dict[str, Any] = {}
    tier = None
    for event in fixture["events"]:
        holder = event.get("response") or event.get("message") or event
        raw = holder.get("usage") if isinstance(holder, Mapping) else None
        if isinstance(raw, Mapping):
            if "prompt_tokens" in raw or "input_tokens_details" in raw:
                merged = {}
            merged.update({k: v for k, v in raw.items() if v is not None})
            tier = holder.get("service_tier", tier)
    return usage_from_payload(merged, service_tier=tier)[0]


def audit_fixtures(table: PriceTable) -> list[dict[str, Any]]:
    """Each golden fixture's hand-worked cost beside ours."""
    rows = []
    for path in sorted(FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text(encoding="utf-8"))
        usage = fixture_usage(fixture)
        ours = (
            None
            if usage is None
            else table.cost(usage, fixture["model"], provider=fixture["route"]).usd
        )
        rows.append(
            {
                "name": fixture["name"],
                "expected_usd": fixture["expected_usd"],
                "ours_usd": None if ours is None else round(ours, 12),
                "matches": ours is not None
                and math.isclose(ours, fixture["expected_usd"], rel_tol=1e-9),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    started = time.perf_counter()
    table = PriceTable.default_table()
    result: dict[str, Any] = {"bench": "price_audit", "prices": table.version}
    result.update(audit_grid(table))
    result["fixtures"] = audit_fixtures(table)
    result["fixtures_matching"] = sum(1 for row in result["fixtures"] if row["matches"])
    result["seconds"] = round(time.perf_counter() - started, 2)
    if args.json:
        print(json.dumps(result))
        return
    print(f"prices: {result['prices']}")
    print(
        f"{result['models_compared']} models, {result['comparisons']} comparisons: "
        f"{result['agreements']} agree, {len(result['disagreements'])} differ, "
        f"{result['unexplained']} unexplained"
    )
    for rule, count in result["disagreements_by_rule"].items():
        print(f"  {rule}: {count}")
    for row in result["disagreements"]:
        if row["reason"] is None:
            print(f"  UNEXPLAINED {row['model']} {row['shape']}: {row['ours']} vs {row['other']}")
    for row in result["fixtures"]:
        mark = "ok" if row["matches"] else "MISMATCH"
        print(
            f"fixture {row['name']}: expected {row['expected_usd']} ours {row['ours_usd']} {mark}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
