"""Outage drill: steady traffic through a Guard while its primary route dies and comes back.

Runs :func:`llmguard_sdk.testing.drill.run_drill`: ``--rate`` chat calls per second (20) through a
Guard with routes primary -> backup -> local model (when installed), while the primary first
refuses connections, then answers 503, then hangs (``--outage`` seconds each), then returns.
Reports the answered share, latency before, during and after the outage against the backup's
own latency, the calls that still reached the dead primary against the breaker's half-open
probes, and how long recovery took.

Latency is reported per window as ``latency_ms[window]``: ``samples``, ``p50``, ``max``, and
``p99`` only where the window has at least 1,000 calls (a nearest-rank p99 over ~115 calls is
the second-slowest call, so it is not called a p99). The backup's own answers
(``fallback_ms``) and the onset window (``onset_ms``) come from the drill as one nearest-rank
value each: below 101 samples that value is the slowest call and is reported as ``max``;
otherwise as ``slowest_k`` (the k-th slowest call) with ``k``. ``targets`` keeps the drill's
own checks except its p99 one, which is replaced by the same comparison on what the samples
support (``during_tail_within_fallback_tail_plus_50ms``: p99 against p99 where both windows
have 1,000 calls, else max against max; ``null`` where the drill's report does not give the
backup's max) and says which it used.

``return_s``: seconds from the primary's return until it serves 90 % of calls again. The
return the issue asks about (a 45 s outage, the SDK's default breaker): ``--outage 15 --after 15
--default-breaker``: a background probe of the open breaker (every ``probe_every``, 5 s) ends
its open wait as soon as one succeeds.

For a real p99 of the outage window, run it long or fast enough for 1,000 calls in it, e.g.
``--rate 60 --outage 6`` (about 1,000 calls while the breaker is open).

Usage: python bench/outage_drill.py [--json] [--png FILE] [--quick] [--rate R] [--outage S]
       [--after S] [--default-breaker]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from _benchkit import P99_MIN_SAMPLES, exit_on_signals

from llmguard_sdk.breaker import BreakerPolicy
from llmguard_sdk.testing.drill import DrillReport, run_drill

QUICK = {"before": 1.0, "outage": 1.0, "after": 3.0}
WINDOWS = ("before", "during", "after")


def tail(samples: int, p99: float | None, maximum: float | None) -> dict[str, Any]:
    """A latency tail as its sample count supports it: the max, and the p99 from
    :data:`P99_MIN_SAMPLES` samples on (the drill reports none below)."""
    found: dict[str, Any] = {"samples": samples, "max": maximum}
    if samples >= P99_MIN_SAMPLES and p99 is not None:
        found["p99"] = p99
    return found


def honest(report: DrillReport) -> dict[str, Any]:
    """The drill's report with each percentile labelled by what its sample count supports."""
    raw = report.as_dict()
    latency: dict[str, dict[str, Any]] = {}
    for window in WINDOWS:
        samples = report.window_requests.get(window, 0)
        row: dict[str, Any] = {
            "samples": samples,
            "p50": report.p50_ms[window],
            "max": report.max_ms[window],
        }
        if samples >= P99_MIN_SAMPLES:
            row["p99"] = report.p99_ms[window]
        latency[window] = row
    fallback = tail(report.fallback_samples, report.fallback_p99_ms, report.fallback_max_ms)
    onset = {"samples": report.window_requests.get("onset", 0)}
    during = latency["during"]
    if "p99" in during and "p99" in fallback:
        basis, ours, theirs = "p99", during["p99"], fallback["p99"]
    else:
        basis, ours, theirs = "max", during["max"], fallback.get("max")
    targets: dict[str, bool | None] = {k: v for k, v in report.targets.items() if "p99" not in k}
    # None: not measurable (no backup answers in the window)
    targets["during_tail_within_fallback_tail_plus_50ms"] = (
        None if ours is None or theirs is None else ours <= theirs + 50
    )
    for key in (
        "p50_ms",
        "p99_ms",
        "max_ms",
        "onset_p99_ms",
        "fallback_p99_ms",
        "fallback_max_ms",
        "targets",
    ):
        raw.pop(key, None)
    return {
        "benchmark": "outage_drill",
        "answered_share": raw.pop("answered_share"),
        "latency_ms": latency,
        "fallback_ms": fallback,
        "onset_ms": onset,
        "tail_basis": basis,
        "targets": targets,
        "p99_min_samples": P99_MIN_SAMPLES,
        **raw,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--png", default=None, help="write a timeline PNG to this file")
    parser.add_argument("--quick", action="store_true", help="short phases (about 7 s)")
    parser.add_argument("--rate", type=float, default=20.0, help="calls started per second")
    parser.add_argument("--outage", type=float, default=None, help="seconds of each outage phase")
    parser.add_argument("--after", type=float, default=None, help="seconds after the return")
    parser.add_argument(
        "--default-breaker",
        action="store_true",
        help="the SDK's default BreakerPolicy() instead of the drill's short one",
    )
    args = parser.parse_args()
    exit_on_signals()

    phases: dict[str, float] = dict(QUICK) if args.quick else {}
    if args.outage is not None:
        phases["outage"] = args.outage
    if args.after is not None:
        phases["after"] = args.after
    breaker = BreakerPolicy() if args.default_breaker else None
    report = run_drill(png=args.png, rate=args.rate, breaker=breaker, **phases)
    if args.json:
        print(json.dumps(honest(report)))
    else:
        print(report.render())
        result = honest(report)
        print("\nlatency (ms) with sample counts; p99 only from 1,000 samples:")
        for window, row in result["latency_ms"].items():
            print(f"  {window:<7} {row}")
        print(f"  fallback {result['fallback_ms']}")
        print(f"  onset    {result['onset_ms']}")
        print(f"targets: {result['targets']}")


if __name__ == "__main__":
    main()
