"""``llmguard cost``: estimate a monthly bill, and report one from recorded usage.

``llmguard cost estimate`` prices a workload under each option (one model, or a routing
split such as 70 % small / 30 % large) with :func:`llmguard_sdk.budget.estimate.estimate`.

``llmguard cost report FILE`` reads a :class:`~llmguard_sdk.budget.UsageRecorder` file and
prints calls, cost and cost per successful call per tenant and feature; ``--since`` and
``--until`` keep the calls of a stretch of time (ISO dates or datetimes, UTC unless they give
an offset; ``--since`` from its instant on, ``--until`` before its instant, a date alone
through the end of that day).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Any

from ..budget._source import TIERS
from ..budget._usage_file import no_usage_records, skipped_lines
from ..budget.estimate import estimate
from ..budget.prices import PriceTable
from ..budget.recorder import read_usage, usage_report
from ..errors import ConfigurationError, UnknownModelPriceError
from ._command import Command, Group, number, positive_number

__all__ = ["COST"]


def _split(text: str) -> tuple[str, dict[str, float]]:
    shares: dict[str, float] = {}
    for part in text.split(","):
        model, sep, share = part.strip().rpartition("=")
        if not sep or not model:
            raise argparse.ArgumentTypeError(f"a split is model=share,...; got {text!r}")
        try:
            shares[model] = float(share.rstrip("%"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad share in {text!r}") from None
    total = sum(shares.values())
    if not 0 < total < math.inf or any(not 0 <= s < math.inf for s in shares.values()):
        raise argparse.ArgumentTypeError(f"shares must be positive: {text!r}")
    if not any(math.isclose(total, whole, rel_tol=1e-9) for whole in (100.0, 1.0)):
        raise argparse.ArgumentTypeError(  # (it was rescaled: 70,20 priced as 78 % / 22 %)
            f"shares must add up to 100 (percentages) or 1 (fractions), got {total:g}: {text!r}"
        )
    name = " / ".join(f"{s / total:.0%} {m}" for m, s in shares.items())
    return name, {m: s / total for m, s in shares.items()}


def _fraction(text: str) -> float:
    value = number(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError("must be a fraction in [0, 1), or a percentage")
    return value


def _estimate_arguments(est: argparse.ArgumentParser) -> None:
    est.add_argument("--requests-per-day", type=positive_number, required=True)
    est.add_argument(
        "--input-tokens", type=positive_number, required=True, help="input tokens, p50"
    )
    est.add_argument("--input-tokens-p95", type=positive_number, help="input tokens, p95 (= p50)")
    est.add_argument("--output-tokens", type=positive_number, required=True, help="output, p50")
    est.add_argument("--output-tokens-p95", type=positive_number, help="output tokens, p95 (= p50)")
    est.add_argument(
        "--model", action="append", default=[], help="a model to price alone (repeatable)"
    )
    est.add_argument(
        "--split",
        action="append",
        type=_split,
        default=[],
        help="a routing split, e.g. gpt-4o-mini=70,gpt-4o=30 (repeatable)",
    )
    for option, text in (
        ("--cache-hit-rate", "answered by cache"),
        ("--cached-input-share", "input read from prompt cache"),
        ("--retry-rate", "billed extra attempts"),
    ):
        est.add_argument(option, type=_fraction, default=0.0, help=f"{text} (default: %(default)g)")
    est.add_argument(
        "--days", type=positive_number, default=30.0, help="days in a month (default: %(default)g)"
    )
    est.add_argument(
        "--service-tier",
        choices=TIERS,
        help="price every call at this tier (batch: the batch discount)",
    )
    est.add_argument(
        "--prices", help="a price table JSON file over the default (genai-prices, then ours)"
    )
    est.add_argument("--json", action="store_true", help="print JSON")


def _models_arguments(mod: argparse.ArgumentParser) -> None:
    mod.add_argument("match", nargs="?", default="", help="only names containing this")
    mod.add_argument("--json", action="store_true", help="print JSON")


_ISO = "2026-11-01, 2026-11-01T12:00 or 2026-11-01T12:00:00+02:00"


def _moment(text: str, *, end_of_day: bool) -> dt.datetime:
    """An ISO date or datetime as a UTC datetime (naive: UTC); a date alone is its start, or
    with ``end_of_day`` the start of the next day."""
    value = text.strip()
    try:
        if len(value) == 10:  # a date alone
            start = dt.datetime.combine(dt.date.fromisoformat(value), dt.time(), dt.timezone.utc)
            return start + dt.timedelta(days=1) if end_of_day else start
        if value[-1:] in ("Z", "z"):  # (Python 3.10's fromisoformat does not take it)
            value = value[:-1] + "+00:00"
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO date or datetime (UTC unless it gives an offset), such as {_ISO}: {text!r}"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc)


def _since(text: str) -> dt.datetime:
    return _moment(text, end_of_day=False)


def _until(text: str) -> dt.datetime:
    return _moment(text, end_of_day=True)


def _report_arguments(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("file", help="a JSON Lines file written by UsageRecorder")
    rep.add_argument("--json", action="store_true", help="print JSON")
    rep.add_argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help=f"only calls made at or after WHEN: an ISO date or datetime, UTC ({_ISO})",
    )
    rep.add_argument(
        "--until",
        type=_until,
        metavar="WHEN",
        help="only calls made before WHEN (a date alone: through the end of that day)",
    )


def _table(path: str | None) -> PriceTable:
    table = PriceTable.default_table()
    if path:
        try:
            mine = PriceTable.from_json(path)
        except ConfigurationError as exc:  # what is wrong, and in which file
            said = str(exc).replace(f"cannot read price table {path}: ", "cannot read it: ")
            raise ConfigurationError(f"--prices {path}: {said}") from None
        table = table.with_prices(mine.entries(), default=mine.default)
    return table


def _run_models(args: argparse.Namespace) -> int:
    table = PriceTable.default_table()
    match = args.match.lower()
    found = [name for name in table.models() if match in name.lower()]
    if args.json:
        print(json.dumps({"prices": table.version, "models": found}))
        return 0
    for name in found:
        print(name)
    print(f"{len(found)} models; prices: {table.version}")
    return 0


def _tokens(args: argparse.Namespace, kind: str) -> tuple[float, float]:
    """``--{kind}-tokens`` and its p95 (the p50 when not given); a p95 below the p50 (a
    month's p95 priced under its p50) is refused."""
    p50, p95 = getattr(args, f"{kind}_tokens"), getattr(args, f"{kind}_tokens_p95")
    if p95 is not None and p95 < p50:
        raise ConfigurationError(
            f"--{kind}-tokens-p95 {p95:g} is below --{kind}-tokens {p50:g} (the p50): a p95 "
            "is at least the p50"
        )
    return p50, p95 or p50


def _unpriced(args: argparse.Namespace, table: PriceTable, model: str) -> ConfigurationError:
    """What is said of a model the table has no price for, in the command's words: the
    option that named it, the name meant, how to list the models or give a price."""
    option = "--model" if model in args.model else "--split"
    near = difflib.get_close_matches(model, table.models(), n=1)
    meant = f" (did you mean {near[0]}?)" if near else ""
    return ConfigurationError(
        f"{option}: no price for model {model!r}{meant}: `llmguard cost models NAME` lists "
        "the models priced; --prices FILE gives a price for another"
    )


def _run_estimate(args: argparse.Namespace) -> int:
    table = _table(args.prices)
    options = [(model, {model: 1.0}) for model in args.model] + list(args.split)
    if not options:
        raise ConfigurationError("name at least one --model or --split")
    try:
        found = estimate(
            table,
            requests_per_day=args.requests_per_day,
            input_tokens=_tokens(args, "input"),
            output_tokens=_tokens(args, "output"),
            options=options,
            cache_hit_rate=args.cache_hit_rate,
            cached_input_share=args.cached_input_share,
            retry_rate=args.retry_rate,
            days=args.days,
            tier=args.service_tier,
        )
    except UnknownModelPriceError as exc:  # (it said to call PriceTable.with_prices)
        named = f"{exc.provider}/{exc.model}" if exc.provider else exc.model
        raise _unpriced(args, table, named) from None
    if args.json:
        print(
            json.dumps(
                {
                    "prices": table.version,
                    "service_tier": args.service_tier,
                    "options": [asdict(o) for o in found],
                }
            )
        )
        return 0
    width = max(len(o.name) for o in found)
    print(f"{'option':<{width}}  {'per call p50':>12}  {'month p50':>12}  {'month p95':>12}")
    for o in found:
        cells = [
            f"${o.per_request_p50_usd:.6f}",
            f"${o.monthly_p50_usd:,.2f}",
            f"${o.monthly_p95_usd:,.2f}",
        ]
        print(f"{o.name:<{width}}  " + "  ".join(f"{cell:>12}" for cell in cells))
    tier = f", {args.service_tier} tier" if args.service_tier else ""
    print(f"prices: {table.version}{tier}; each model at the dearest price of the day")
    return 0


def _within(
    records: Iterable[dict[str, Any]],
    since: dt.datetime | None,
    until: dt.datetime | None,
    outside: list[int],
) -> Iterator[dict[str, Any]]:
    """The records made from ``since`` (included) to ``until`` (excluded); those left out,
    a record without a time among them, are counted in ``outside[0]``."""
    first = since.timestamp() if since is not None else -math.inf
    end = until.timestamp() if until is not None else math.inf
    for record in records:
        ts = record.get("ts")
        if not isinstance(ts, bool) and isinstance(ts, (int, float)) and first <= ts < end:
            yield record
        else:
            outside[0] += 1


def _costs_not_negative(records: Iterable[dict[str, Any]], path: str) -> Iterator[dict[str, Any]]:
    """``records``, refusing one with a negative or not finite ``cost_usd`` (a UsageRecorder
    never writes one: it took that much off the report's totals, or made them NaN)."""
    for index, record in enumerate(records, 1):
        cost = record.get("cost_usd")
        if not isinstance(cost, bool) and isinstance(cost, (int, float)):
            what = "a negative" if cost < 0 else None if math.isfinite(cost) else "a non-finite"
            if what is not None:
                raise ConfigurationError(
                    f"{path}: usage record {index} has {what} cost_usd ({cost!r}); a "
                    "UsageRecorder never writes one"
                )
        yield record


def _stretch(args: argparse.Namespace) -> str:
    """``from ... until ...`` of the dates asked ('' for none)."""
    parts = [f"from {args.since.isoformat()}"] if args.since is not None else []
    parts += [f"until {args.until.isoformat()}"] if args.until is not None else []
    return " ".join(parts)


def _run_report(args: argparse.Namespace) -> int:
    since, until = args.since, args.until
    if since is not None and until is not None and since >= until:
        raise ConfigurationError(
            f"--since is after --until (or the same instant): {since.isoformat()} is not"
            f" before {until.isoformat()}"
        )
    records: Iterable[dict[str, Any]] = _costs_not_negative(read_usage(args.file), args.file)
    outside = [0]
    if since is not None or until is not None:
        records = _within(records, since, until, outside)
    report = usage_report(records)
    if not report["total"]["calls"]:  # nothing read: not a usage file (as llmguard report)
        said = no_usage_records(args.file)
        if outside[0]:  # records, none of them made in the stretch asked
            said = f"no usage records in {args.file} {_stretch(args)} ({outside[0]} outside)"
        print(f"llmguard cost report: {said}", file=sys.stderr)
        return 1
    skipped = skipped_lines(args.file)
    if skipped:  # records read: a report (exit 0) of part of the file, said so
        print(f"llmguard cost report: {skipped}", file=sys.stderr)
    if since is not None or until is not None:
        report["since"] = since.isoformat() if since is not None else None
        report["until"] = until.isoformat() if until is not None else None
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{'tenant':<16} {'feature':<16} {'calls':>7} {'ok':>7} {'cost':>12} {'per success':>12}")
    for row in report["groups"]:
        each = row["cost_per_success_usd"]
        print(
            f"{row['tenant'][:16]:<16} {row['feature'][:16]:<16} {row['calls']:>7} "
            f"{row['ok']:>7} ${row['cost_usd']:>11.6f} "
            + (f"${each:>11.6f}" if each is not None else f"{'-':>12}")
        )
    total = report["total"]
    print(
        f"total: {total['calls']} calls, {total['ok']} ok, ${total['cost_usd']:.6f}"
        + (f", {total['unpriced_calls']} without a price" if total["unpriced_calls"] else "")
    )
    if "since" in report:
        print(f"calls {_stretch(args)} (UTC)")
    return 0


COST = Group(
    "cost",
    "estimate monthly LLM cost, or report it from recorded usage",
    (
        Command(
            "estimate",
            "monthly cost per model or routing split",
            _estimate_arguments,
            _run_estimate,
        ),
        Command("models", "the models the price table knows", _models_arguments, _run_models),
        Command(
            "report",
            "cost per tenant and feature from a usage file",
            _report_arguments,
            _run_report,
        ),
    ),
    description="Estimate what a workload costs per month under each option, or report "
    "the cost of recorded usage per tenant and feature.",
)
