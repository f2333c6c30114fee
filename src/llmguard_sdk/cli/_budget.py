"""``llmguard budget status``: each budget counter's limit, settled spend, holds and reset.

Reads the counters a fleet shares through Redis, without the application's configuration:
every granted reservation stores its counter's limit, window (and its time zone) and alerts
beside its state. Reset times are shown on each counter's calendar: UTC, or its budget's
``tz``.
``--tenant T`` shows T's counters only (tenant ids are hashed into keys, so they are found
by their hash).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from ..budget._zones import UTC, zone
from ..budget.control import status_row
from ..budget.redis import RedisBudgetBackend
from ..errors import BudgetUnavailableError, ConfigurationError
from ._command import Command, Group, redis_failed, redis_store, searched, store_arguments

__all__ = ["BUDGET"]


def _status_arguments(status: argparse.ArgumentParser) -> None:
    store_arguments(status, users="the Guards")
    status.add_argument(
        "--name", default="default", help="the budget set's name (Budgets; default: %(default)s)"
    )
    status.add_argument("--tenant", help="only this tenant's counters")
    status.add_argument("--json", action="store_true", help="print JSON")


def _run_status(args: argparse.Namespace) -> int:
    """Carry out ``llmguard budget status``; returns the exit status (1 when Redis does not
    answer, or holds no counter there: said with the store and prefix searched)."""
    import redis

    store = redis_store(args)
    try:
        backend = RedisBudgetBackend(store, name=args.name)
        specs = backend.stored_counters(tenant=args.tenant)
        rows = [
            status_row(spec, found)
            for spec, found in zip(specs, backend.status(specs), strict=True)
        ]
    except (redis.RedisError, BudgetUnavailableError) as exc:
        print(f"llmguard budget status: {redis_failed(args, exc)}", file=sys.stderr)
        return 1
    except ConfigurationError as exc:  # a counter's time zone this system cannot read
        print(f"llmguard budget status: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    if args.json:
        print(json.dumps({"counters": rows}))
    if not rows:  # (as cost report of no calls: 1) a misspelled --prefix, the wrong Redis
        tenant = f" for tenant {args.tenant}" if args.tenant else ""
        print(
            f"llmguard budget status: no budget counters found{tenant} (budget set "
            f"{args.name!r}) {searched(args)}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        return 0
    width = max(len(row["scope"]) for row in rows)
    print(f"{'counter':<{width}}  {'limit':>12}  {'settled':>12}  {'held':>12}  resets")
    for row in rows:
        print(
            f"{row['scope']:<{width}}  ${row['limit_usd']:>11.6f}  ${row['spent_usd']:>11.6f}"
            f"  ${row['held_usd']:>11.6f}  {_local(row['resets_at'], row['tz'])}"
        )
    return 0


def _local(at: float, tz: str) -> str:
    """A reset time on its counter's calendar: UTC's, or its budget's time zone's."""
    when = dt.datetime.fromtimestamp(at, dt.timezone.utc if tz == UTC else zone(tz))
    return f"{when:%Y-%m-%d %H:%M:%S} {tz}"


BUDGET = Group(
    "budget",
    "show spend budget counters shared through Redis",
    (
        Command(
            "status", "each counter's limit, spend, holds, reset", _status_arguments, _run_status
        ),
    ),
    description="Show each budget counter's limit, settled spend, amount held by calls in "
    "flight and reset time, read from the Redis the Guards share.",
)
