"""``llmguard report usage.jsonl --html out.html``: the usage report with plots.

Reads a :class:`~llmguard_sdk.budget.UsageRecorder` file (and, with ``--samples``, an
:class:`~llmguard_sdk.telemetry.sampling.EvalSink` file for feedback scores) and writes the
page of :mod:`llmguard_sdk.telemetry.report`.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import sys

from ..budget._usage_file import not_json_lines
from ..errors import ConfigurationError
from ._command import Command

__all__ = ["REPORT"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("usage", help="the usage file (JSON Lines from UsageRecorder)")
    parser.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    parser.add_argument("--samples", metavar="FILE", help="an EvalSink file (feedback scores)")


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard report``; returns the exit status (1 when the file had no call; a file
    that is not JSON Lines is said so, and no page is written)."""
    from ..budget.recorder import read_usage
    from ..telemetry.report import _write_page

    records = list(read_usage(args.usage))
    said = None if records else not_json_lines(args.usage)
    if said is not None:  # (a CSV export: a page of 0 calls was written)
        print(f"llmguard report: {said}", file=sys.stderr)
        return 1
    try:
        calls = _write_page(records, args.html, args.samples)
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
