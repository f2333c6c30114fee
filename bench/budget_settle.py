"""Settle cost of the in-memory budget as the settled reservation ids pile up: the
deadline heap against the old scan of every id settled in the last day.

What is measured
----------------
One :class:`~llmguard_sdk.budget.MemoryBudgetBackend` with a simulated clock (one call per
simulated second, so every settled id is still remembered: its ``ttl`` is a day, as the
Guard's) takes ``calls`` reserve+settle pairs on one tenant counter. The ``heap`` side is the
backend as shipped (it keeps no settled id at all, only the reserved, unsettled ones);
the ``scan`` side is the same backend with the settle of 0.2.0, which
walked the whole dict of remembered ids on each settle to drop expired ones (a subclass here,
measured in the same run). Reported per side, for the last ``window`` calls of each size:
``us_per_call`` (reserve + settle, wall time), and ``memory_kib`` (tracemalloc's peak over a
second run to the largest size, the remembered ids included). ``ratio_at_largest`` is
scan / heap at the largest size; the claim (``heap_flat``): the heap's cost at the largest
size is within 3x of the smallest, while the scan's grows with the ids remembered.

Usage: python bench/budget_settle.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

from llmguard_sdk.budget import MemoryBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, SettleResult, drop_hold, nano


class _Scanning(MemoryBudgetBackend):
    """The 0.2.0 settle: every remembered id looked at on every settle."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._seen: dict[str, float] = {}

    def settle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        with self._lock:
            now = self._clock()
            for done in [d for d, until in self._seen.items() if until <= now]:
                del self._seen[done]
            if rid in self._seen:
                return SettleResult(False)
            self._seen[rid] = now + ttl
            self._open.forget(rid)
            for spec in specs:
                state = self._state(spec, now)
                drop_hold(state, rid)
                state.spent += actual
            return SettleResult(True)


def _calls(kind: type[MemoryBudgetBackend], sizes: list[int], window: int) -> dict[str, float]:
    """Seconds taken by the last ``window`` calls before each size."""
    clock = [1_800_000_000.0]
    backend = kind(clock=lambda: clock[0])
    counter = [CounterSpec("tenant", nano(1e6), "month", 3600.0, (), "tenant:t", 0)]
    timings: dict[str, float] = {}
    done = 0
    for size in sizes:
        while done < size:
            started = time.perf_counter() if done >= size - window else None
            rid = f"r{done}"
            backend.reserve(rid, counter, base=1000, per_token=0.0, want=0, minimum=0, ttl=60)
            backend.settle(rid, counter, actual=900, ttl=86400.0)
            if started is not None:
                timings[str(size)] = timings.get(str(size), 0.0) + time.perf_counter() - started
            clock[0] += 1.0
            done += 1
    return timings


def _run(kind: type[MemoryBudgetBackend], sizes: list[int], window: int) -> dict[str, Any]:
    """Timings in one pass; the memory peak in a second one under tracemalloc (which slows
    every allocation, so it is kept out of the timings)."""
    timings = _calls(kind, sizes, window)
    tracemalloc.start()
    _calls(kind, sizes[-1:], 1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "us_per_call": {k: round(v / window * 1e6, 2) for k, v in timings.items()},
        "memory_kib": round(peak / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    sizes = [1_000, 3_000, 8_000] if args.quick else [1_000, 5_000, 20_000]
    window = 500
    heap = _run(MemoryBudgetBackend, sizes, window)
    scan = _run(_Scanning, sizes, window)
    small, large = str(sizes[0]), str(sizes[-1])
    result = {
        "bench": "budget_settle",
        "sizes": sizes,
        "window": window,
        "heap": heap,
        "scan": scan,
        "ratio_at_largest": round(scan["us_per_call"][large] / heap["us_per_call"][large], 1),
        "heap_flat": heap["us_per_call"][large] <= 3 * heap["us_per_call"][small],
    }
    if args.json:
        print(json.dumps(result))
        return
    for side in ("heap", "scan"):
        row = result[side]
        cells = "  ".join(f"{n}: {row['us_per_call'][str(n)]:>9} us" for n in sizes)
        print(f"{side:<5} {cells}  peak {row['memory_kib']} KiB")
    print(f"scan / heap at {large} ids: {result['ratio_at_largest']}x")


if __name__ == "__main__":
    main()
