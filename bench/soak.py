"""Cost as work grows: 100,000 guarded calls from 100,000 tenants, every stage on in memory.

One process and one Guard with every stage it has, state in memory: a per-tenant rate limit
beside the route's, a per-tenant spend budget beside a global one, the response cache (at most
``--cache-entries`` answers), retries, breakers, and telemetry recorded by the real
OpenTelemetry SDK (exported to memory and dropped). A FakeProvider answers in its own process,
so its CPU time is not counted. Every call comes from a new tenant with a new question: an
exact miss, a semantic search, a store, and fresh per-tenant state in every stage.

Nothing on the per-call path may scan state that grows with calls or tenants, and per-tenant
state must be forgotten once idle, so the last calls should cost what the first did and the
process should grow by about what the cache holds, not by what it has seen:

* ``ms_per_call_first_10k`` / ``ms_per_call_last_10k``: wall milliseconds per call over the
  first and the last tenth of the calls (10,000 of 100,000; ``window_calls`` says how many),
  and ``last_over_first`` (target: at most 1.2). ``ms_per_call_windows``: every tenth.
  ``cpu_ms_per_call_windows`` / ``cpu_last_over_first``: this process's CPU time per call
  (``time.process_time``), which other jobs on a shared machine disturb less than wall time.
* ``py_ops_per_call_first`` / ``py_ops_per_call_last`` / ``py_ops_last_over_first``: Python
  bytecodes executed per call (``sys.settrace`` opcode events) over 200 calls from new tenants
  just before the first window and just after the last one, outside the timed windows: the
  work per call, counted, which no other job on the machine changes (C work such as numpy's or
  tiktoken's is not counted; the cache bounds what numpy searches).
* ``interleaved``: the first tenth against the last measured side by side, so that a machine
  whose speed drifts over the run (a shared virtual machine: windows of the same work differ
  by 20 % and more) does not decide the ratio. After the windows, a fresh every-stage Guard in a
  child process makes the first tenth's calls (tenants 0 to 9,999, as the first window did)
  while this process's Guard, which has served every tenant, makes as many calls from new
  tenants; the two take turns in ``rounds`` rounds (neither runs while the other does).
  ``first_ms_per_call`` / ``last_ms_per_call`` (wall, all rounds), ``last_over_first`` and each
  side's rounds.
* ``rss_start_mb`` (after the Guard's first calls), ``rss_end_mb``, ``rss_growth_mb`` and
  ``rss_growth_after_first_window_mb`` (the cache is full by then when the calls are more than
  ten times ``cache_entries``): resident memory of this process, from ``/proc/self/statm``.
  The side by side here is the run with itself: first tenth against last tenth.
* ``cache_only_rss_growth_mb`` / ``cache_only_rss_growth_after_first_window_mb``: the same
  calls through a Guard with the response cache alone (same ``--cache-entries``, telemetry
  off), run in a process of its own afterwards, so "bounded by the cache's configured size"
  is judged in one run; ``rss_growth_beyond_cache_mb`` is ``rss_growth_mb`` less the
  cache-only growth (what every other stage keeps: a day's spend per tenant in the budget,
  capped tables, the allocator's slack); ``cache_only_ms_per_call_first_10k`` /
  ``cache_only_ms_per_call_last_10k`` / ``cache_only_cpu_last_over_first``: that side's
  first and last tenths. ``--no-baseline`` skips it; ``--cache-only`` runs that side alone.

Usage: python bench/soak.py [--json] [--calls N] [--cache-entries N] [--quick]
       [--cache-only | --no-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _benchkit import exit_on_signals, popen_group, print_result, stop_group
from overhead import _recording_telemetry, start_server

from llmguard_sdk import Guard, OpenAICompatibleProvider, ResponseCache
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.ratelimit import RateLimit

WINDOWS = 10
INTERLEAVED_ROUNDS = 10
_REPLY_TIMEOUT_S = 600.0  # a round of the fresh Guard's calls: far longer than it takes
_OFFSET = 10_000_000  # call numbers up to 89,999,999 keep eight digits


def rss_mb() -> float:
    """Resident memory of this process now, in MB (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def every_stage_guard(base_url: str, cache_entries: int) -> Guard:
    """A Guard with every stage on, state in memory, sized for one call per tenant."""
    prices = PriceTable.default_table().with_prices({"fake-model": Price(input=0.1, output=0.4)})
    return Guard(
        OpenAICompatibleProvider(base_url, model="fake-model", name="fake"),
        telemetry=_recording_telemetry(),
        rate_limits={
            "fake": [
                RateLimit(rpm=100_000_000, tpm=10_000_000_000),
                RateLimit(rpm=60, tpm=100_000, per_tenant=True),
            ]
        },
        budgets=Budgets(
            [Budget(limit_usd=1e6, scope="global"), Budget(limit_usd=1.0, scope="tenant")],
            prices=prices,
        ),
        cache=ResponseCache(max_entries=cache_entries),
        max_input_tokens=4000,
        environ={},
    )


def cache_only_guard(base_url: str, cache_entries: int) -> Guard:
    """The baseline: the same provider and cache bound, no other stage keeping state."""
    return Guard(
        OpenAICompatibleProvider(base_url, model="fake-model", name="fake"),
        telemetry=False,
        cache=ResponseCache(max_entries=cache_entries),
        max_input_tokens=4000,
        environ={},
    )


def cache_only_baseline(calls: int, cache_entries: int) -> dict[str, Any]:
    """The cache-only side, run by this script in a fresh process (memory freed by the
    every-stage Guard would otherwise be reused and hide the cache's own growth)."""
    args = ["--json", "--cache-only", "--calls", str(calls), "--cache-entries", str(cache_entries)]
    process = popen_group([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    try:
        out, _ = process.communicate()
    finally:
        stop_group(process)
    if process.returncode:
        raise SystemExit(f"the cache-only run failed (exit status {process.returncode})")
    found: dict[str, Any] = json.loads(out)
    return found


def call_number(guard: Guard) -> Callable[[int], object]:
    """Call ``n``: tenant ``n`` asks question ``n`` (new to the cache). Numbers are offset
    so that every measured call's question and tenant id have as many digits as any other's:
    each window does the same work (with ``order {n}`` the first calls' questions were
    shorter, which made the first window cheaper)."""

    def call(n: int) -> object:
        number = _OFFSET + n
        question = (
            f"Where is parcel {number * 7919 % 1_000_003:07d} of order {number}, "
            f"sent to depot {number % 97:02d}?"
        )
        return guard.chat(
            [{"role": "user", "content": question}], tenant=f"tenant-{number}", max_tokens=16
        )

    return call


def python_ops_per_call(call: Callable[[int], object], numbers: range) -> float:
    """Python bytecodes executed per call over the calls ``numbers`` (counted, not timed)."""
    executed = 0

    def tracer(frame: Any, event: str, arg: object) -> Any:
        nonlocal executed
        frame.f_trace_opcodes = True
        if event == "opcode":
            executed += 1
        return tracer

    sys.settrace(tracer)
    try:
        for n in numbers:
            call(n)
    finally:
        sys.settrace(None)
    return executed / len(numbers)


def soak(call: Callable[[int], object], calls: int) -> dict[str, Any]:
    """Run ``calls`` calls in ten windows: wall ms per call of each, memory, and the Python
    work per call counted before the first window and after the last."""
    window = calls // WINDOWS
    for n in range(200):  # warm up: imports, connections, the token counter
        call(-1 - n)
    ops_first = python_ops_per_call(call, range(-400, -200))
    rss_start = rss_mb()
    per_window: list[float] = []
    cpu_window: list[float] = []
    rss_after_first = rss_start
    for w in range(WINDOWS):
        start, cpu = time.perf_counter(), time.process_time()
        for n in range(w * window, (w + 1) * window):
            call(n)
        per_window.append((time.perf_counter() - start) / window * 1e3)
        cpu_window.append((time.process_time() - cpu) / window * 1e3)
        if w == 0:
            rss_after_first = rss_mb()
    rss_end = rss_mb()
    ops_last = python_ops_per_call(call, range(calls, calls + 200))
    return {
        "window_calls": window,
        "ms_per_call_first_10k": round(per_window[0], 3),
        "ms_per_call_last_10k": round(per_window[-1], 3),
        "last_over_first": round(per_window[-1] / per_window[0], 3),
        "ms_per_call_windows": [round(ms, 3) for ms in per_window],
        "cpu_ms_per_call_windows": [round(ms, 3) for ms in cpu_window],
        "cpu_last_over_first": round(cpu_window[-1] / cpu_window[0], 3),
        "py_ops_per_call_first": round(ops_first),
        "py_ops_per_call_last": round(ops_last),
        "py_ops_last_over_first": round(ops_last / ops_first, 3),
        "rss_start_mb": round(rss_start, 1),
        "rss_end_mb": round(rss_end, 1),
        "rss_growth_mb": round(rss_end - rss_start, 1),
        "rss_growth_after_first_window_mb": round(rss_end - rss_after_first, 1),
    }


def timed_calls(call: Callable[[int], object], numbers: range) -> float:
    """Wall milliseconds per call over the calls ``numbers``."""
    start = time.perf_counter()
    for n in numbers:
        call(n)
    return (time.perf_counter() - start) / len(numbers) * 1e3


def fresh_side(base_url: str, cache_entries: int) -> None:
    """``--fresh-child``: a new every-stage Guard, warmed up, that makes the calls its parent
    asks for, a line ``START COUNT`` at a time, answering each with the wall ms per call."""
    with every_stage_guard(base_url, cache_entries) as guard:
        call = call_number(guard)
        for n in range(200):
            call(-1 - n)
        print("ready", flush=True)
        for line in sys.stdin:
            start, count = (int(word) for word in line.split())
            print(timed_calls(call, range(start, start + count)), flush=True)


def _reply(child: subprocess.Popen[str]) -> str:
    """The child's next line (bounded wait)."""
    assert child.stdout is not None
    readable, _, _ = select.select([child.stdout], [], [], _REPLY_TIMEOUT_S)
    line = child.stdout.readline() if readable else ""
    if not line:
        raise SystemExit("the fresh Guard's process did not answer")
    return line


def interleaved(
    call: Callable[[int], object], calls: int, base_url: str, cache_entries: int
) -> dict[str, Any]:
    """The first tenth's calls on a fresh Guard (a child process) and as many new tenants'
    calls on this process's aged Guard, taking turns round by round."""
    window = calls // WINDOWS
    per_round = max(1, window // INTERLEAVED_ROUNDS)
    args = ["--fresh-child", base_url, "--cache-entries", str(cache_entries)]
    child = popen_group(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    first: list[float] = []
    last: list[float] = []
    try:
        assert child.stdin is not None
        if _reply(child).strip() != "ready":
            raise SystemExit("the fresh Guard's process did not start")
        for r in range(INTERLEAVED_ROUNDS):
            for side in ("first", "last") if r % 2 == 0 else ("last", "first"):
                if side == "first":
                    child.stdin.write(f"{r * per_round} {per_round}\n")
                    child.stdin.flush()
                    first.append(float(_reply(child)))
                else:  # tenants no earlier call used (the windows, the counted calls)
                    start = calls + 200 + r * per_round
                    last.append(timed_calls(call, range(start, start + per_round)))
    finally:
        stop_group(child)
    first_ms, last_ms = sum(first) / len(first), sum(last) / len(last)
    return {
        "rounds": INTERLEAVED_ROUNDS,
        "calls_per_round": per_round,
        "first_ms_per_call": round(first_ms, 3),
        "last_ms_per_call": round(last_ms, 3),
        "last_over_first": round(last_ms / first_ms, 3),
        "first_round_ms": [round(ms, 3) for ms in first],
        "last_round_ms": [round(ms, 3) for ms in last],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=100_000, help="calls, one tenant each")
    parser.add_argument("--cache-entries", type=int, default=10_000, help="the cache's bound")
    parser.add_argument("--quick", action="store_true", help="5,000 calls, 500 cached")
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--cache-only", action="store_true", help="the cache-only Guard alone")
    side.add_argument("--no-baseline", action="store_true", help="skip the cache-only run")
    side.add_argument("--fresh-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.calls, args.cache_entries = 5_000, 500
    exit_on_signals()
    if args.fresh_child:
        fresh_side(args.fresh_child, args.cache_entries)
        return
    make = cache_only_guard if args.cache_only else every_stage_guard
    process, base_url = start_server()
    try:
        with make(base_url, args.cache_entries) as guard:
            result = {"calls": args.calls, "cache_entries": args.cache_entries}
            call = call_number(guard)
            result |= soak(call, args.calls)
            if not args.cache_only:
                result["interleaved"] = interleaved(call, args.calls, base_url, args.cache_entries)
    finally:
        stop_group(process)
    if not (args.cache_only or args.no_baseline):
        baseline = cache_only_baseline(args.calls, args.cache_entries)
        result["cache_only_rss_growth_mb"] = baseline["rss_growth_mb"]
        result["cache_only_rss_growth_after_first_window_mb"] = baseline[
            "rss_growth_after_first_window_mb"
        ]
        result["cache_only_ms_per_call_first_10k"] = baseline["ms_per_call_first_10k"]
        result["cache_only_ms_per_call_last_10k"] = baseline["ms_per_call_last_10k"]
        result["cache_only_cpu_last_over_first"] = baseline["cpu_last_over_first"]
        result["rss_growth_beyond_cache_mb"] = round(
            result["rss_growth_mb"] - baseline["rss_growth_mb"], 1
        )
    print_result(result, args.json)


if __name__ == "__main__":
    main()
