"""RepeatedLog: a repeated warning is logged once, then as a count per window, with the first
and last occurrence; time is driven by hand (no sleeping)."""

from __future__ import annotations

import logging

import pytest

from llmguard_sdk.telemetry import _repeats
from llmguard_sdk.telemetry._repeats import RepeatedLog

LOGGER = logging.getLogger("llmguard_sdk.test_repeats")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(clock: Clock) -> RepeatedLog:
    return RepeatedLog(every=5.0, clock=clock, wall=clock, background=False)


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    return [(r.getMessage(), r.llmguard_repeats) for r in caplog.records]  # type: ignore[attr-defined]


def test_once_then_a_count_per_window(
    log: RepeatedLog, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER.name)
    assert log.log(LOGGER, logging.WARNING, "redis", "Redis down (%s)", "refused")
    for step in range(1, 100):  # 99 more within 4.95 s: counted, not logged
        clock.now = 1000.0 + step * 0.05
        assert not log.log(LOGGER, logging.WARNING, "redis", "Redis down (%s)", f"try {step}")
    clock.now = 1005.0  # the window is over: this one writes the count (itself included)
    assert log.log(LOGGER, logging.WARNING, "redis", "Redis down (%s)", "last")
    (first, _), (counted, repeats) = records(caplog)
    assert first == "Redis down (refused)"
    assert counted.startswith("Redis down (last) [repeated 100 more times from ")
    assert repeats["count"] == 100
    assert repeats["first"] == pytest.approx(1000.05)
    assert repeats["last"] == 1005.0
    assert caplog.records[0].llmguard_repeats["count"] == 1  # type: ignore[attr-defined]


def test_a_quiet_window_logs_the_next_one_at_once_and_flush_writes_what_is_pending(
    log: RepeatedLog, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER.name)
    log.log(LOGGER, logging.WARNING, "a", "A")
    clock.now += 20
    assert log.log(LOGGER, logging.WARNING, "a", "A")  # a new episode
    log.log(LOGGER, logging.WARNING, "a", "A")
    log.log(LOGGER, logging.WARNING, "b", "B")  # another key: its own first line
    assert log.flush() == 1
    assert log.flush() == 0
    assert [m for m, _ in records(caplog)] == [
        "A",
        "A",
        "B",
        f"A [repeated 1 more times from {_repeats._clock_time(clock.now)} "
        f"to {_repeats._clock_time(clock.now)}]",
    ]


def test_a_timer_writes_the_count_when_the_incident_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LOGGER.name)
    log = RepeatedLog(every=0.05)
    log.log(LOGGER, logging.WARNING, "k", "K")
    log.log(LOGGER, logging.WARNING, "k", "K")
    log.log(LOGGER, logging.WARNING, "k", "K")
    entry = log._entries["k"]
    assert entry.timer is not None
    entry.timer.join(timeout=5)  # bounded
    assert [r.llmguard_repeats["count"] for r in caplog.records] == [1, 2]  # type: ignore[attr-defined]


def test_keys_are_bounded_and_disabled_levels_cost_nothing(
    log: RepeatedLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, LOGGER.name)
    assert not log.log(LOGGER, logging.WARNING, "quiet", "not enabled")
    assert "quiet" not in log._entries
    for key in range(_repeats._MAX_KEYS + 10):
        log.log(LOGGER, logging.ERROR, key, "E")
    assert len(log._entries) == _repeats._MAX_KEYS
    with pytest.raises(ValueError, match="every"):
        RepeatedLog(every=0)
