"""From what the outage drill recorded to its :class:`DrillReport`."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..breaker import BreakerPolicy, BreakerTransition
from ..context import CallEvent
from ..errors import CircuitOpenError
from ._drill_report import P99_MIN_SAMPLES, DrillReport
from ._drill_run import (
    ATTEMPT_TIMEOUT,
    BACKUP_LATENCY,
    CALL_TIMEOUT,
    MAX_TOKENS,
    PHASES,
    RETRY,
    ROUTE_ORDER,
    _Call,
    _Run,
)

# a CallEvent's route_errors name each error as its span's error.type does
_CIRCUIT_OPEN = f"{CircuitOpenError.__module__}.{CircuitOpenError.__qualname__}"


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100), rounded to 0.1; a p99 only from
    :data:`P99_MIN_SAMPLES` values (with fewer it would be one of the slowest few calls)."""
    if not values or (q == 99 and len(values) < P99_MIN_SAMPLES):
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)], 1)


@dataclass(frozen=True)
class _Timeline:
    """When the drill's phases began and the primary's breaker first opened (monotonic)."""

    t0: float
    starts: dict[str, float]
    end: float
    first_open: float | None

    @property
    def returned(self) -> float:
        """When the primary came back."""
        return self.starts["after"]

    def in_outage(self, t: float) -> bool:
        """From the breaker's first opening until the primary's return."""
        return self.first_open is not None and self.first_open <= t < self.returned

    def phase_of(self, t: float) -> str:
        name = PHASES[0]
        for candidate in PHASES:
            if t >= self.starts[candidate]:
                name = candidate
        return name

    def window_of(self, call: _Call) -> str:
        if call.start < self.starts["refused"]:
            return "before"
        if call.start >= self.returned:
            return "after"
        return "during" if self.in_outage(call.start) else "onset"

    def phases(self, switching: dict[str, float]) -> list[dict[str, Any]]:
        bounds = [self.starts[name] for name in PHASES] + [self.end]
        return [
            {
                "name": name,
                "start": round(bounds[i] - self.t0, 3),
                "end": round(bounds[i + 1] - self.t0, 3),
                "switch_s": round(switching.get(name, 0.0), 3),
            }
            for i, name in enumerate(PHASES)
        ]


def _timeline(run: _Run, mine: list[tuple[float, BreakerTransition]]) -> _Timeline:
    starts = {name: run.marks[name] for name in PHASES}
    first_open = next((t for t, tr in mine if tr.after == "open" and t >= starts["refused"]), None)
    end = max([run.t0 + run.total, *(c.end for c in run.calls)])
    return _Timeline(run.t0, starts, end, first_open)


@dataclass
class _Tally:
    """The calls counted by latency window, served route, phase and error."""

    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {w: [] for w in ("before", "onset", "during", "after")}
    )
    served_by: Counter[str] = field(default_factory=Counter)
    served_by_phase: dict[str, Counter[str]] = field(
        default_factory=lambda: {name: Counter() for name in PHASES}
    )
    failures: Counter[str] = field(default_factory=Counter)
    fallback: list[float] = field(default_factory=list)


def _tally(calls: list[_Call], timeline: _Timeline) -> _Tally:
    tally = _Tally()
    for call in calls:
        ms = (call.end - call.start) * 1000
        window = timeline.window_of(call)
        tally.latencies[window].append(ms)
        tally.served_by[call.route] += 1
        tally.served_by_phase[timeline.phase_of(call.start)][call.route] += 1
        if call.error is not None:
            tally.failures[call.error] += 1
        if window == "during" and call.route == "backup" and _primary_skipped(call.event):
            tally.fallback.append(ms)
    return tally


def _dead_calls(run: _Run, received: list[float], timeline: _Timeline) -> dict[str, int]:
    """The attempts on the primary while it was down, refused or received (see the report)."""
    in_outage = [a for a in run.tap.attempts if timeline.in_outage(a.start)]
    dead = [a for a in in_outage if not a.background]
    background = [a for a in in_outage if a.background]
    refused = sum(1 for a in dead if a.error is not None and not a.sent)
    reached = sum(1 for t in received if timeline.in_outage(t))  # background probes' too
    reached -= min(reached, sum(1 for a in background if a.sent))
    first_open = timeline.first_open
    return {
        "attempts": len(dead),
        "refused_connections": refused,
        "reached_server": reached,
        "other": len(dead) - refused - reached,
        "background_probes": len(background),
        "before_open": sum(
            1
            for a in run.tap.attempts
            if timeline.starts["refused"] <= a.start
            and (first_open is None or a.start < first_open)
        ),
    }


def _probes(
    mine: list[tuple[float, BreakerTransition]], timeline: _Timeline
) -> tuple[list[dict[str, Any]], list[float]]:
    """Each half-open probe of the primary and its outcome; the probes' times in the outage."""
    half_opens = [t for t, tr in mine if tr.after == "half_open"]
    probes = []
    for t in half_opens:
        following = next(((u, tr) for u, tr in mine if u > t), None)
        outcome = "pending" if following is None else following[1].after
        probes.append(
            {
                "t": round(t - timeline.t0, 3),
                "outcome": {"open": "failed", "closed": "succeeded"}.get(outcome, outcome),
                "seconds": None if following is None else round(following[0] - t, 3),
                "during_outage": timeline.in_outage(t),
            }
        )
    return probes, [t for t in half_opens if timeline.in_outage(t)]


def _observed_open(mine: list[tuple[float, BreakerTransition]]) -> list[float]:
    """How long each opening of the primary's breaker lasted until its half-open probe."""
    observed = []
    for t, tr in mine:
        if tr.after == "open":
            nxt = next((u for u, later in mine if u > t and later.after == "half_open"), None)
            if nxt is not None:
                observed.append(round(nxt - t, 3))
    return observed


def _recovery(
    mine: list[tuple[float, BreakerTransition]], returned: float, calls: list[_Call]
) -> float | None:
    """From the primary's return until its breaker closed, if the primary served afterwards."""
    state_at_return = next((tr.after for t, tr in reversed(mine) if t < returned), "closed")
    closed_at: float | None = returned if state_at_return == "closed" else None
    if closed_at is None:
        closed_at = next((t for t, tr in mine if t >= returned and tr.after == "closed"), None)
    if closed_at is not None and any(c.start >= closed_at and c.route == "primary" for c in calls):
        return round(closed_at - returned, 3)
    return None


def _returned_after(calls: list[_Call], returned: float, window: int = 20) -> float | None:
    """Seconds from the primary's return until the primary serves 90 % of calls again: the
    start of the first run of ``window`` calls (started after the return) of which at least
    90 % the primary served; None if none."""
    after = sorted((c for c in calls if c.start >= returned), key=lambda c: c.start)
    served = [c.route == "primary" for c in after]
    for index in range(len(after) - window + 1):
        if sum(served[index : index + window]) >= 0.9 * window:
            return round(after[index].start - returned, 3)
    return None


def _config(rate: float, breaker: BreakerPolicy) -> dict[str, Any]:
    return {
        "rate_per_s": rate,
        "timeout_s": CALL_TIMEOUT,
        "attempt_timeout_s": ATTEMPT_TIMEOUT,
        "retry": {"attempts": RETRY.attempts, "base": RETRY.base, "cap": RETRY.cap},
        "breaker": {
            "window": breaker.window,
            "minimum_calls": breaker.minimum_calls,
            "failure_rate": breaker.failure_rate,
            "open_seconds": breaker.open_seconds,
            "backoff_factor": breaker.backoff_factor,
            "max_open_seconds": breaker.max_open_seconds,
            "half_open_permits": breaker.half_open_permits,
            "probe_every": breaker.probe_every,
        },
        "backup_latency_s": BACKUP_LATENCY,
        "max_tokens": MAX_TOKENS,
    }


def _analyse(
    run: _Run,
    transitions: list[tuple[float, BreakerTransition]],
    received: list[float],
    routes: list[str],
    local_note: str,
) -> DrillReport:
    t0 = run.t0
    mine = [(t, tr) for t, tr in transitions if tr.route == "primary"]
    timeline = _timeline(run, mine)
    tally = _tally(run.calls, timeline)
    latencies = tally.latencies
    dead_calls = _dead_calls(run, received, timeline)
    probes, outage_probes = _probes(mine, timeline)
    gaps = [b - a for a, b in itertools.pairwise(outage_probes)]
    first_open = timeline.first_open
    return DrillReport(
        requests=len(run.calls),
        answered=sum(1 for c in run.calls if c.error is None),
        rate_per_s=run.rate,
        routes=routes,
        local_model="local" in routes,
        local_note=local_note,
        phases=timeline.phases(run.switching),
        first_open_s=None if first_open is None else round(first_open - t0, 3),
        returned_s=round(timeline.returned - t0, 3),
        p50_ms={w: _percentile(latencies[w], 50) for w in ("before", "during", "after")},
        p99_ms={w: _percentile(latencies[w], 99) for w in ("before", "during", "after")},
        max_ms={w: _percentile(latencies[w], 100) for w in ("before", "during", "after")},
        onset_p99_ms=_percentile(latencies["onset"], 99),
        window_requests={w: len(v) for w, v in latencies.items()},
        fallback_p99_ms=_percentile(tally.fallback, 99),
        fallback_max_ms=_percentile(tally.fallback, 100),
        fallback_samples=len(tally.fallback),
        calls_to_dead_after_open=dead_calls["attempts"],
        dead_calls=dead_calls,
        half_open_probes=len(outage_probes),
        probes=probes,
        probe_interval_s=round(statistics.median(gaps), 3) if gaps else None,
        open_duration_s=run.breaker.open_seconds,
        max_open_duration_s=run.breaker.max_open_seconds,
        observed_open_s=_observed_open(mine),
        recovery_s=_recovery(mine, timeline.returned, run.calls),
        return_s=_returned_after(run.calls, timeline.returned),
        served_by=_ordered(tally.served_by),
        served_by_phase={name: _ordered(c) for name, c in tally.served_by_phase.items()},
        failures=dict(tally.failures),
        breaker_transitions=[
            {"t": round(t - t0, 3), "route": tr.route, "before": tr.before, "after": tr.after}
            for t, tr in transitions
        ],
        config=_config(run.rate, run.breaker),
        _calls=[(c.start - t0, c.route) for c in run.calls],
        _duration=timeline.end - t0,
    )


def _primary_skipped(event: CallEvent | None) -> bool:
    """The call never attempted the primary: its breaker refused it, and no retry on it."""
    if event is None:
        return False
    errors = dict(event.route_errors)
    return errors.get("primary") == _CIRCUIT_OPEN and not any(
        r.name == "primary" for r in event.retries
    )


def _ordered(counts: Counter[str]) -> dict[str, int]:
    known = [r for r in ROUTE_ORDER if counts.get(r)]
    return {r: counts[r] for r in known + sorted(set(counts) - set(ROUTE_ORDER))}
