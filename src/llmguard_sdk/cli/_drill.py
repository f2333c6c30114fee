"""``llmguard drill``: an outage drill against built-in fake providers and the local model.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from ..errors import ConfigurationError
from ._command import Command
from ._drill_config import add_config_drill_arguments, run_config_drill_command

__all__ = ["DRILL"]


def _arguments(drill: argparse.ArgumentParser) -> None:
    for option, default, text in (
        ("--rate", 20.0, "requests per second"),
        ("--before", 3.0, "seconds before the outage"),
        ("--outage", 2.0, "seconds of each down phase"),
        ("--after", 4.0, "seconds after the return"),
    ):
        drill.add_argument(
            option, type=float, default=default, help=f"{text} (default: %(default)g)"
        )
    drill.add_argument(
        "--no-local", action="store_true", help="leave the local model out (not with --config)"
    )
    drill.add_argument("--png", metavar="FILE", help="write a timeline picture (not with --config)")
    drill.add_argument("--json", action="store_true", help="print the report as JSON")
    add_config_drill_arguments(drill)


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard drill``: 0 when every call was answered (``--config``: when the
    fallback path held)."""
    for name in ("rate", "before", "outage", "after"):  # (named as the option given)
        if not 0 < getattr(args, name) < math.inf:
            raise ConfigurationError(
                f"--{name} must be positive and finite, got {getattr(args, name):g}"
            )
    if args.config is not None:  # ("": --config alone, the file LLMGUARD_CONFIG names)
        given = (("--png", args.png is not None), ("--no-local", args.no_local))
        ignored = [name for name, used in given if used]
        if ignored:  # a drill of the file's own routes draws no picture and adds no model
            raise ConfigurationError(f"{' and '.join(ignored)}: not with --config")
        return run_config_drill_command(args)
    if args.primary is not None:  # a route of the file: the built-in drill has its own
        raise ConfigurationError("--primary: only with --config (the route of its file to fail)")
    from ..testing.drill import run_drill

    if args.png is not None and not Path(args.png).resolve().parent.is_dir():
        raise ConfigurationError(f"--png {args.png}: its folder does not exist")
    report = run_drill(
        rate=args.rate,
        before=args.before,
        outage=args.outage,
        after=args.after,
        local=not args.no_local,
    )
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    if args.png is not None:  # after the report: a failed write loses no figure
        try:
            report.write_png(args.png)
        except OSError as exc:
            raise ConfigurationError(f"cannot write {args.png}: {exc}") from None
    return 0 if report.as_dict()["answered_share"] == 1.0 else 1


DRILL = Command(
    "drill",
    "an outage drill: steady traffic while the primary goes down and comes back",
    _arguments,
    _run,
    description="Send steady traffic through a Guard (primary, backup, local model) while "
    "the primary refuses connections, then answers 503, then hangs, then returns; report "
    "answered share, latency before/during/after, calls that reached the dead primary and "
    "the time to recover.",
)
