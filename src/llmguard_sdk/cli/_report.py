"""``llmguard report usage.jsonl --html out.html``: the usage report with plots.

Reads a :class:`~llmguard_sdk.budget.UsageRecorder` file (and, with ``--samples``, an
:class:`~llmguard_sdk.telemetry.sampling.EvalSink` file for feedback scores) and writes the
page of :mod:`llmguard_sdk.telemetry.report`.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse

from ..errors import ConfigurationError
from ._command import Command

__all__ = ["REPORT"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("usage", help="the usage file (JSON Lines from UsageRecorder)")
    parser.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    parser.add_argument("--samples", metavar="FILE", help="an EvalSink file (feedback scores)")


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard report``; returns the exit status (1 when the file had no call)."""
    from ..telemetry.report import write_report

    try:
        calls = write_report(args.usage, args.html, args.samples)
    except OSError as exc:  # the files are read first (a ConfigurationError): the page's write
        raise ConfigurationError(f"cannot write {args.html}: {exc}") from None
    print(f"wrote {args.html}: {calls} calls")
    return 0 if calls else 1


REPORT = Command(
    "report",
    "an HTML report with plots of a usage file (cost, cache, latency, failures)",
    _arguments,
    _run,
    description="Write one self-contained HTML page with plots of a UsageRecorder file: "
    "cost per feature and tenant over time, cache hit rate, latency by route, failed "
    "calls by route, and feedback scores from an EvalSink file.",
)
