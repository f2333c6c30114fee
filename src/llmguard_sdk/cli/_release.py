"""``llmguard release status|promote|rollback``: a canary's stage, read and moved by hand in
the Redis every process of the fleet reads it from.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ..errors import CanaryNotFoundError, ConfigurationError, ReleaseConflictError
from ._command import Command, Group, redis_failed, redis_store, searched, store_arguments

__all__ = ["RELEASE"]


def _arguments(action: argparse.ArgumentParser) -> None:
    action.add_argument("key", help="the release's name (ReleasePlan.key)")
    store_arguments(action, users="the Guards")
    action.add_argument(
        "--stages",
        help="the canary's stage shares (default: those its Guards stored; else "
        "0.01,0.05,0.25,1); shares other than the stored ones are refused",
    )
    action.add_argument("--json", action="store_true", help="print JSON")


def _runner(action: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return _run(args, action)

    return run


def _run(args: argparse.Namespace, action: str) -> int:
    """Carry out ``llmguard release ACTION``; returns the exit status."""
    import redis

    from ..releases import CanaryPolicy, RedisReleaseBackend
    from ..releases.stored import move_by_hand, status_of

    policy = CanaryPolicy() if args.stages is None else CanaryPolicy(stages=_stages(args.stages))
    store = redis_store(args)
    backend = RedisReleaseBackend(store)
    try:
        stored = backend.exchange(args.key, "", 0, {}, {}).stages
        if args.stages is not None and stored and stored != policy.stages:
            print(
                f"llmguard release {action}: the canary under {args.key!r} runs the stages "
                f"{_shares(stored)} (its Guards'), not --stages {_shares(policy.stages)}",
                file=sys.stderr,
            )
            return 1
        if action != "status":
            move_by_hand(backend, args.key, policy, action)
        report = status_of(backend, args.key, policy)
    except CanaryNotFoundError as exc:
        print(f"llmguard release {action}: {exc}; searched {searched(args)}", file=sys.stderr)
        return 1
    except ReleaseConflictError as exc:
        print(f"llmguard release {action}: {exc}", file=sys.stderr)
        return 1
    except redis.RedisError as exc:
        print(f"llmguard release {action}: {redis_failed(args, exc)}", file=sys.stderr)
        return 1
    finally:
        store.close()
    if args.json:  # (with no canary too: the shape of ReleaseControl.status())
        print(json.dumps(report))
    if report["canary"] is None:  # a misspelled key or --prefix, the wrong Redis
        print(
            f"llmguard release {action}: no canary stored under {args.key!r} {searched(args)}",
            file=sys.stderr,
        )
        return 1
    if not args.json:
        print(_render(report))
    return 0


def _stages(text: str) -> tuple[float, ...]:
    """``--stages``: shares separated by commas."""
    try:
        return tuple(float(share) for share in text.split(","))
    except ValueError:
        raise ConfigurationError(f"--stages: shares separated by commas: {text!r}") from None


def _shares(stages: tuple[float, ...]) -> str:
    return ",".join(f"{share:g}" for share in stages)


def _render(report: dict[str, Any]) -> str:
    canary = report["canary"]
    lines = [
        f"{report['key']}: candidate {canary['candidate']} {canary['status']}"
        f" at share {canary['share']:g} (stage {canary['stage']}): {canary['reason']}",
        f"{'arm':<10} {'calls':>8} {'needed':>8} {'errors':>8} {'p99 s':>9} {'cost/call':>11}"
        f" {'low fb':>7}",
    ]
    for arm in ("control", "candidate"):
        f = report[arm]
        needed = "-" if f["calls_needed"] is None else f["calls_needed"]
        rate = "-" if f["error_rate"] is None else f"{f['error_rate']:.2%}"
        p99 = "-" if f["p99_latency_s"] is None else f"{f['p99_latency_s']:.3f}"
        cost = "-" if f["median_cost_usd"] is None else f"${f['median_cost_usd']:.6f}"
        lines.append(
            f"{arm:<10} {f['calls']:>8} {needed:>8} {rate:>8} {p99:>9} {cost:>11}"
            f" {f['low_feedback']:>7}"
        )
    if canary["status"] == "canary":
        lines.append(
            f"calls needed: each arm serves {canary['min_calls']} calls in a stage before it is"
            " promoted (a breach rolls it back at any time)"
        )
    evidence = ", ".join(f"{k} {v}" for k, v in report["log_likelihood_ratios"].items())
    lines.append(f"log likelihood ratios (breach at {report['bound']}): {evidence}")
    return "\n".join(lines)


RELEASE = Group(
    "release",
    "show, promote or roll back a canary shared through Redis",
    tuple(
        Command(name, text, _arguments, _runner(name))
        for name, text in (
            ("status", "the stage, each arm's figures, each metric's evidence"),
            ("promote", "move the canary to its next stage now (rolled back: to its stage)"),
            ("rollback", "send every call back to the current release now"),
        )
    ),
    description="Read a canary's stage and its arms' guardrail figures, or move it by hand "
    "(every process follows within its flush interval).",
)
