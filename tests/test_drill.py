"""The outage drill: every call answered while the primary is down, and the breaker recovers.

Latency is not asserted here (timing claims live in bench/outage_drill.py's output); these
checks are about behaviour: who served the calls, and the breaker's transitions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmguard_sdk.testing.drill import DrillReport, run_drill

# a drill of about 7 s, with the bundled local model as its last route when it is installed
pytestmark = [pytest.mark.slow, pytest.mark.local_model]

REQUIRED = {
    "answered_share",
    "p99_ms",
    "p50_ms",
    "fallback_p99_ms",
    "calls_to_dead_after_open",
    "half_open_probes",
    "recovery_s",
    "return_s",
    "open_duration_s",
    "probe_interval_s",
    "requests",
    "served_by",
    "served_by_phase",
    "phases",
    "breaker_transitions",
    "local_model",
    "targets",
}


@pytest.fixture(scope="module")
def png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("drill") / "timeline.png"


@pytest.fixture(scope="module")
def report(png: Path) -> DrillReport:
    """One quick drill (about 7 s) shared by the tests of this module."""
    return run_drill(before=1.0, outage=1.0, after=3.0, png=str(png))


def test_every_call_is_answered_through_the_outage(report: DrillReport) -> None:
    assert report.requests > 0
    assert report.answered_share == 1.0
    assert report.failures == {}
    # Every call launched ended with an answer from one of the Guard's routes, and each is
    # counted once overall, once in its phase and once in its latency window.
    assert set(report.served_by) <= set(report.routes)
    assert sum(report.served_by.values()) == report.requests
    phases = report.served_by_phase
    assert sum(sum(served.values()) for served in phases.values()) == report.requests
    assert sum(report.window_requests.values()) == report.requests
    assert phases["before"].get("primary", 0) > 0
    assert phases["after"].get("primary", 0) > 0
    for outage in ("refused", "503", "hang"):  # the primary served nothing while it was down
        assert phases[outage].get("primary", 0) == 0
        assert sum(phases[outage].values()) > 0


def test_the_breaker_opens_during_the_outage_and_closes_after_the_return(
    report: DrillReport,
) -> None:
    outage_start = next(p["start"] for p in report.phases if p["name"] == "refused")
    primary = [t for t in report.breaker_transitions if t["route"] == "primary"]
    opened = [t["t"] for t in primary if t["after"] == "open"]
    assert opened
    assert outage_start <= opened[0] < report.returned_s
    closed_after = [t["t"] for t in primary if t["after"] == "closed" and t["t"] >= opened[0]]
    assert closed_after
    assert closed_after[-1] >= report.returned_s
    assert primary[-1]["after"] == "closed"
    assert report.recovery_s is not None
    assert report.half_open_probes >= 1
    assert report.return_s is not None  # the primary served 90 % of calls again
    assert report.return_s <= 3.0  # within the drill's after phase


def test_the_report_has_every_key_and_a_png(report: DrillReport, png: Path) -> None:
    data = report.as_dict()
    assert set(data) >= REQUIRED
    for key in ("p50_ms", "p99_ms"):
        assert set(data[key]) == {"before", "during", "after"}
    assert set(data["targets"]) == {
        "answered_all",
        "during_tail_within_fallback_tail_plus_50ms",
        "only_probes_reached_dead",
        "recovered_within_open_plus_probe",
    }
    assert data["targets"]["answered_all"] is True
    assert "llmguard drill" in report.render()
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
