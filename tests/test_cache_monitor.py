"""The live false-hit monitor, driven by a FakeProvider whose answers drift: sampled semantic
hits are re-asked in the background, the estimate rises, the threshold rises, then semantic
hits stop, and the OpenTelemetry gauge shows it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from llmguard_sdk.cache import FalseHitMonitor, ResponseCache
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.providers.openai_compat import OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

TOPICS = [f"topic{i}" for i in range(40)]


class Drifting:
    """Answers by topic (the last word of the question); after :meth:`drift`, otherwise."""

    def __init__(self) -> None:
        self.drifted = False

    def drift(self) -> None:
        self.drifted = True

    def __call__(self, body: dict[str, Any]) -> str:
        topic = body["messages"][-1]["content"].rstrip("?").split()[-1]
        if self.drifted:
            return f"Completely different guidance now applies, see release {len(topic)}b."
        return f"To configure {topic}, open the settings page and pick {topic}."


@pytest.fixture
def drifting() -> Iterator[tuple[FakeProvider, Drifting]]:
    reply = Drifting()
    with FakeProvider(model="fake-model", reply=reply) as server:
        yield server, reply


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="fake-model")


class Blocking:
    """A model for a monitor to ask that holds each question until :attr:`release` is set
    (:attr:`started`: one is held); :attr:`asked`: the questions' text, as they came."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.asked: list[str] = []

    def __call__(self, request: ChatRequest) -> ChatResponse:
        self.asked.append(request.messages[-1].text)
        self.started.set()
        self.release.wait(10)
        return ChatResponse(text="x", finish_reason="stop")


def _gauge(reader: InMemoryMetricReader) -> dict[str, float]:
    found: dict[str, float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "llmguard.cache.false_hit_rate":
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        assert point.attributes is not None
                        found[str(point.attributes["namespace"])] = point.value
    return found


def test_drifting_answers_raise_the_threshold_then_stop_semantic_hits(
    drifting: tuple[FakeProvider, Drifting],
) -> None:
    server, reply = drifting
    provider = OpenAICompatibleProvider(server.base_url, model="fake-model")

    def ask(request: ChatRequest) -> ChatResponse:
        return provider.complete(request, model="fake-model", deadline=time.monotonic() + 10)

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    monitor = FalseHitMonitor(
        ask,
        sample_rate=1.0,
        max_checks_per_minute=600,
        clock=itertools.count().__next__,  # a second per reading: the budget never runs dry
        window=10,
        min_checks=10,
        raise_step=0.05,
        max_raise=0.05,
        meter=meters.get_meter("test"),
    )
    cache = ResponseCache(namespace="support", monitor=monitor)
    try:
        for topic in TOPICS:
            question = _ask(f"How do I configure {topic}?")
            cache.store(question, ask(question))

        def paraphrases(topics: list[str]) -> int:
            served = 0
            for topic in topics:
                served += cache.lookup(_ask(f"How can I configure {topic}?")) is not None
                assert monitor.wait_idle(10)
            return served

        assert paraphrases(TOPICS[:10]) == 10  # answers agree: every check says right
        assert monitor.rate("support") == 0.0
        assert monitor.threshold_raise("support") == 0.0
        reply.drift()
        paraphrases(TOPICS[10:11])  # the first wrong verdict in a full window: 1 in 10
        state = monitor.metrics()["support"]
        assert state.threshold_raise == pytest.approx(0.05)  # over 0.05: the threshold rises
        assert not state.semantic_stopped
        assert _gauge(reader) == {"support": 0.0}  # a fresh window after acting
        assert paraphrases(TOPICS[11:20]) == 9  # still served (too few verdicts to act)
        assert monitor.rate("support") == 1.0
        assert _gauge(reader) == {"support": 1.0}
        paraphrases(TOPICS[20:21])  # a full window, all wrong, at max_raise: hits stop
        assert monitor.metrics()["support"].semantic_stopped
        assert paraphrases(TOPICS[21:26]) == 0  # checked in the background, not served
        assert cache.stats.monitor_refusals == 5
        assert monitor.metrics()["support"].checks == 26
    finally:
        monitor.close()
        meters.shutdown()
        provider.close()


def test_reported_false_hits_feed_the_estimate_and_serving_resumes() -> None:
    clock = [0.0]
    monitor = FalseHitMonitor(
        lambda request: ChatResponse(text="same", finish_reason="stop"),
        window=4,
        min_checks=4,
        max_raise=0.0,
        sample_rate=0.0,  # only the reports count: no background check races them
        clock=lambda: clock[0],
    )
    cache = ResponseCache(namespace="n", monitor=monitor, threshold=0.3, strict=False)
    cache.store(_ask("How do I configure topic1?"), ChatResponse(text="a", finish_reason="stop"))
    hit = cache.lookup(_ask("How can I configure topic1?"))
    assert hit is not None
    for _ in range(4):
        cache.report_false_hit(hit)
    assert monitor.rate("n") == 0.0  # acted: the window starts again
    assert not monitor.serving("n")  # no raise allowed: stopped at once
    for _ in range(3):
        monitor.record("n", agreed=True)
    assert not monitor.serving("n")  # not yet a full window
    monitor.record("n", agreed=True)
    assert monitor.serving("n")
    assert cache.stats.false_hits == 4


def test_a_namespace_whose_semantic_hits_stopped_serves_no_stale_semantic_match() -> None:
    """Stale-if-error (every route failed) served a semantic match the monitor had judged
    too often wrong; an entry of the same request is still served."""
    monitor = FalseHitMonitor(
        lambda request: ChatResponse(text="same", finish_reason="stop"),
        window=1,
        min_checks=1,
        max_raise=0.0,
        sample_rate=0.0,
    )
    cache = ResponseCache(namespace="n", monitor=monitor, threshold=0.3, strict=False)
    question = _ask("How do I configure topic1?")
    cache.store(question, ChatResponse(text="a", finish_reason="stop"))
    hit = cache.lookup(_ask("How can I configure topic1?"))
    assert hit is not None
    cache.report_false_hit(hit)
    assert not monitor.serving("n")
    assert cache.lookup_stale(_ask("How can I configure topic1?")) is None
    stale = cache.lookup_stale(question)
    assert stale is not None
    assert stale.matched == "exact"


def test_a_monitor_of_bad_options_is_refused() -> None:
    """A window given as text was a TypeError; an ``ask`` that cannot be called was taken and
    every background check failed (logged, never counted)."""
    with pytest.raises(ConfigurationError):
        FalseHitMonitor(None)  # type: ignore[arg-type]
    for options in ({"window": "5"}, {"min_checks": 2.5}, {"queue_size": "8"}, {"target": "0.1"}):
        with pytest.raises(ConfigurationError):
            FalseHitMonitor(lambda request: ChatResponse(text="x"), **options)


def test_the_budget_bounds_the_background_checks() -> None:
    clock = [0.0]
    asked: list[str] = []

    def ask(request: ChatRequest) -> ChatResponse:
        asked.append(request.messages[-1].text)
        return ChatResponse(text="x", finish_reason="stop")

    monitor = FalseHitMonitor(ask, sample_rate=1.0, max_checks_per_minute=2, clock=lambda: clock[0])
    queued = [monitor.sample("n", _ask(f"q{i}"), "x") for i in range(5)]
    assert queued == [True, True, False, False, False]  # a burst of two, then the budget
    clock[0] += 30.0  # one more token
    assert monitor.sample("n", _ask("later"), "x")
    assert monitor.wait_idle(5)
    assert len(asked) == 3
    assert monitor.metrics()["n"].dropped == 3
    monitor.close()
    with pytest.raises(ConfigurationError):
        FalseHitMonitor(ask, target=0.0)
    nan = float("nan")  # a NaN budget took a token for every sample: no budget at all
    for name in ("max_checks_per_minute", "raise_step", "agreement"):
        bad: dict[str, Any] = {name: nan}
        with pytest.raises(ConfigurationError):
            FalseHitMonitor(ask, **bad)


def test_close_drops_the_queued_checks_and_stops_the_worker() -> None:
    model = Blocking()
    monitor = FalseHitMonitor(model, sample_rate=1.0, queue_size=2)
    assert monitor.sample("n", _ask("first"), "x")
    assert model.started.wait(5)  # the worker is in the first check
    assert monitor.sample("n", _ask("second"), "x")
    assert monitor.sample("n", _ask("third"), "x")  # the queue is full
    closer = threading.Thread(target=monitor.close, kwargs={"timeout": 0.5})
    closer.start()
    closer.join(5)
    model.release.set()
    assert monitor.wait_idle(5)
    assert monitor._worker is not None
    monitor._worker.join(5)
    assert not monitor._worker.is_alive()
    assert model.asked == ["first"]  # the queued checks were dropped, not sent to the model
    monitor.close()  # again: nothing left behind that would stop the next worker
    assert monitor.sample("n", _ask("later"), "x")
    assert monitor.wait_idle(5)
    assert model.asked == ["first", "later"]
    monitor.close()
