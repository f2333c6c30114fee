"""Anomaly alerts: tokens per request, cost per feature per hour and error rate against their
rolling baselines (time driven by hand), and through a Guard: a hook, a span event, a metric
and one log line."""

from __future__ import annotations

import logging
import math
import random
import sys
import threading
from collections import deque
from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Price, PriceTable, RunawayDetector
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.telemetry.anomaly import Anomalies, AnomalyEvent, RollingBaseline, TimeBuckets
from llmguard_sdk.testing import FakeProvider, Fault

from .test_telemetry import Exported, exporters

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # on an hour boundary

    def __call__(self) -> float:
        return self.now


def watch(clock: Clock, events: list[AnomalyEvent], **options: float) -> Anomalies:
    return Anomalies([events.append], clock=clock, **options)  # type: ignore[arg-type]


def test_a_token_spike_against_the_features_p95() -> None:
    events: list[AnomalyEvent] = []
    anomalies = watch(Clock(), events, token_min_samples=20)
    for _ in range(40):
        assert anomalies.observe("faq", 100, None, failed=False) == []
    assert anomalies.observe("faq", 499, None, failed=False) == []  # under 5 x p95
    (event,) = anomalies.observe("faq", 5000, None, failed=False)
    assert (event.kind, event.feature, event.value, event.baseline) == (
        "tokens_per_request",
        "faq",
        5000.0,
        100.0,
    )
    assert anomalies.observe("other", 5000, None, failed=False) == []  # its own baseline
    assert events == [event]


def test_the_runaway_check_is_one_case_of_the_rolling_baseline() -> None:
    runaway = RunawayDetector(factor=5.0, window=100, min_samples=10)
    assert isinstance(runaway, RollingBaseline)
    for _ in range(10):
        assert runaway.observe("faq", 100) is None
    assert runaway.observe("faq", 501) == 100.0
    with pytest.raises(ConfigurationError, match="factor"):
        RunawayDetector(factor=1.0)


def test_cost_per_hour_over_three_times_its_mean_fires_once_that_hour() -> None:
    clock = Clock()
    events: list[AnomalyEvent] = []
    anomalies = watch(clock, events)
    for _hour in range(4):  # 4 hours of $0.10
        for _ in range(10):
            anomalies.observe("faq", None, 0.01, failed=False)
        clock.now += 3600
    for _ in range(29):  # $0.29 in this hour: not over 3 x 0.10
        anomalies.observe("faq", None, 0.01, failed=False)
    assert events == []
    found = [e for _ in range(5) for e in anomalies.observe("faq", None, 0.01, failed=False)]
    (event,) = found  # once in the hour, though every later call is over too
    assert event.kind == "cost_per_hour"
    assert event.value == pytest.approx(0.30, abs=0.011)
    assert event.baseline == pytest.approx(0.10)
    clock.now += 3600  # a new hour: its own check (its mean now includes the spike)
    assert anomalies.observe("faq", None, 0.01, failed=False) == []


def test_an_error_rate_over_its_baseline_and_the_floor() -> None:
    clock = Clock()
    events: list[AnomalyEvent] = []
    anomalies = watch(clock, events)
    for minute in range(4):
        for call in range(20):  # 5 % failed: the usual
            anomalies.observe("faq", None, None, failed=call == 0 and minute % 2 == 0)
        clock.now += 60
    found = [e for n in range(20) for e in anomalies.observe("faq", None, None, failed=n < 10)]
    (event,) = found
    assert event.kind == "error_rate"
    assert event.value >= 0.5
    assert event.baseline == pytest.approx(0.025)


def test_rolling_baseline_flags_what_a_sorted_window_would() -> None:
    """The kept-in-order window gives the p95 a full sort gives, through evictions, ties
    and spikes, refreshed every 16 observations as before."""
    rng = random.Random(3)
    baseline = RollingBaseline(factor=3.0, window=40, min_samples=10)
    window: deque[float] = deque(maxlen=40)
    since, p95 = 16, 0.0
    flagged = 0
    for i in range(5000):
        value = float(400 if rng.random() < 0.02 else rng.choice([rng.randint(1, 50), 7]))
        expected = None
        if len(window) >= 10:
            if since >= 16:
                ordered = sorted(window)
                since, p95 = 0, ordered[math.ceil(0.95 * len(ordered)) - 1]
            since += 1
            expected = p95 if value > 3.0 * max(p95, 1.0) else None
        assert baseline.observe("k", value) == expected, i
        window.append(value)
        flagged += expected is not None
    assert flagged > 30  # the spikes were judged, not only the quiet values


def test_time_buckets_and_baselines_refuse_nonsense() -> None:
    with pytest.raises(ConfigurationError):
        TimeBuckets(0, factor=2, history=3, min_history=1)
    with pytest.raises(ConfigurationError):
        TimeBuckets(60, factor=2, history=3, min_history=5)
    with pytest.raises(ConfigurationError):
        RollingBaseline(window=5)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"token_factor": "5"}, "token_factor"),  # TypeError
        ({"token_factor": 1}, "token_factor"),  # named: "rolling baseline: factor > 1"
        ({"token_window": 5}, "token_window"),
        ({"cost_history_hours": 24.5}, "cost_history_hours"),  # TypeError from the deque
        ({"cost_min_hours": 30}, "cost_min_hours"),
        ({"error_factor": math.nan}, "error_factor"),
        ({"error_min_calls": True}, "error_min_calls"),
        ({"min_error_rate": "10%"}, "min_error_rate"),  # TypeError at the first call
        ({"cost_floor_usd": None}, "cost_floor_usd"),
        ({"on_event": print}, "on_event"),  # one callable, not a sequence: TypeError
    ],
)
def test_bad_anomaly_options_are_configuration_errors_naming_the_option(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Anomalies(**options).observe("faq", 10, 0.5, failed=False)  # type: ignore[arg-type]


def test_whole_number_options_may_be_written_as_floats() -> None:
    """``cost_history_hours=24.0`` raised ``TypeError`` (a deque's maxlen) at the first call."""
    watch = Anomalies(cost_history_hours=24.0, token_window=500.0)  # type: ignore[arg-type]
    assert watch.observe("faq", 10, 0.5, failed=False) == []


def test_through_a_guard_a_hook_a_span_event_a_metric_and_one_log_line(
    fake: FakeProvider, make_guard: MakeGuard, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[AnomalyEvent] = []
    otel: Exported
    otel, meter_provider = exporters(anomalies=Anomalies([events.append], token_min_samples=10))
    guard = make_guard(fake, telemetry=otel.telemetry, retry=None, prices=PRICES)
    caplog.set_level(logging.WARNING, logger="llmguard_sdk")
    for _ in range(12):
        guard.chat([{"role": "user", "content": "short"}], feature="bloat")
    long_prompt = " ".join(["word"] * 3000)  # prompt bloat
    for _ in range(3):
        guard.chat([{"role": "user", "content": long_prompt}], feature="bloat")
    fake.script(Fault(status=400))
    with pytest.raises(Exception, match="400"):  # a failed call is watched, not a crash
        guard.chat([{"role": "user", "content": "short"}], feature="bloat")
    assert [e.kind for e in events] == ["tokens_per_request"] * 3
    spans = [s for s in otel.finished() if any(e.name == "llmguard.anomaly" for e in s.events)]
    assert len(spans) == 3
    (point,) = otel.points("llmguard.anomalies")
    assert point.value == 3
    assert point.attributes == {
        "llmguard.anomaly": "tokens_per_request",
        "llmguard.feature": "bloat",
    }
    lines = [r for r in caplog.records if "llmguard anomaly" in r.getMessage()]
    assert len(lines) == 1  # then counted (logs readable in an incident); a feature no
    assert "feature bloat" in lines[0].getMessage()  # other test uses: the log is per process
    meter_provider.shutdown()


def test_the_rolling_baseline_stays_whole_under_threads() -> None:
    """The budgets' RunawayDetector observes from every thread that settles a call: a thread
    switch between a value's two records let another thread drop it from the window's order
    before it was there (IndexError), and the order kept stale values (a wrong p95, growing)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    detector = RunawayDetector(factor=5.0, window=10, min_samples=5)
    failures: list[BaseException] = []

    def settle(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(20_000):
                detector.observe("chat", rng.randint(1, 1000))
        except Exception as exc:  # what a settling call would have raised
            failures.append(exc)

    threads = [threading.Thread(target=settle, args=(seed,)) for seed in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    seen, ordered = detector._seen["chat"]
    assert len(seen) == 10
    assert ordered == sorted(seen)
