"""How long ``import llmguard_sdk`` takes, and which heavy packages it brings in.

Each run is a fresh interpreter with ``python -X importtime -c "import llmguard_sdk"``;
``import_ms`` is the median over the runs of the cumulative time Python reports for the
``llmguard_sdk`` package (interpreter start-up not included), ``wall_ms`` the median wall
time of the whole process. ``heavy_modules`` lists which of redis, numpy, llama_cpp,
tiktoken and the OpenTelemetry SDK/API were imported; ``slowest`` the packages (outside
llmguard_sdk) that cost the most.

Usage: python tools/import_time.py [--json] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

HEAVY = ("redis", "numpy", "llama_cpp", "tiktoken", "opentelemetry")


def one_run() -> tuple[float, float, dict[str, float], set[str]]:
    """One fresh interpreter: (llmguard_sdk's cumulative ms, wall ms, ms per top-level
    package imported, heavy packages seen)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import llmguard_sdk"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = (time.perf_counter() - started) * 1000
    total = 0.0
    packages: dict[str, float] = {}
    heavy: set[str] = set()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if not cumulative.strip().isdigit():
            continue  # the header line
        depth = len(name) - len(name.lstrip()) - 1
        module = name.strip()
        top = module.split(".")[0]
        if top in HEAVY:
            heavy.add(top)
        if module == "llmguard_sdk":
            total = int(cumulative) / 1000
        elif module == top and top != "llmguard_sdk" and depth > 0:
            packages[top] = max(packages.get(top, 0.0), int(cumulative) / 1000)
    return total, wall, packages, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    totals: list[float] = []
    walls: list[float] = []
    packages: dict[str, list[float]] = {}
    heavy: set[str] = set()
    for _ in range(max(1, args.runs)):
        total, wall, found, seen = one_run()
        totals.append(total)
        walls.append(wall)
        heavy |= seen
        for name, ms in found.items():
            packages.setdefault(name, []).append(ms)
    slowest = sorted(
        ((name, statistics.median(values)) for name, values in packages.items()),
        key=lambda item: -item[1],
    )[:8]
    report = {
        "import_ms": round(statistics.median(totals), 1),
        "wall_ms": round(statistics.median(walls), 1),
        "runs": len(totals),
        "heavy_modules": sorted(heavy),
        "slowest": {name: round(ms, 1) for name, ms in slowest},
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"import llmguard_sdk: {report['import_ms']} ms (median of {report['runs']} runs)")
    print(f"whole process: {report['wall_ms']} ms")
    print(f"heavy packages imported: {', '.join(report['heavy_modules']) or 'none'}")
    for name, ms in report["slowest"].items():
        print(f"  {name:<24} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
