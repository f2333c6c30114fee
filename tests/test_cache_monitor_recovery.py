"""The false-hit monitor gives back what it took: a threshold raise steps back down once the
answers agree again, and a sample dropped for a full queue spends no check of the budget."""

from __future__ import annotations

import itertools
import time

import pytest

from llmguard_sdk.cache import FalseHitMonitor, ResponseCache
from llmguard_sdk.models import ChatRequest, ChatResponse
from llmguard_sdk.providers.openai_compat import OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

from .test_cache_monitor import TOPICS, Blocking, Drifting, _ask, drifting

__all__ = ["drifting"]  # (the fixture, imported for pytest)


def test_the_raise_steps_back_down_once_a_full_window_agrees_again(
    drifting: tuple[FakeProvider, Drifting],
) -> None:
    """Drift raises the threshold, then stops semantic hits; fixed, each full window of
    agreeing checks undoes one step: hits resume, then the raise goes back to 0 (it stayed
    at 0.05 for good)."""
    server, reply = drifting
    provider = OpenAICompatibleProvider(server.base_url, model="fake-model")

    def ask(request: ChatRequest) -> ChatResponse:
        return provider.complete(request, model="fake-model", deadline=time.monotonic() + 10)

    monitor = FalseHitMonitor(
        ask,
        sample_rate=1.0,
        max_checks_per_minute=600,
        clock=itertools.count().__next__,  # a second per reading: the budget never runs dry
        window=5,
        min_checks=5,
        raise_step=0.05,
        max_raise=0.05,
    )
    cache = ResponseCache(namespace="support", monitor=monitor)
    topics = iter(TOPICS)
    try:
        for topic in TOPICS:
            question = _ask(f"How do I configure {topic}?")
            cache.store(question, ask(question))

        def paraphrases(count: int) -> int:
            served = 0
            for topic in itertools.islice(topics, count):
                served += cache.lookup(_ask(f"How can I configure {topic}?")) is not None
                assert monitor.wait_idle(10)
            return served

        reply.drift()
        paraphrases(5)
        assert monitor.threshold_raise("support") == pytest.approx(0.05)
        paraphrases(5)
        assert not monitor.serving("support")
        reply.drifted = False  # fixed: the fresh answers agree with the cached ones again
        assert paraphrases(5) == 0  # checked in the background, not served
        assert monitor.serving("support")  # a full window agreed: hits resume first
        assert monitor.threshold_raise("support") == pytest.approx(0.05)
        assert paraphrases(4) == 4
        assert monitor.threshold_raise("support") == pytest.approx(0.05)  # not yet a window
        assert paraphrases(1) == 1
        state = monitor.metrics()["support"]
        assert state.threshold_raise == 0.0  # a second full window: one step down
        assert not state.semantic_stopped
        assert paraphrases(10) == 10
        assert monitor.threshold_raise("support") == 0.0  # never below 0
        assert monitor.metrics()["support"].checks == 30
    finally:
        monitor.close()
        provider.close()


def test_the_raise_comes_down_one_step_per_healthy_window() -> None:
    monitor = FalseHitMonitor(
        lambda request: ChatResponse(text="x", finish_reason="stop"),
        sample_rate=0.0,
        window=4,
        min_checks=2,
        raise_step=0.05,
        max_raise=0.1,
    )
    for _ in range(4):
        monitor.record("n", agreed=False)  # two wrong windows of min_checks: 0.1
    assert monitor.threshold_raise("n") == pytest.approx(0.1)
    for _ in range(3):
        monitor.record("n", agreed=True)
    assert monitor.threshold_raise("n") == pytest.approx(0.1)  # min_checks, but no full window
    monitor.record("n", agreed=True)
    assert monitor.threshold_raise("n") == pytest.approx(0.05)
    assert monitor.rate("n") == 0.0  # lowering starts a fresh window too
    for _ in range(8):
        monitor.record("n", agreed=True)
    assert monitor.threshold_raise("n") == 0.0


def test_a_sample_dropped_for_a_full_queue_keeps_its_budget_token() -> None:
    """Three checks a minute (a burst of three), the clock still: one checked, one queued,
    one dropped for the full queue. The dropped one's token is given back, so the next
    sample is checked (it was dropped by the budget: 2 checks, 2 dropped -> 3 and 1)."""
    model = Blocking()
    monitor = FalseHitMonitor(
        model, sample_rate=1.0, max_checks_per_minute=3, queue_size=1, clock=lambda: 0.0
    )
    try:
        assert monitor.sample("n", _ask("first"), "x")
        assert model.started.wait(5)  # the worker holds the first: the queue is empty
        assert monitor.sample("n", _ask("second"), "x")  # the queue is full
        assert not monitor.sample("n", _ask("third"), "x")  # dropped: no room
        model.release.set()
        assert monitor.wait_idle(5)
        assert monitor.sample("n", _ask("fourth"), "x")
        assert not monitor.sample("n", _ask("fifth"), "x")  # three tokens, three queued
        assert monitor.wait_idle(5)
        assert model.asked == ["first", "second", "fourth"]
        assert monitor.metrics()["n"].dropped == 2
    finally:
        model.release.set()
        monitor.close()
