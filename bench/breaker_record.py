"""Cost of recording one outcome in the in-memory circuit breaker: the bounded window
(running counts, a ring of 2-bit codes or time buckets) against the list of every
``(time, outcome)`` pair of the window that it replaces, in the same run.

What is measured
----------------
:meth:`~llmguard_sdk.breaker.MemoryBreakerBackend.record` on one route, ``calls`` times, with
a simulated clock (``rate`` calls per simulated second) and an outcome mix that never trips
the breaker (every 10th call fails, every 7th is slow). The ``bounded`` side is the backend
as shipped; the ``listed`` side is the same backend with the record of 0.1.0 (a subclass
here), which rebuilt the tuple of the window's pairs and counted failures and slow calls
with two scans of it on every record. Two workloads:

* ``count``: the default policy (the last 20 calls);
* ``time``: ``window_type="time"``, a ``window``-second window at ``rate`` calls per second,
  so the listed window holds ``window * rate`` pairs once warm.

Reported per workload and side: ``us_per_record`` (the best of ``rounds`` interleaved
rounds, wall time: noisy on a shared machine, compare the sides of one run), and
``state_items`` (the window's length after the run: pairs for ``listed``, ints for
``bounded``). ``load_avg`` is the 1-minute load average at the start.

Usage: python bench/breaker_record.py [--json] [--quick]
       python bench/breaker_record.py --side bounded|listed [--workload count|time] --calls N
       (one side, once, for instruction counts: ``valgrind --tool=callgrind``, the difference
       between two ``--calls`` divided by the difference in calls)
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from _benchkit import print_result

from llmguard_sdk.breaker import BreakerPolicy, MemoryBreakerBackend
from llmguard_sdk.breaker.policy import Outcome, State


@dataclass(frozen=True)
class _ListedState:
    """The 0.1.0 breaker state: every ``(time, outcome)`` pair of the window."""

    state: State = "closed"
    outcomes: tuple[tuple[float, Outcome], ...] = ()
    open_until: float = 0.0
    trips: int = 0
    permits: int = 0
    probes_ok: int = 0
    half_open_at: float = 0.0


def _listed_record(
    state: _ListedState, now: float, policy: BreakerPolicy, outcome: Outcome
) -> _ListedState:
    """The 0.1.0 record, less its half-open and 429 paths' work (nothing here trips)."""
    if state.state in ("open", "isolated"):
        return state
    if outcome == "rate_limited":
        raise NotImplementedError
    failed = outcome in ("fail", "rate_limited")
    if state.state == "half_open":
        raise NotImplementedError(failed)
    outcomes = (*state.outcomes, (now, outcome))
    if policy.window_type == "count":
        outcomes = outcomes[-int(policy.window) :]
    else:
        outcomes = tuple(item for item in outcomes if item[0] > now - policy.window)
    state = replace(state, outcomes=outcomes)
    if len(outcomes) < policy.minimum_calls:
        return state
    failures = sum(1 for _, o in outcomes if o in ("fail", "rate_limited"))
    slow = sum(1 for _, o in outcomes if o == "slow")
    if failures / len(outcomes) >= policy.failure_rate or slow / len(outcomes) >= (
        policy.slow_call_rate
    ):
        return replace(state, state="open", outcomes=())
    return state


class _Listed(MemoryBreakerBackend):
    """The memory backend with the 0.1.0 record."""

    def __init__(self, policy: BreakerPolicy, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self._listed: dict[str, _ListedState] = {}

    def record(self, route: str, outcome: Outcome, hint: float | None = None) -> State:
        with self._lock:
            state = self._listed.get(route, _ListedState())
            state = _listed_record(state, self._clock(), self.policy, outcome)
            self._listed[route] = state
            return state.state

    def items(self, route: str) -> int:
        return len(self._listed[route].outcomes)


def _outcomes(calls: int) -> list[Outcome]:
    return ["fail" if i % 10 == 9 else "slow" if i % 7 == 6 else "ok" for i in range(calls)]


def _run(side: str, policy: BreakerPolicy, calls: int, rate: float) -> tuple[float, int]:
    """Seconds for ``calls`` records on one route, and the window's length afterwards."""
    clock = [1_800_000_000.0]
    kind = _Listed if side == "listed" else MemoryBreakerBackend
    backend = kind(policy, clock=lambda: clock[0])
    outcomes, step = _outcomes(calls), 1.0 / rate
    record = backend.record
    started = time.perf_counter()
    for outcome in outcomes:
        clock[0] += step
        record("r", outcome)
    seconds = time.perf_counter() - started
    assert backend.state("r") == "closed"
    if isinstance(backend, _Listed):
        return seconds, backend.items("r")
    return seconds, len(backend._states["r"].window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="10,000 records, 2 rounds")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0, help="calls per simulated second")
    parser.add_argument("--window", type=float, default=10.0, help="time window, seconds")
    parser.add_argument("--side", choices=["bounded", "listed"], help="run one side once")
    parser.add_argument("--workload", choices=["count", "time"], help="with --side: only this")
    args = parser.parse_args()
    calls, rounds = (10_000, 2) if args.quick else (args.calls, args.rounds)
    workloads = {
        "count": BreakerPolicy(slow_call_rate=0.5, slow_call_seconds=1.0),
        "time": BreakerPolicy(
            window_type="time", window=args.window, slow_call_rate=0.5, slow_call_seconds=1.0
        ),
    }
    if args.side:
        for name, policy in workloads.items():
            if args.workload in (None, name):
                _run(args.side, policy, calls, args.rate)
        return
    result: dict[str, Any] = {"calls": calls, "rounds": rounds, "rate": args.rate}
    result["load_avg"] = round(os.getloadavg()[0], 2)
    for name, policy in workloads.items():
        best = {"bounded": float("inf"), "listed": float("inf")}
        items = {}
        for _ in range(rounds):
            for side in best:
                seconds, items[side] = _run(side, policy, calls, args.rate)
                best[side] = min(best[side], seconds)
        result[name] = {
            side: {"us_per_record": round(best[side] / calls * 1e6, 3), "state_items": items[side]}
            for side in best
        }
        result[name]["ratio"] = round(best["listed"] / best["bounded"], 2)
    print_result(result, args.json)


if __name__ == "__main__":
    main()
