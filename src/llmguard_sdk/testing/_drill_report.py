"""The outage drill's report: the numbers, their rendering for people and a timeline PNG."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ._drill_run import ROUTE_ORDER

__all__ = ["DrillReport"]


@dataclass
class DrillReport:
    """What an outage drill saw; :meth:`as_dict` for JSON, :meth:`render` for people.

    Times are seconds from the start of the traffic; latencies are milliseconds.

    Windows: ``before`` holds the calls started before the outage began, ``during`` the calls
    started after the primary's breaker first opened and before the primary returned,
    ``after`` the calls started after its return. (Calls started between the outage's start and
    the breaker's first opening, the *onset*, are in none of the three; ``onset_p99_ms`` shows
    them.) Percentiles are nearest-rank over every call of the window, failed ones included; a
    p99 is given only over at least :data:`P99_MIN_SAMPLES` calls (None below: it would be one
    of the slowest few calls), ``max_ms`` always.

    ``fallback_p99_ms`` and ``fallback_max_ms`` are the latency of the backup route's own
    answers when it is used directly: the calls of the ``during`` window that the backup served
    while the primary's breaker refused them outright (the primary never attempted, no retry on
    it). They run at the same moment, rate and load as the rest of the window, so the
    ``during`` tail minus this is
    what the outage itself costs (the calls that still touched the dead primary), with no
    separate calibration run to drift against. The target compares the tails: each window's
    p99 where it has one, else its max.

    ``calls_to_dead_after_open`` counts attempts on the primary that started after its breaker
    first opened and before it returned, as logged by a pass-through around the primary's
    provider; ``dead_calls`` splits them into refused connections (they never reach the
    server) and requests the primary's server received (its own log, a cross-check), and adds
    ``before_open``: the attempts of the onset, which the breaker needed to see to open.
    ``half_open_probes`` counts the breaker's ``open -> half_open`` transitions in that span;
    each hands out ``half_open_permits`` probe permits (1 in the drill's own policy), the
    bound of ``only_probes_reached_dead``. ``reached_server`` leaves the background probes out.

    ``recovery_s`` is the time from the primary's return until its breaker closed again (at
    once if it was closed), provided later calls were served by the primary; ``None`` if that
    never happened. The target bound is ``open_duration_s + probe_interval_s``: after the
    return the breaker waits out at most its current open duration (no longer than the probe
    interval measured during the outage), then one probe closes it; ``open_duration_s`` is the
    slack for that probe and for a probe still in flight at the return (a hung one fails late
    and reopens the breaker once more).

    ``return_s``: from the primary's return until it serves 90 % of calls again (the first run
    of 20 calls after the return of which 18 or more it served); ``None`` if that never came.
    ``dead_calls["background_probes"]`` counts the background probes of the open breaker
    (``BreakerPolicy.probe_every``), which are not user calls.
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
    fallback_max_ms: float | None
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
    return_s: float | None
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
        during = _tail(self.p99_ms["during"], self.max_ms["during"])
        fallback = _tail(self.fallback_p99_ms, self.fallback_max_ms)
        interval = self.probe_interval_s
        if interval is None:  # fewer than two probes: the longest the breaker may stay open
            interval = self.max_open_duration_s
        return {
            "answered_all": self.answered_share == 1.0,
            "during_tail_within_fallback_tail_plus_50ms": (
                during is not None and fallback is not None and during <= fallback + 50
            ),
            "only_probes_reached_dead": (
                self.calls_to_dead_after_open
                <= self.half_open_probes * self.config["breaker"]["half_open_permits"]
            ),
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
            "fallback_max_ms": self.fallback_max_ms,
            "calls_to_dead_after_open": self.calls_to_dead_after_open,
            "half_open_probes": self.half_open_probes,
            "recovery_s": self.recovery_s,
            "return_s": self.return_s,
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
            f"  fallback      p99 {_ms(self.fallback_p99_ms)}   max {_ms(self.fallback_max_ms)}"
            f" (backup answers with the primary refused by its breaker, "
            f"n={self.fallback_samples})",
            f"  breaker       first opened at {_s(self.first_open_s)}; "
            f"{self.half_open_probes} half-open probes during the outage, "
            f"one every {_s(self.probe_interval_s)} (median)",
            f"                open {self.open_duration_s:g} s growing to "
            f"{self.max_open_duration_s:g} s; observed {self.observed_open_s}",
            f"  dead primary  {self.calls_to_dead_after_open} attempts after the breaker opened "
            f"({self.dead_calls['refused_connections']} refused connections, "
            f"{self.dead_calls['reached_server']} reached the server)",
            f"  recovery      {_s(self.recovery_s)} from the primary's return to its breaker "
            f"closing; {_s(self.return_s)} until it served 90 % of calls again",
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


P99_MIN_SAMPLES = 1000
"""The fewest samples a p99 is reported over (below, the max stands for the tail)."""


def _tail(p99: float | None, maximum: float | None) -> float | None:
    """A window's tail latency: its p99 where it has one, else its max."""
    return p99 if p99 is not None else maximum


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


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
