"""``llmguard report usage.jsonl --html out.html``: the usage report with plots.

Reads a :class:`~llmguard_sdk.budget.UsageRecorder` file (and, with ``--samples``, an
:class:`~llmguard_sdk.telemetry.sampling.EvalSink` file for feedback scores) and writes the
page of :mod:`llmguard_sdk.telemetry.report`.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..budget._usage_file import no_usage_records, skipped_lines
from ..errors import ConfigurationError
from ._command import Command

__all__ = ["REPORT"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("usage", help="the usage file (JSON Lines from UsageRecorder)")
    parser.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    parser.add_argument("--samples", metavar="FILE", help="an EvalSink file (feedback scores)")


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard report``; returns the exit status (1 when the file holds no usage
    record: not JSON Lines, naming its line, or JSON Lines of other records; no page is
    written, the last one is kept)."""
    from ..budget.recorder import read_usage
    from ..telemetry.report import render_report

    records = list(read_usage(args.usage))
    if not records:  # (an EvalSink file: a page of 0 calls was written over the last one)
        print(f"llmguard report: {no_usage_records(args.usage)}", file=sys.stderr)
        return 1
    skipped = skipped_lines(args.usage)
    if skipped:  # a page of part of the file, said so
        print(f"llmguard report: {skipped}", file=sys.stderr)
    samples = _samples(args.samples) if args.samples else []
    try:
        Path(args.html).write_text(render_report(records, samples), encoding="utf-8")
    except OSError as exc:  # the files are read first (a ConfigurationError): the page's write
        raise ConfigurationError(f"cannot write {args.html}: {exc}") from None
    print(f"wrote {args.html}: {len(records)} calls")
    return 0


def _samples(path: str) -> list[dict[str, Any]]:
    """The sampled calls of the ``--samples`` file; one with text but no sample in it (the
    usage file, a CSV) is a :class:`ConfigurationError` (the page came out without feedback
    scores, as if none had been given). An empty one is a sink that sampled no call yet."""
    from ..telemetry.sampling import read_samples

    found = read_samples(path)
    if not found and Path(path).stat().st_size:
        raise ConfigurationError(
            f"--samples {path}: no EvalSink samples in it (a JSON object per sampled call, "
            '"type": "call"): give the file Telemetry(eval_sink=EvalSink(...)) writes'
        )
    return found


REPORT = Command(
    "report",
    "an HTML report with plots of a usage file (cost, cache, latency, failures)",
    _arguments,
    _run,
    description="Write one self-contained HTML page with plots of a UsageRecorder file: "
    "cost per feature and tenant over time, cache hit rate, latency by route, failed "
    "calls by route, and feedback scores from an EvalSink file.",
)
