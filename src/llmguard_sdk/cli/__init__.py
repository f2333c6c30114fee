"""The ``llmguard`` command: ``demo``, ``drill``, ``cost``, ``budget``, ``cache``, ``eval``,
``report`` and ``check``.

``llmguard demo`` needs no network and no configuration: it starts local fake providers,
sends a burst of traffic through a Guard and prints what happened.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from .._version import __version__
from ._budget import add_budget_command, run_budget_command
from ._cache import add_cache_command, run_cache_command
from ._check import add_check_command, run_check_command
from ._cost import add_cost_command, run_cost_command
from ._demo import DemoSummary, run_demo
from ._eval import add_eval_command, run_eval_command
from ._report import add_report_command, run_report_command

__all__ = ["DemoSummary", "main", "run_demo"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llmguard`` command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="llmguard",
        description="llmguard-sdk: keep LLM calls fast, available and affordable.",
    )
    parser.add_argument("--version", action="version", version=f"llmguard-sdk {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="send a burst of traffic through a Guard to local fake providers (no network)",
        description="Start two local fake providers, make the first one flaky, send a burst "
        "of chat calls through a Guard and print a summary.",
    )
    demo.add_argument("--requests", type=_positive, default=60, help="calls to send (60)")
    demo.add_argument("--concurrency", type=_positive, default=8, help="calls in flight (8)")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")
    drill = commands.add_parser(
        "drill",
        help="an outage drill: steady traffic while the primary goes down and comes back",
        description="Send steady traffic through a Guard (primary, backup, local model) while "
        "the primary refuses connections, then answers 503, then hangs, then returns; report "
        "answered share, latency before/during/after, calls that reached the dead primary and "
        "the time to recover.",
    )
    drill.add_argument("--rate", type=float, default=20.0, help="requests per second (20)")
    drill.add_argument("--before", type=float, default=3.0, help="seconds before the outage")
    drill.add_argument("--outage", type=float, default=2.0, help="seconds of each down phase")
    drill.add_argument("--after", type=float, default=4.0, help="seconds after the return")
    drill.add_argument("--no-local", action="store_true", help="leave the local model out")
    drill.add_argument("--png", metavar="FILE", help="write a timeline picture")
    drill.add_argument("--json", action="store_true", help="print the report as JSON")
    add_cost_command(commands)
    add_budget_command(commands)
    add_cache_command(commands)
    add_eval_command(commands)
    add_report_command(commands)
    add_check_command(commands)
    args = parser.parse_args(argv)
    if args.command == "eval":
        return run_eval_command(args)
    if args.command == "report":
        return run_report_command(args)
    if args.command == "cost":
        return run_cost_command(args)
    if args.command == "budget":
        return run_budget_command(args)
    if args.command == "cache":
        return run_cache_command(args)
    if args.command == "check":
        return run_check_command(args)
    if args.command == "drill":
        from ..testing.drill import run_drill

        report = run_drill(
            rate=args.rate,
            before=args.before,
            outage=args.outage,
            after=args.after,
            local=not args.no_local,
            png=args.png,
        )
        print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
        return 0 if report.as_dict()["answered_share"] == 1.0 else 1
    if args.command == "demo":
        summary = run_demo(requests=args.requests, concurrency=args.concurrency)
        print(json.dumps(summary.as_dict(), indent=2) if args.json else summary.render())
        return 0 if summary.failed == 0 else 1
    parser.print_help()
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
