"""Per-call overhead of this tree's Guard beside an earlier commit's, measured in the same run.

``git archive REV src`` is unpacked into a temporary folder; one worker process imports
``llmguard_sdk`` from that tree, another from this one. Both call the same FakeProvider (in a
third process, so its CPU time is not counted) and take turns, round by round, each round in a
rotated order, so drift on a shared machine hits both alike. In each round a worker measures
``--calls`` calls through ``Guard.chat`` (default stages, state in memory, telemetry on
without an SDK) and as many calls of its own provider object directly (``bare``): the
difference is the pipeline's overhead (guarded and direct calls alternate in blocks of ten).
CPU time is the worker's ``time.process_time()``. ``--stages all`` puts every stage on, in
memory, in both (rate limits, a tenant budget, the response cache; every call a new question:
an exact miss, a semantic search and a store; telemetry without an SDK).

Prints the median round of each side: ``base_overhead_us`` and ``head_overhead_us`` (CPU
microseconds per call the Guard adds), their samples and ranges, and
``regression_us`` (head minus base; negative: faster).

Usage: python bench/overhead_compare.py [--base REV] [--json] [--calls N] [--rounds R]
       [--stages default|all]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from _benchkit import exit_on_signals, popen_group, print_result, stop_group
from overhead import start_server

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
from llmguard_sdk import ChatRequest, Guard, OpenAICompatibleProvider

base_url, calls, stages = sys.argv[1], int(sys.argv[2]), sys.argv[3]
messages = [{"role": "system", "content": "You are a terse assistant for an online shop."},
            {"role": "user", "content": "Where is my order 4417? It was due on Monday."}]
more = {}
if stages == "all":  # every stage in memory: rate limits, a tenant budget, the cache
    from llmguard_sdk import ResponseCache
    from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
    from llmguard_sdk.ratelimit import RateLimit
    prices = PriceTable.default_table().with_prices({"fake-model": Price(input=0.1, output=0.4)})
    more = {"rate_limits": {"primary": RateLimit(rpm=10_000_000, tpm=10_000_000_000)},
            "budgets": Budgets([Budget(limit_usd=1e6, scope="tenant")], prices=prices),
            "cache": ResponseCache(max_entries=1_000_000)}
guard = Guard(OpenAICompatibleProvider(base_url, model="fake-model", name="primary"),
              max_input_tokens=4096, input_filters=[lambda r: None],
              output_filters=[lambda r: None], hooks=[lambda e: None], environ={}, **more)
bare = OpenAICompatibleProvider(base_url, model="fake-model", name="bare")
request = ChatRequest.model_validate({"messages": messages, "max_tokens": 64})
counter = iter(range(10**9))

def through_guard():
    text = f"{messages[1]['content']} #{next(counter)}"
    question = [messages[0], {"role": "user", "content": text}]
    guard.chat(question, max_tokens=64, tenant="acme", feature="support")

def direct():
    bare.complete(request, model="fake-model", deadline=time.monotonic() + 60)

def measure(call, n):
    start = time.process_time()
    for _ in range(n):
        call()
    return time.process_time() - start

def interleaved(n, block=10):
    # blocks of guarded and direct calls in turn, so that drift hits both alike
    used = {"guard_us": 0.0, "bare_us": 0.0}
    for _ in range(max(1, n // block)):
        used["guard_us"] += measure(through_guard, block)
        used["bare_us"] += measure(direct, block)
    return {k: v / (max(1, n // block) * block) * 1e6 for k, v in used.items()}

interleaved(100)  # warm up
print("ready", flush=True)
for line in sys.stdin:
    print(json.dumps(interleaved(calls)), flush=True)
"""


def unpack(rev: str, into: Path) -> Path:
    """The ``src`` folder of commit ``rev``, unpacked under ``into``."""
    archive = into / "src.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into)  # our own repository's archive
    return into / "src"


def start_worker(src: Path, base_url: str, calls: int, stages: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    worker = popen_group(
        [sys.executable, "-c", WORKER, base_url, str(calls), stages],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert worker.stdout is not None
    if worker.stdout.readline().strip() != "ready":
        stop_group(worker)
        raise SystemExit(f"the worker for {src} did not start")
    return worker


def one_round(worker: subprocess.Popen[str]) -> dict[str, float]:
    assert worker.stdin is not None
    assert worker.stdout is not None
    worker.stdin.write("go\n")
    worker.stdin.flush()
    found: dict[str, float] = json.loads(worker.stdout.readline())
    return found


def summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    overheads = [r["guard_us"] - r["bare_us"] for r in rounds]
    return {
        "overhead_us": round(statistics.median(overheads), 1),
        "guard_us": round(statistics.median(r["guard_us"] for r in rounds), 1),
        "bare_us": round(statistics.median(r["bare_us"] for r in rounds), 1),
        "rounds": len(rounds),
        "overhead_range_us": [round(min(overheads), 1), round(max(overheads), 1)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the commit to compare with (HEAD~1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=300, help="calls per round (300)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per side (9)")
    parser.add_argument(
        "--stages", choices=("default", "all"), default="default", help="the Guard's stages"
    )
    args = parser.parse_args()
    exit_on_signals()
    base_rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    server, base_url = start_server()
    workers: dict[str, subprocess.Popen[str]] = {}
    rounds: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="llmguard-base-") as folder:
            base_src = unpack(base_rev, Path(folder))
            workers["base"] = start_worker(base_src, base_url, args.calls, args.stages)
            workers["head"] = start_worker(ROOT / "src", base_url, args.calls, args.stages)
            for index in range(args.rounds):
                order = ["base", "head"] if index % 2 == 0 else ["head", "base"]
                for side in order:
                    rounds[side].append(one_round(workers[side]))
    finally:
        for worker in workers.values():
            stop_group(worker)
        stop_group(server)
    base, head = summary(rounds["base"]), summary(rounds["head"])
    result = {
        "base": base_rev,
        "base_overhead_us": base["overhead_us"],
        "head_overhead_us": head["overhead_us"],
        "regression_us": round(head["overhead_us"] - base["overhead_us"], 1),
        "base_detail": base,
        "head_detail": head,
        "stages": args.stages,
        "calls_per_round": args.calls,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print_result(result, args.json)


if __name__ == "__main__":
    main()
