"""Outage drill: steady traffic through a Guard while its primary route dies and comes back.

Runs :func:`llmguard_sdk.drill.run_drill`: 20 chat calls per second through a Guard with routes
primary -> backup -> local model (when installed), while the primary first refuses connections,
then answers 503, then hangs, then returns. Reports the answered share, latency before, during
and after the outage against the backup's own latency, the calls that still reached the dead
primary against the breaker's half-open probes, and how long recovery took.

Usage: python bench/outage_drill.py [--json] [--png FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json

from llmguard_sdk.drill import run_drill

QUICK = {"before": 1.0, "outage": 1.0, "after": 3.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--png", default=None, help="write a timeline PNG to this file")
    parser.add_argument("--quick", action="store_true", help="short phases (about 7 s)")
    args = parser.parse_args()

    report = run_drill(png=args.png, **(QUICK if args.quick else {}))
    if args.json:
        print(json.dumps({"benchmark": "outage_drill", **report.as_dict()}))
    else:
        print(report.render())


if __name__ == "__main__":
    main()
