"""An outage drill: steady traffic through a Guard while its primary route dies and comes back.

:func:`run_drill` starts two local :class:`~llmguard_sdk.testing.FakeProvider` servers
(``primary`` and ``backup``) and, when it is installed, the bundled local model
(:class:`~llmguard_sdk.LocalProvider`) as the last route. It sends chat calls at a fixed rate
(each one its own task, launched on schedule, so slow calls never slow the rate) and takes the
primary down in three ways, one after the other, before bringing it back:

1. ``refused``: the primary's server is stopped; connections are refused.
2. ``503``: it is started again, but every call gets a 503.
3. ``hang``: every call is read and never answered.
4. ``after``: it answers normally again (the primary's *return*).

The :class:`DrillReport` says how the traffic fared (answered share, latency before, during
and after the outage), how the primary's circuit breaker behaved (when it opened, its
half-open probes, how many calls still reached the dead primary, how long recovery took), and
whether the targets of an outage hold.

How it is measured:

* Every call's start and end come from :func:`time.monotonic`; its latency is the difference,
  its served route is ``response.route`` (``"failed"`` when the Guard raised).
* Breaker transitions come from ``breaker_hooks``, stamped with :func:`time.monotonic`.
* Attempts on the primary are logged by a thin pass-through around its provider (the Guard is
  unchanged; the wrapper only notes each attempt's start, end and error). That is the only
  exact count: refused connections never reach the server, and a call's
  :class:`~llmguard_sdk.CallEvent` keeps only the *last* error per route and counts retries
  that a breaker may refuse before they are sent. The primary server's own request log
  (:attr:`~llmguard_sdk.testing.FakeProvider.requests`) cross-checks the attempts that did
  reach it (503 and hang phases).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import contextvars
import itertools
import math
import statistics
import struct
import time
import zlib
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from .breaker import BreakerPolicy, BreakerTransition
from .context import CallEvent
from .errors import ConfigurationError
from .guard import Guard
from .models import ChatRequest, ChatResponse, StreamChunk
from .providers.base import Provider
from .providers.openai_compat import OpenAICompatibleProvider
from .retry import RetryPolicy
from .testing import FakeProvider, Fault

__all__ = ["DrillReport", "run_drill"]

OPEN_SECONDS = 1.0
MAX_OPEN_SECONDS = 2.0
ATTEMPT_TIMEOUT = 0.4
CALL_TIMEOUT = 5.0
BACKUP_LATENCY = 0.01
MAX_TOKENS = 16
RETRY = RetryPolicy(attempts=2, base=0.02, cap=0.5)
BREAKER = BreakerPolicy(
    window=20,
    minimum_calls=5,
    failure_rate=0.5,
    open_seconds=OPEN_SECONDS,
    max_open_seconds=MAX_OPEN_SECONDS,
    half_open_permits=1,
)
PHASES = ("before", "refused", "503", "hang", "after")
ROUTE_ORDER = ("primary", "backup", "local", "degraded", "failed")


# -- what one drill records ---------------------------------------------------------------------


@dataclass
class _Call:
    start: float
    end: float = 0.0
    route: str = "failed"
    error: str | None = None
    event: CallEvent | None = None


@dataclass(frozen=True)
class _Attempt:
    start: float
    end: float
    error: str | None
    sent: bool


_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "llmguard_drill_call", default=None
)


def _on_event(event: CallEvent) -> None:
    """Guard hook: hooks run inside the calling task, so the task's own record is current."""
    call = _CURRENT.get()
    if call is not None:
        call.event = event


class _Tap:
    """Passes every call to ``inner`` unchanged and logs each attempt (start, end, error)."""

    def __init__(self, inner: OpenAICompatibleProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.context_window = inner.context_window
        self.attempts: list[_Attempt] = []

    def _log(self, start: float, error: BaseException | None) -> None:
        kind = None if error is None else type(error).__name__
        sent = bool(getattr(error, "request_sent", True))
        self.attempts.append(_Attempt(start, time.monotonic(), kind, sent))

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        start, error = time.monotonic(), None
        try:
            return self.inner.complete(request, model=model, deadline=deadline)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._log(start, error)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        start, error = time.monotonic(), None
        try:
            return await self.inner.acomplete(request, model=model, deadline=deadline)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._log(start, error)

    def stream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> Generator[StreamChunk, None, None]:
        return self.inner.stream(request, model=model, deadline=deadline, idle_timeout=idle_timeout)

    def astream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        return self.inner.astream(
            request, model=model, deadline=deadline, idle_timeout=idle_timeout
        )

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- the report ---------------------------------------------------------------------------------


@dataclass
class DrillReport:
    """What an outage drill saw; :meth:`as_dict` for JSON, :meth:`render` for people.

    Times are seconds from the start of the traffic; latencies are milliseconds.

    Windows: ``before`` holds the calls started before the outage began, ``during`` the calls
    started after the primary's breaker first opened and before the primary returned,
    ``after`` the calls started after its return. (Calls started between the outage's start and
    the breaker's first opening, the *onset*, are in none of the three; ``onset_p99_ms`` shows
    them.) Percentiles are nearest-rank over every call of the window, failed ones included, so
    with fewer than 100 calls p99 is the slowest call, and with 100-199 the second slowest:
    ``max_ms`` shows the slowest.

    ``fallback_p99_ms`` is the p99 latency of the backup route's own answers when it is used
    directly: the calls of the ``during`` window that the backup served while the primary's
    breaker refused them outright (the primary never attempted, no retry on it). They run at the
    same moment, rate and load as the rest of the window, so ``p99_ms["during"]`` minus this is
    what the outage itself costs (the calls that still touched the dead primary), with no
    separate calibration run to drift against.

    ``calls_to_dead_after_open`` counts attempts on the primary that started after its breaker
    first opened and before it returned, as logged by a pass-through around the primary's
    provider; ``dead_calls`` splits them into refused connections (they never reach the
    server) and requests the primary's server received (its own log, a cross-check), and adds
    ``before_open``: the attempts of the onset, which the breaker needed to see to open.
    ``half_open_probes`` counts the breaker's ``open -> half_open`` transitions in that span:
    with ``half_open_permits=1`` each one hands out exactly one probe permit.

    ``recovery_s`` is the time from the primary's return until its breaker closed again (at
    once if it was closed), provided later calls were served by the primary; ``None`` if that
    never happened. The target bound is ``open_duration_s + probe_interval_s``: after the
    return the breaker waits out at most its current open duration (no longer than the probe
    interval measured during the outage), then one probe closes it; ``open_duration_s`` is the
    slack for that probe and for a probe still in flight at the return (a hung one fails late
    and reopens the breaker once more).
    """

    requests: int
    answered: int
    rate_per_s: float
    routes: list[str]
    local_model: bool
    local_note: str
    phases: list[dict[str, Any]]
    first_open_s: float | None
    returned_s: float
    p50_ms: dict[str, float | None]
    p99_ms: dict[str, float | None]
    max_ms: dict[str, float | None]
    onset_p99_ms: float | None
    window_requests: dict[str, int]
    fallback_p99_ms: float | None
    fallback_samples: int
    calls_to_dead_after_open: int
    dead_calls: dict[str, int]
    half_open_probes: int
    probes: list[dict[str, Any]]
    probe_interval_s: float | None
    open_duration_s: float
    max_open_duration_s: float
    observed_open_s: list[float]
    recovery_s: float | None
    served_by: dict[str, int]
    served_by_phase: dict[str, dict[str, int]]
    failures: dict[str, int]
    breaker_transitions: list[dict[str, Any]]
    config: dict[str, Any]
    _calls: list[tuple[float, str]] = field(default_factory=list, repr=False)
    _duration: float = field(default=0.0, repr=False)

    @property
    def answered_share(self) -> float:
        """Share of all calls answered (by any route, the local model or a degraded answer)."""
        return self.answered / self.requests if self.requests else 0.0

    @property
    def targets(self) -> dict[str, bool]:
        """Whether each target of an outage holds (see the class docs for the bounds)."""
        during, fallback = self.p99_ms["during"], self.fallback_p99_ms
        interval = self.probe_interval_s
        if interval is None:  # fewer than two probes: the longest the breaker may stay open
            interval = self.max_open_duration_s
        return {
            "answered_all": self.answered_share == 1.0,
            "during_p99_within_fallback_plus_50ms": (
                during is not None and fallback is not None and during <= fallback + 50
            ),
            "only_probes_reached_dead": self.calls_to_dead_after_open <= self.half_open_probes,
            "recovered_within_open_plus_probe": (
                self.recovery_s is not None and self.recovery_s <= self.open_duration_s + interval
            ),
        }

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data."""
        return {
            "answered_share": round(self.answered_share, 4),
            "p99_ms": self.p99_ms,
            "fallback_p99_ms": self.fallback_p99_ms,
            "calls_to_dead_after_open": self.calls_to_dead_after_open,
            "half_open_probes": self.half_open_probes,
            "recovery_s": self.recovery_s,
            "open_duration_s": self.open_duration_s,
            "probe_interval_s": self.probe_interval_s,
            "targets": self.targets,
            "p50_ms": self.p50_ms,
            "max_ms": self.max_ms,
            "onset_p99_ms": self.onset_p99_ms,
            "window_requests": self.window_requests,
            "fallback_samples": self.fallback_samples,
            "requests": self.requests,
            "answered": self.answered,
            "failures": self.failures,
            "served_by": self.served_by,
            "served_by_phase": self.served_by_phase,
            "phases": self.phases,
            "first_open_s": self.first_open_s,
            "returned_s": self.returned_s,
            "dead_calls": self.dead_calls,
            "probes": self.probes,
            "observed_open_s": self.observed_open_s,
            "max_open_duration_s": self.max_open_duration_s,
            "breaker_transitions": self.breaker_transitions,
            "routes": self.routes,
            "local_model": self.local_model,
            "local_note": self.local_note,
            "config": self.config,
        }

    def render(self) -> str:
        """A human-readable summary."""
        outage = [p for p in self.phases if p["name"] in ("refused", "503", "hang")]
        lines = [
            f"llmguard drill: {self.requests} chat calls at {self.rate_per_s:g}/s through a Guard "
            f"with routes {' -> '.join(self.routes)}",
            "the primary goes down "
            + ", then ".join(f"{p['name']} at {p['start']:.1f} s" for p in outage)
            + f", and returns at {self.returned_s:.1f} s",
            "",
            f"  {'phase':<8} {'from':>6} {'to':>6}"
            + "".join(f" {route:>8}" for route in ROUTE_ORDER),
        ]
        for phase in self.phases:
            counts = self.served_by_phase.get(phase["name"], {})
            lines.append(
                f"  {phase['name']:<8} {phase['start']:>6.1f} {phase['end']:>6.1f}"
                + "".join(f" {counts.get(route, 0):>8}" for route in ROUTE_ORDER)
            )
        lines += [
            "",
            f"  answered      {self.answered} of {self.requests} ({self.answered_share:.1%})"
            + (f"  failed: {self.failures}" if self.failures else ""),
            *(
                f"  {'latency' if w == 'before' else '':<13} {w:<7} p50 {_ms(self.p50_ms[w]):>9}"
                f"   p99 {_ms(self.p99_ms[w]):>9}   max {_ms(self.max_ms[w]):>9}"
                f"   ({self.window_requests[w]} calls)"
                for w in ("before", "during", "after")
            ),
            f"  fallback p99  {_ms(self.fallback_p99_ms)} (backup answers with the primary "
            f"refused by its breaker, n={self.fallback_samples})",
            f"  breaker       first opened at {_s(self.first_open_s)}; "
            f"{self.half_open_probes} half-open probes during the outage, "
            f"one every {_s(self.probe_interval_s)} (median)",
            f"                open {self.open_duration_s:g} s growing to "
            f"{self.max_open_duration_s:g} s; observed {self.observed_open_s}",
            f"  dead primary  {self.calls_to_dead_after_open} attempts after the breaker opened "
            f"({self.dead_calls['refused_connections']} refused connections, "
            f"{self.dead_calls['reached_server']} reached the server)",
            f"  recovery      {_s(self.recovery_s)} from the primary's return to its breaker "
            "closing",
        ]
        if self.local_note:
            lines.append(f"  local model   {self.local_note}")
        lines += ["", "  targets"]
        for name, held in self.targets.items():
            lines.append(f"    [{'ok' if held else 'MISS'}] {name}")
        lines += ["", "  half-open probes (primary)"]
        for probe in self.probes:
            lines.append(
                f"    at {probe['t']:>6.2f} s -> {probe['outcome']} after {_s(probe['seconds'])}"
            )
        lines += ["", "  breaker transitions"]
        for item in self.breaker_transitions:
            lines.append(
                f"    {item['t']:>6.2f} s  {item['route']}: {item['before']} -> {item['after']}"
            )
        return "\n".join(lines)

    def write_png(self, path: str) -> None:
        """Write a timeline PNG: calls per second by served route, breaker state, phases.

        Top: stacked bars per 0.25 s of calls by the route that served them (blue primary,
        orange backup, green local, purple degraded, red failed), scaled to the busiest bin.
        Below: the primary's breaker state (green closed, yellow half-open, red open) and the
        phases (light: primary up; dark grey: refused, mid grey: 503, darkest: hang). Thin
        grey lines mark phase changes.
        """
        _write_timeline(path, self)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


# -- running it ---------------------------------------------------------------------------------


@dataclass
class _Run:
    guard: Guard
    primary: FakeProvider
    tap: _Tap
    rate: float
    plan: list[tuple[str, float, Callable[[], None]]]
    total: float
    t0: float = 0.0
    calls: list[_Call] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    switching: dict[str, float] = field(default_factory=dict)

    async def traffic(self) -> None:
        """Launch the calls on schedule, half an interval off the phase changes."""
        count = round(self.total * self.rate)
        self.t0 = time.monotonic()
        self.marks["before"] = self.t0
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.switch_phases)
            for i in range(count):
                delay = self.t0 + (i + 0.5) / self.rate - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                tasks.start_soon(self.one, i)
        await self.guard.aclose()

    async def switch_phases(self) -> None:
        for name, at, action in self.plan:
            delay = self.t0 + at - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            begun = time.monotonic()
            await anyio.to_thread.run_sync(action)
            self.marks[name] = time.monotonic()  # the phase holds from here on
            self.switching[name] = self.marks[name] - begun

    async def one(self, i: int) -> None:
        call = _Call(time.monotonic())
        self.calls.append(call)
        _CURRENT.set(call)
        try:
            response = await self.guard.achat(
                [{"role": "user", "content": f"drill request {i}: say hello"}],
                max_tokens=MAX_TOKENS,
                temperature=0,
                tenant="drill",
                feature="drill",
            )
            call.route = response.route or "unknown"
        except Exception as error:  # any failure is a finding, never a crash of the drill
            call.error = type(error).__name__
        finally:
            call.end = time.monotonic()


def _local_route(enabled: bool) -> tuple[Provider | None, str]:
    if not enabled:
        return None, "not used (local=False)"
    try:
        from .providers.local import LocalProvider

        local = LocalProvider(n_ctx=512, warm_up=True)
    except ConfigurationError as missing:
        return None, f"not installed, the drill ran without it: {missing}"
    if not local.wait_loaded(60):
        return local, "still loading when the traffic started"
    return local, ""


def run_drill(
    *,
    rate: float = 20.0,
    before: float = 3.0,
    outage: float = 2.0,
    after: float = 4.0,
    local: bool = True,
    png: str | None = None,
) -> DrillReport:
    """Run an outage drill and return its :class:`DrillReport` (see the module docs).

    Args:
        rate: chat calls started per second.
        before: seconds of normal traffic before the outage.
        outage: seconds of each outage phase (refused, 503, hang; three in all).
        after: seconds of traffic after the primary's return.
        local: add the bundled local model as the last route when it is installed.
        png: write a timeline PNG here (see :meth:`DrillReport.write_png`).

    The default run lasts about 13 s. The Guard: ``timeout`` 5 s, ``attempt_timeout`` 0.4 s,
    retries ``RetryPolicy(attempts=2, base=0.02, cap=0.5)``, breakers
    ``BreakerPolicy(window=20, minimum_calls=5, failure_rate=0.5, open_seconds=1,
    max_open_seconds=2, half_open_permits=1)``; the backup answers after 10 ms.
    """
    if not (rate > 0 and before > 0 and outage > 0 and after > 0):
        raise ConfigurationError("rate and every phase duration must be positive")
    transitions: list[tuple[float, BreakerTransition]] = []

    def on_transition(transition: BreakerTransition) -> None:
        transitions.append((time.monotonic(), transition))

    local_route, local_note = _local_route(local)
    with (
        FakeProvider(model="primary-model", name="primary", hang_limit=10) as primary,
        FakeProvider(model="backup-model", name="backup") as backup,
    ):
        backup.always(Fault(latency=BACKUP_LATENCY))
        tap = _Tap(
            OpenAICompatibleProvider(primary.base_url, model="primary-model", name="primary")
        )
        routes: list[Provider] = [
            tap,
            OpenAICompatibleProvider(backup.base_url, model="backup-model", name="backup"),
        ]
        if local_route is not None:
            routes.append(local_route)
        guard = Guard(
            routes,
            timeout=CALL_TIMEOUT,
            attempt_timeout=ATTEMPT_TIMEOUT,
            retry=RETRY,
            breaker=BREAKER,
            breaker_hooks=[on_transition],
            hooks=[_on_event],
            environ={},
        )

        def back_with_503s() -> None:
            primary.always(Fault(status=503))  # before start(): no normal answer slips through
            primary.start()

        plan: list[tuple[str, float, Callable[[], None]]] = [
            ("refused", before, primary.stop),
            ("503", before + outage, back_with_503s),
            ("hang", before + 2 * outage, lambda: primary.always(Fault(hang=True))),
            ("after", before + 3 * outage, lambda: primary.always(None)),
        ]
        run = _Run(guard, primary, tap, rate, plan, total=before + 3 * outage + after)
        anyio.run(run.traffic)
        received = [r.time for r in primary.requests]
    report = _analyse(run, transitions, received, [r.name for r in routes], local_note)
    if png is not None:
        report.write_png(png)
    return report


# -- analysis -----------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100), rounded to 0.1."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)], 1)


def _analyse(
    run: _Run,
    transitions: list[tuple[float, BreakerTransition]],
    received: list[float],
    routes: list[str],
    local_note: str,
) -> DrillReport:
    t0 = run.t0
    starts = {name: run.marks[name] for name in PHASES}
    returned = starts["after"]
    end = max([t0 + run.total, *(c.end for c in run.calls)])
    bounds = [starts[name] for name in PHASES] + [end]
    phases = [
        {
            "name": name,
            "start": round(bounds[i] - t0, 3),
            "end": round(bounds[i + 1] - t0, 3),
            "switch_s": round(run.switching.get(name, 0.0), 3),
        }
        for i, name in enumerate(PHASES)
    ]
    mine = [(t, tr) for t, tr in transitions if tr.route == "primary"]
    first_open = next((t for t, tr in mine if tr.after == "open" and t >= starts["refused"]), None)
    in_outage = (
        (lambda t: first_open <= t < returned) if first_open is not None else (lambda t: False)
    )

    def phase_of(t: float) -> str:
        name = PHASES[0]
        for candidate in PHASES:
            if t >= starts[candidate]:
                name = candidate
        return name

    def window_of(call: _Call) -> str:
        if call.start < starts["refused"]:
            return "before"
        if call.start >= returned:
            return "after"
        return "during" if in_outage(call.start) else "onset"

    latencies: dict[str, list[float]] = {w: [] for w in ("before", "onset", "during", "after")}
    served_by: Counter[str] = Counter()
    served_by_phase: dict[str, Counter[str]] = {name: Counter() for name in PHASES}
    failures: Counter[str] = Counter()
    fallback: list[float] = []
    for call in run.calls:
        ms = (call.end - call.start) * 1000
        window = window_of(call)
        latencies[window].append(ms)
        served_by[call.route] += 1
        served_by_phase[phase_of(call.start)][call.route] += 1
        if call.error is not None:
            failures[call.error] += 1
        if window == "during" and call.route == "backup" and _primary_skipped(call.event):
            fallback.append(ms)

    dead = [a for a in run.tap.attempts if in_outage(a.start)]
    refused = sum(1 for a in dead if a.error is not None and not a.sent)
    reached = sum(1 for t in received if in_outage(t))

    half_opens = [t for t, tr in mine if tr.after == "half_open"]
    probes = []
    for t in half_opens:
        following = next(((u, tr) for u, tr in mine if u > t), None)
        outcome = "pending" if following is None else following[1].after
        probes.append(
            {
                "t": round(t - t0, 3),
                "outcome": {"open": "failed", "closed": "succeeded"}.get(outcome, outcome),
                "seconds": None if following is None else round(following[0] - t, 3),
                "during_outage": in_outage(t),
            }
        )
    outage_probes = [t for t in half_opens if in_outage(t)]
    gaps = [b - a for a, b in itertools.pairwise(outage_probes)]
    observed_open = []
    for t, tr in mine:
        if tr.after == "open":
            nxt = next((u for u, later in mine if u > t and later.after == "half_open"), None)
            if nxt is not None:
                observed_open.append(round(nxt - t, 3))

    state_at_return = next((tr.after for t, tr in reversed(mine) if t < returned), "closed")
    closed_at: float | None = returned if state_at_return == "closed" else None
    if closed_at is None:
        closed_at = next((t for t, tr in mine if t >= returned and tr.after == "closed"), None)
    recovery = None
    if closed_at is not None and any(
        c.start >= closed_at and c.route == "primary" for c in run.calls
    ):
        recovery = round(closed_at - returned, 3)

    return DrillReport(
        requests=len(run.calls),
        answered=sum(1 for c in run.calls if c.error is None),
        rate_per_s=run.rate,
        routes=routes,
        local_model="local" in routes,
        local_note=local_note,
        phases=phases,
        first_open_s=None if first_open is None else round(first_open - t0, 3),
        returned_s=round(returned - t0, 3),
        p50_ms={w: _percentile(latencies[w], 50) for w in ("before", "during", "after")},
        p99_ms={w: _percentile(latencies[w], 99) for w in ("before", "during", "after")},
        max_ms={w: _percentile(latencies[w], 100) for w in ("before", "during", "after")},
        onset_p99_ms=_percentile(latencies["onset"], 99),
        window_requests={w: len(v) for w, v in latencies.items()},
        fallback_p99_ms=_percentile(fallback, 99),
        fallback_samples=len(fallback),
        calls_to_dead_after_open=len(dead),
        dead_calls={
            "attempts": len(dead),
            "refused_connections": refused,
            "reached_server": reached,
            "other": len(dead) - refused - reached,
            "before_open": sum(
                1
                for a in run.tap.attempts
                if starts["refused"] <= a.start and (first_open is None or a.start < first_open)
            ),
        },
        half_open_probes=len(outage_probes),
        probes=probes,
        probe_interval_s=round(statistics.median(gaps), 3) if gaps else None,
        open_duration_s=BREAKER.open_seconds,
        max_open_duration_s=BREAKER.max_open_seconds,
        observed_open_s=observed_open,
        recovery_s=recovery,
        served_by=_ordered(served_by),
        served_by_phase={name: _ordered(c) for name, c in served_by_phase.items()},
        failures=dict(failures),
        breaker_transitions=[
            {"t": round(t - t0, 3), "route": tr.route, "before": tr.before, "after": tr.after}
            for t, tr in transitions
        ],
        config={
            "rate_per_s": run.rate,
            "timeout_s": CALL_TIMEOUT,
            "attempt_timeout_s": ATTEMPT_TIMEOUT,
            "retry": {"attempts": RETRY.attempts, "base": RETRY.base, "cap": RETRY.cap},
            "breaker": {
                "window": BREAKER.window,
                "minimum_calls": BREAKER.minimum_calls,
                "failure_rate": BREAKER.failure_rate,
                "open_seconds": BREAKER.open_seconds,
                "backoff_factor": BREAKER.backoff_factor,
                "max_open_seconds": BREAKER.max_open_seconds,
                "half_open_permits": BREAKER.half_open_permits,
            },
            "backup_latency_s": BACKUP_LATENCY,
            "max_tokens": MAX_TOKENS,
        },
        _calls=[(c.start - t0, c.route) for c in run.calls],
        _duration=end - t0,
    )


def _primary_skipped(event: CallEvent | None) -> bool:
    """The call never attempted the primary: its breaker refused it, and no retry on it."""
    if event is None:
        return False
    errors = dict(event.route_errors)
    return errors.get("primary") == "CircuitOpenError" and not any(
        r.name == "primary" for r in event.retries
    )


def _ordered(counts: Counter[str]) -> dict[str, int]:
    known = [r for r in ROUTE_ORDER if counts.get(r)]
    return {r: counts[r] for r in known + sorted(set(counts) - set(ROUTE_ORDER))}


# -- a small PNG, standard library only ---------------------------------------------------------

_ROUTE_RGB = {
    "primary": (31, 119, 180),
    "backup": (255, 127, 14),
    "local": (44, 160, 44),
    "degraded": (148, 103, 189),
    "failed": (214, 39, 40),
}
_STATE_RGB = {
    "closed": (44, 160, 44),
    "half_open": (255, 200, 0),
    "open": (214, 39, 40),
    "isolated": (90, 90, 90),
}
_PHASE_RGB = {
    "before": (225, 225, 225),
    "refused": (110, 110, 110),
    "503": (160, 160, 160),
    "hang": (60, 60, 60),
    "after": (225, 225, 225),
}
_BIN_S = 0.25


def _write_timeline(path: str, report: DrillReport) -> None:
    width, margin, chart, strip, band = 800, 10, 240, 24, 12
    height = margin + chart + 6 + strip + 4 + band + margin
    pixels = [bytearray(b"\xff" * (3 * width)) for _ in range(height)]
    duration = max(report._duration, _BIN_S)
    inner = width - 2 * margin

    def x_of(t: float) -> int:
        return margin + round(min(max(t, 0.0), duration) / duration * inner)

    def fill(x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        colour = bytes(rgb) * max(0, x1 - x0)
        for y in range(max(0, y0), min(height, y1)):
            pixels[y][3 * x0 : 3 * x1] = colour

    bins: dict[int, Counter[str]] = {}
    for start, route in report._calls:
        bins.setdefault(int(start // _BIN_S), Counter())[route] += 1
    busiest = max((sum(c.values()) for c in bins.values()), default=1)
    bottom = margin + chart
    for index, counts in bins.items():
        x0, x1 = x_of(index * _BIN_S), x_of((index + 1) * _BIN_S) - 1
        y = bottom
        for route in [*ROUTE_ORDER, *sorted(set(counts) - set(ROUTE_ORDER))]:
            tall = round(counts.get(route, 0) / busiest * chart)
            fill(x0, y - tall, x1, y, _ROUTE_RGB.get(route, (0, 0, 0)))
            y -= tall
    top = bottom + 6
    state, since = "closed", 0.0
    for item in [t for t in report.breaker_transitions if t["route"] == "primary"]:
        fill(x_of(since), top, x_of(item["t"]), top + strip, _STATE_RGB[state])
        state, since = item["after"], item["t"]
    fill(x_of(since), top, x_of(duration), top + strip, _STATE_RGB[state])
    for phase in report.phases:
        x0, x1 = x_of(phase["start"]), x_of(phase["end"])
        fill(x0, top + strip + 4, x1, top + strip + 4 + band, _PHASE_RGB[phase["name"]])
        fill(x0, margin, x0 + 1, bottom, (150, 150, 150))

    def chunk(tag: bytes, data: bytes) -> bytes:
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + bytes(row) for row in pixels)  # filter type 0 per scanline
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    with open(path, "wb") as out:
        out.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header))
        out.write(chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
