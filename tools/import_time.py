"""How long ``import llmguard_sdk`` takes, and which heavy packages it brings in.

Each run is a fresh interpreter with ``python -X importtime -c "import llmguard_sdk"``
(``--names Guard``: ``from llmguard_sdk import Guard``; the package imports each public
name's module at its first use, so the bare import alone is light); ``import_ms`` is the
median over the runs of the cumulative time Python reports for the package's modules
(interpreter start-up not included), ``wall_ms`` the median wall time of the whole process.
``heavy_modules`` lists which of redis, numpy, llama_cpp, tiktoken and the OpenTelemetry
SDK/API were imported; ``slowest`` the packages (outside llmguard_sdk) that cost the most.

The runs read compiled bytecode, as an installed package does: with
``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` (a source checkout), every run
compiled each module from its source again, several times the import's own cost. A first
run, not counted, writes them under a temporary ``PYTHONPYCACHEPREFIX``.

Usage: python tools/import_time.py [--json] [--runs N] [--names NAME,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HEAVY = ("redis", "numpy", "llama_cpp", "tiktoken", "opentelemetry")


def one_run(
    statement: str, environ: dict[str, str]
) -> tuple[float, float, dict[str, float], set[str]]:
    """One fresh interpreter running ``statement``: (llmguard_sdk's cumulative ms, wall ms,
    ms per top-level package imported, heavy packages seen)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        env=environ,
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
        if top == "llmguard_sdk" and depth == 0:  # (the package, then each name's module)
            total += int(cumulative) / 1000
        elif module == top and top != "llmguard_sdk" and depth > 0:
            packages[top] = max(packages.get(top, 0.0), int(cumulative) / 1000)
    return total, wall, packages, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--names", default="", help="public names to import, comma-separated")
    args = parser.parse_args()
    names = [name.strip() for name in args.names.split(",") if name.strip()]
    if not all(name.isidentifier() for name in names):
        parser.error(f"--names: not Python names: {args.names!r}")
    statement = f"from llmguard_sdk import {', '.join(names)}" if names else "import llmguard_sdk"
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cache = tempfile.TemporaryDirectory(prefix="import-time-")
    environ["PYTHONPYCACHEPREFIX"] = cache.name
    one_run(statement, environ)  # (writes the bytecode: not counted)
    totals: list[float] = []
    walls: list[float] = []
    packages: dict[str, list[float]] = {}
    heavy: set[str] = set()
    for _ in range(max(1, args.runs)):
        total, wall, found, seen = one_run(statement, environ)
        totals.append(total)
        walls.append(wall)
        heavy |= seen
        for name, ms in found.items():
            packages.setdefault(name, []).append(ms)
    slowest = sorted(
        ((name, statistics.median(values)) for name, values in packages.items()),
        key=lambda item: -item[1],
    )[:8]
    cache.cleanup()
    report: dict[str, Any] = {
        "statement": statement,
        "import_ms": round(statistics.median(totals), 1),
        "wall_ms": round(statistics.median(walls), 1),
        "runs": len(totals),
        "heavy_modules": sorted(heavy),
        "slowest": {name: round(ms, 1) for name, ms in slowest},
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"{statement}: {report['import_ms']} ms (median of {report['runs']} runs)")
    print(f"whole process: {report['wall_ms']} ms")
    print(f"heavy packages imported: {', '.join(report['heavy_modules']) or 'none'}")
    for name, ms in report["slowest"].items():
        print(f"  {name:<24} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
