"""Per-call overhead of a Guard against a bare call of the same provider.

Both sides send the same request to the same FakeProvider, which runs in a *separate process*
so that its CPU time is not counted. "bare" calls the provider object directly (the same httpx
client and parsing the Guard uses); "guard" goes through ``Guard.chat`` with every stage that
exists so far, state in memory. CPU time is this process's ``time.process_time()``; wall time
is ``time.perf_counter()``. Rounds of bare and guard calls alternate, and the median round is
reported, so drift on a shared machine hits both sides alike.

Usage: python bench/overhead.py [--json] [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from llmguard_sdk import ChatRequest, Guard, OpenAICompatibleProvider

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant for an online shop."},
    {"role": "user", "content": "Where is my order 4417? It was due on Monday."},
]
STAGES = [
    "validate",
    "input_guardrails",
    "max_input_tokens",
    "idempotency_key",
    "fallback_chain",
    "circuit_breaker",
    "retry",
    "retry_budget",
    "usage_accounting",
    "output_guardrails",
    "hooks",
]


def start_server() -> tuple[subprocess.Popen[str], str]:
    """Start FakeProvider in its own process; return it and its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "llmguard_sdk.testing", "serve", "--ignore-stdin"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    base_url = process.stdout.readline().strip()
    if not base_url.startswith("http://127.0.0.1:"):
        process.kill()
        raise SystemExit(f"fake provider did not start: {base_url!r}")
    return process, base_url


def measure(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """Mean CPU and wall microseconds per call over ``calls`` calls."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        call()
    cpu1, wall1 = time.process_time(), time.perf_counter()
    return (cpu1 - cpu0) / calls * 1e6, (wall1 - wall0) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=300, help="calls per round (300)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per side (7)")
    args = parser.parse_args()

    process, base_url = start_server()
    try:
        bare_provider = OpenAICompatibleProvider(base_url, model="fake-model", name="bare")
        guard_provider = OpenAICompatibleProvider(base_url, model="fake-model", name="fake")
        events: list[object] = []
        guard = Guard(
            guard_provider,
            max_input_tokens=4000,
            input_filters=[lambda request: None],
            output_filters=[lambda response: None],
            hooks=[events.append],
            environ={},
        )
        request = ChatRequest.model_validate({"messages": MESSAGES, "max_tokens": 64})

        def bare() -> object:
            return bare_provider.complete(
                request, model="fake-model", deadline=time.monotonic() + 60
            )

        def guarded() -> object:
            events.clear()
            return guard.chat(MESSAGES, max_tokens=64, tenant="acme", feature="support")

        for call in (bare, guarded):  # warm up connections, encodings, code paths
            measure(call, 50)
        bare_cpu, bare_wall, guard_cpu, guard_wall = [], [], [], []
        for _ in range(args.rounds):
            cpu, wall = measure(bare, args.calls)
            bare_cpu.append(cpu)
            bare_wall.append(wall)
            cpu, wall = measure(guarded, args.calls)
            guard_cpu.append(cpu)
            guard_wall.append(wall)
        guard.close()
        bare_provider.close()
    finally:
        process.terminate()
        process.wait(timeout=10)

    bare_us = statistics.median(bare_cpu)
    guard_us = statistics.median(guard_cpu)
    result = {
        "benchmark": "overhead",
        "what": "client CPU time per non-streaming call, provider in another process",
        "calls_per_side": args.calls * args.rounds,
        "bare_us": round(bare_us, 1),
        "guard_us": round(guard_us, 1),
        "overhead_us": round(guard_us - bare_us, 1),
        "ratio": round(guard_us / bare_us, 3),
        "bare_wall_us": round(statistics.median(bare_wall), 1),
        "guard_wall_us": round(statistics.median(guard_wall), 1),
        "overhead_wall_us": round(statistics.median(guard_wall) - statistics.median(bare_wall), 1),
        "stages": STAGES,
        "state": "memory",
        "target_overhead_us": 100,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>20}: {value}")


if __name__ == "__main__":
    main()
