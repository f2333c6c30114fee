"""An outage drill on your own configuration (``llmguard drill --config FILE``).

:func:`run_config_drill` builds the Guard a configuration file describes (its routes, groups,
tasks and settings, as :meth:`~llmguard_sdk.Guard.from_config` does) and puts a fault injector
in front of its primary route, in the client: no network is needed to fail it. It sends chat
calls at a fixed rate while the primary, one phase after the other, refuses connections,
answers 503 and hangs (until the attempt's deadline), then returns. The real backups and the
local model answer the calls the primary cannot; in the ``before`` and ``after`` phases the
primary's calls go to the real primary.

The :class:`ConfigDrillReport` says per phase how many calls each route served, how many
failed and their latency, how many attempts still reached the dead primary, and the primary's
breaker transitions. ``fallback_ok`` is the verdict a CI job checks: every call started while
the primary was down was answered by another route (not failed, not a degraded answer). The
command exits 1 when it does not hold.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._config_file import load_config, naming, resolve, tasks_of
from .._core.routing import flatten
from ..breaker import BreakerTransition
from ..config import _text_environ
from ..errors import ConfigurationError
from ..guard import Guard
from ..providers.base import Provider
from ..router import DeploymentGroup
from ._drill_analysis import _percentile
from ._outage import OUTAGE_PHASES, Outage, check_drill_times

__all__ = ["ConfigDrillReport", "run_config_drill"]

PHASES = ("before", *OUTAGE_PHASES, "after")
_FAILED = ("failed", "degraded")


@dataclass
class ConfigDrillReport:
    """What :func:`run_config_drill` saw; :meth:`as_dict` for JSON, :meth:`render` for people.

    ``phases``: per phase (``before``, ``refused``, ``503``, ``hang``, ``after``) the calls
    started in it, the route that served each (``failed``: the Guard raised, ``degraded``: its
    degraded answer), ``p50_ms`` / ``p99_ms`` (nearest rank; a p99 only over 100 calls or
    more) and ``max_ms``. ``primary_attempts``: attempts the fault injector received per phase
    (in the outage phases: calls that would have reached the dead primary; background probes
    included). ``failures``: error type counts. ``notes``: a local model still loading when the
    traffic began (each is given up to 120 s first). ``fallback_ok``: every call of the outage
    phases was answered by a route other than the primary, and the primary had calls to
    fail (``primary_got_traffic``: a backup named as the primary, behind routes that answer
    every call, gets none: its outage tested nothing).
    """

    config: str
    primary: str
    routes: list[str]
    rate_per_s: float
    phases: dict[str, dict[str, Any]]
    primary_attempts: dict[str, int]
    breaker_transitions: list[dict[str, Any]]
    failures: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def primary_got_traffic(self) -> bool:
        """The fault injector in front of the primary received an attempt, in any phase."""
        return any(self.primary_attempts.values())

    @property
    def fallback_ok(self) -> bool:
        """Every call started while the primary was down was answered by another route (and
        the primary got traffic: else its outage was never met)."""
        return self.primary_got_traffic and all(
            not any(route in _FAILED or route == self.primary for route in phase["served_by"])
            and phase["calls"] > 0
            for name, phase in self.phases.items()
            if name in OUTAGE_PHASES
        )

    @property
    def answered(self) -> int:
        """Calls answered by any route (degraded answers not counted)."""
        return sum(
            count
            for phase in self.phases.values()
            for route, count in phase["served_by"].items()
            if route not in _FAILED
        )

    @property
    def requests(self) -> int:
        """Calls sent in every phase."""
        return sum(phase["calls"] for phase in self.phases.values())

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "config": self.config,
            "primary": self.primary,
            "routes": self.routes,
            "rate_per_s": self.rate_per_s,
            "requests": self.requests,
            "answered": self.answered,
            "answered_share": round(self.answered / self.requests, 4) if self.requests else 0.0,
            "fallback_ok": self.fallback_ok,
            "primary_got_traffic": self.primary_got_traffic,
            "phases": self.phases,
            "primary_attempts": self.primary_attempts,
            "breaker_transitions": self.breaker_transitions,
            "failures": self.failures,
            "notes": self.notes,
        }

    def render(self) -> str:
        """A few lines for a terminal or a CI log."""
        lines = [
            f"outage drill on {self.config}: the primary route {self.primary!r} refuses "
            "connections, answers 503, hangs, then returns (faults injected in the client)",
            f"  routes    {' -> '.join(self.routes)}",
            f"  answered  {self.answered}/{self.requests} calls",
            "",
            f"  {'phase':<8} {'calls':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  served by",
        ]
        for name, phase in self.phases.items():
            served = ", ".join(f"{route} {count}" for route, count in phase["served_by"].items())
            lines.append(
                f"  {name:<8} {phase['calls']:>5} {_ms(phase['p50_ms']):>8} "
                f"{_ms(phase['p99_ms']):>8} {_ms(phase['max_ms']):>8}  {served or '-'}"
            )
        down = {k: v for k, v in self.primary_attempts.items() if k in OUTAGE_PHASES}
        lines += [
            "",
            f"  attempts on the dead primary: {sum(down.values())} "
            f"({', '.join(f'{k} {v}' for k, v in down.items())}; background probes included)",
            f"  primary breaker: {_transitions(self.breaker_transitions)}",
        ]
        if self.failures:
            lines.append(f"  failures: {', '.join(f'{k} {v}' for k, v in self.failures.items())}")
        lines += [f"  note: {note}" for note in self.notes]
        verdict = (
            "OK: every call during the outage was answered by a backup route"
            if self.fallback_ok
            else "FAILED: calls during the outage failed, were degraded or had no backup"
        )
        if not self.primary_got_traffic:  # (a backup named: the routes before it answered)
            verdict = (
                f"NOT TESTED: the primary route {self.primary!r} got no traffic (the routes "
                "before it answered every call); name the route calls reach first"
            )
        lines += ["", f"  fallback path {verdict}"]
        return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _transitions(found: list[dict[str, Any]]) -> str:
    if not found:
        return "never left closed"
    return ", ".join(f"{t['after']} at {t['t']:.1f} s" for t in found)


@dataclass
class _Call:
    phase: str
    start: float
    end: float = 0.0
    route: str = "failed"
    error: str | None = None


def _with_outage(
    entries: list[Provider | DeploymentGroup], primary: str
) -> tuple[list[Provider | DeploymentGroup], Outage]:
    """The chain with ``primary`` behind a fault injector."""
    found = [route for route in flatten(entries) if route.name == primary]
    if not found:
        names = [route.name for route in flatten(entries)]
        raise ConfigurationError(f"--primary {primary!r}: the configuration's routes are {names}")
    outage = Outage(found[0])
    swapped: list[Provider | DeploymentGroup] = []
    for entry in entries:
        if isinstance(entry, DeploymentGroup) and any(d is found[0] for d in entry.deployments):
            deployments = [outage if d is found[0] else d for d in entry.deployments]
            weights = entry.weights if entry.strategy == "weighted" else None  # (else refused)
            entry = DeploymentGroup(  # the file's group as it is, but for the injector
                entry.name, deployments, strategy=entry.strategy, weights=weights,
                half_life_s=entry.half_life_s, penalty_s=entry.penalty_s, slack=entry.slack,
                buffer=entry.buffer,
                regions={n: r for n, r in zip(entry.names, entry.regions, strict=True) if r},
                region=entry.region,
            )  # fmt: skip
        swapped.append(outage if entry is found[0] else entry)
    return swapped, outage


def run_config_drill(
    config: str | os.PathLike[str] | Mapping[str, Any],
    *,
    primary: str | None = None,
    rate: float = 5.0,
    before: float = 2.0,
    outage: float = 2.0,
    after: float = 2.0,
    max_tokens: int = 16,
    environ: Mapping[str, str] | None = None,
) -> ConfigDrillReport:
    """Rehearse an outage of ``primary`` (default: the chain's first route) on the Guard the
    configuration describes, and return the :class:`ConfigDrillReport` (see the module docs).

    ``rate`` calls per second; ``before``, ``outage`` (each of the three fault phases) and
    ``after`` in seconds; ``environ`` is where ``${VARIABLE}`` references are read (default
    ``os.environ``). Calls take as long as the configuration lets them: set
    ``attempt_timeout`` there, or a hung primary holds each call until ``timeout``.
    """
    check_drill_times(rate=rate, before=before, outage=outage, after=after)
    env = _text_environ(environ, "run_config_drill")
    with naming(config):
        loaded = load_config(config)
        entries, _described = resolve(loaded, env)
        tasks = tasks_of(loaded, entries)
        settings = loaded.settings(env)
    primary = primary or flatten(entries)[0].name
    chain, injector = _with_outage(entries, primary)
    transitions: list[tuple[float, BreakerTransition]] = []

    def on_transition(transition: BreakerTransition) -> None:
        if transition.route == primary:
            transitions.append((time.monotonic(), transition))

    options: dict[str, Any] = {**settings, "breaker_hooks": [on_transition]}
    if tasks is not None:
        options["tasks"] = tasks
    guard = Guard(chain, **options, environ=env)
    notes = _warm_up(guard.routes)
    plan = [(name, before + i * outage) for i, name in enumerate(OUTAGE_PHASES)]
    plan.append(("after", before + len(OUTAGE_PHASES) * outage))
    traffic = _Traffic(guard, injector, rate, plan, before + 3 * outage + after, max_tokens)
    anyio.run(traffic.run)
    return ConfigDrillReport(
        config=str(config) if not isinstance(config, Mapping) else "configuration",
        primary=primary,
        routes=[route.name for route in guard.routes],
        rate_per_s=rate,
        phases={name: _phase([c for c in traffic.calls if c.phase == name]) for name in PHASES},
        primary_attempts={name: injector.attempts.get(name, 0) for name in PHASES},
        breaker_transitions=[
            {"t": round(t - traffic.t0, 3), "before": tr.before, "after": tr.after}
            for t, tr in transitions
        ],
        failures=dict(Counter(c.error for c in traffic.calls if c.error is not None)),
        notes=notes,
    )


def _warm_up(routes: tuple[Provider, ...], timeout: float = 120.0) -> list[str]:
    """Load the local models before the traffic starts (their loading is no outage)."""
    notes = []
    for route in routes:
        wait_loaded = getattr(route, "wait_loaded", None)
        if callable(wait_loaded) and not wait_loaded(timeout):
            notes.append(f"{route.name}: still loading after {timeout:.0f} s when traffic began")
    return notes


def _phase(calls: list[_Call]) -> dict[str, Any]:
    latencies = [(c.end - c.start) * 1000 for c in calls]
    served = Counter(c.route for c in calls)
    return {
        "calls": len(calls),
        "served_by": dict(served.most_common()),
        "p50_ms": _percentile(latencies, 50),
        "p99_ms": _percentile(latencies, 99),
        "max_ms": _percentile(latencies, 100),
    }


@dataclass
class _Traffic:
    guard: Guard
    outage: Outage
    rate: float
    plan: list[tuple[str, float]]
    total: float
    max_tokens: int
    t0: float = 0.0
    calls: list[_Call] = field(default_factory=list)

    async def run(self) -> None:
        """Calls launched on schedule (each its own task); the phases switched on time."""
        self.t0 = time.monotonic()
        try:
            async with anyio.create_task_group() as tasks:
                for i in range(round(self.total * self.rate)):
                    at = (i + 0.5) / self.rate
                    delay = self.t0 + at - time.monotonic()
                    if delay > 0:
                        await anyio.sleep(delay)
                    self.outage.phase = self._phase_at(at)
                    tasks.start_soon(self.one, i, self.outage.phase)
        finally:
            await self.guard.aclose()

    def _phase_at(self, at: float) -> str:
        name = "before"
        for phase, start in self.plan:
            if at >= start:
                name = phase
        return name

    async def one(self, i: int, phase: str) -> None:
        call = _Call(phase, time.monotonic())
        self.calls.append(call)
        try:
            response = await self.guard.achat(
                [{"role": "user", "content": f"drill request {i}: say hello"}],
                max_tokens=self.max_tokens,
                feature="drill",
            )
            call.route = "degraded" if response.route == "degraded" else response.route
        except Exception as error:  # any failure is a finding, never a crash of the drill
            call.error = type(error).__name__
        finally:
            call.end = time.monotonic()
