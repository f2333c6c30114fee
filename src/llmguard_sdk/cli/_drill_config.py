"""``llmguard drill --config FILE``: the outage drill on the routes of a configuration file
(:func:`~llmguard_sdk.testing.config_drill.run_config_drill`)."""

from __future__ import annotations

import argparse
import json
import os

__all__ = ["add_config_drill_arguments", "run_config_drill_command"]


def add_config_drill_arguments(drill: argparse.ArgumentParser) -> None:
    """Add ``--config`` and ``--primary`` to the ``drill`` command's parser."""
    drill.add_argument(
        "--config",
        metavar="FILE",
        nargs="?",
        const="",
        help="drill your own configuration (TOML, YAML or JSON; --config alone: the file "
        "LLMGUARD_CONFIG names): faults are injected in front of its primary route in the "
        "client, its real backups answer; exits 1 when a call during the outage was not "
        "answered by a backup",
    )
    drill.add_argument(
        "--primary", metavar="ROUTE", help="with --config: the route to fail (default: first)"
    )


def run_config_drill_command(args: argparse.Namespace) -> int:
    """Run the drill on ``args.config``: 0 when the fallback path held, 1 when it did not (a
    bad configuration raises ConfigurationError: exit 2)."""
    from .._config_file import config_source
    from ..testing.config_drill import run_config_drill

    report = run_config_drill(
        config_source(args.config or None, os.environ),
        primary=args.primary,
        rate=args.rate,
        before=args.before,
        outage=args.outage,
        after=args.after,
    )
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 0 if report.fallback_ok else 1
