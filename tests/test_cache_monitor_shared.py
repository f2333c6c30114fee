"""A :class:`FalseHitMonitor` shared by two caches, one of them closed.

Closing one cache while a check was under way queued the worker's stop marker behind it; a
sample the other cache queued right after landed behind the marker, the worker stopped on
the marker, and no new worker was started (the old one was still alive): the sample was
never checked (``wait_idle`` False, the check pending for good). The worker now stops only
once nothing is queued, and a sample queued after that starts a new worker.
"""

from __future__ import annotations

import threading
import time

from llmguard_sdk.cache import FalseHitMonitor, ResponseCache
from llmguard_sdk.models import ChatRequest, ChatResponse
from tests.test_cache import answer, ask
from tests.test_cache_monitor import Blocking

QUESTION = "What is the capital of France?"
PARAPHRASE = "what is the capital of france"


def _queued(monitor: FalseHitMonitor, count: int) -> None:
    """Wait (bounded) until ``count`` items wait in the monitor's queue."""
    for _ in range(500):
        if monitor._queue.qsize() == count:
            return
        time.sleep(0.01)
    raise AssertionError(f"the monitor's queue never held {count} item(s)")


def test_a_sample_queued_after_another_cache_closed_the_monitor_is_checked() -> None:
    model = Blocking()
    monitor = FalseHitMonitor(model, sample_rate=1.0, compare=lambda a, b: True)
    first = ResponseCache(namespace="a", monitor=monitor)
    second = ResponseCache(namespace="b", monitor=monitor)
    for cache in (first, second):
        cache.store(ask(QUESTION), answer("Paris"))
    hit = first.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    assert model.started.wait(5)  # the worker is in the first cache's check
    closer = threading.Thread(target=first.close, kwargs={"timeout": 10})
    closer.start()
    _queued(monitor, 1)  # the stop, behind the check under way
    hit = second.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"  # sampled: queued behind the stop
    model.release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert monitor.wait_idle(5)
    assert {name: state.checks for name, state in monitor.metrics().items()} == {"a": 1, "b": 1}
    assert model.asked == [PARAPHRASE, PARAPHRASE]
    # the worker stopped once nothing was left; a later sample starts another one
    worker = monitor._worker
    assert worker is not None
    worker.join(5)
    assert not worker.is_alive()
    assert second.lookup(ask(PARAPHRASE)) is not None
    assert monitor.wait_idle(5)
    assert monitor.metrics()["b"].checks == 2
    second.close()


def test_a_sample_queued_after_a_stopped_worker_decided_to_leave_starts_a_new_one() -> None:
    """The monitor closed while idle: the worker takes the stop and leaves; every sample
    after that is checked (by a new worker)."""
    checked = threading.Event()

    def ask_model(request: ChatRequest) -> ChatResponse:
        checked.set()
        return ChatResponse(text="x", finish_reason="stop")

    monitor = FalseHitMonitor(ask_model, sample_rate=1.0)
    for round_ in range(3):
        checked.clear()
        assert monitor.sample("n", ask(f"question {round_}"), "x")
        assert checked.wait(5)
        assert monitor.wait_idle(5)
        monitor.close(timeout=5)
        assert monitor._worker is not None
        assert not monitor._worker.is_alive()
    assert monitor.metrics()["n"].checks == 3
