"""A background re-check of the false-hit monitor that got no answer of the model to compare
(the Guard it asks answered with its degraded text during an outage, or from the cache)
said nothing about the cached answer: it counted as a verdict, so an outage of the
provider stopped the namespace's semantic hits, and re-checks answered from the cache
held the estimate at 0."""

from __future__ import annotations

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.cache import FalseHitMonitor, ResponseCache
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault

QUESTION = "How do I configure the printer?"
PARAPHRASE = "How can I configure the printer?"


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="fake-model")


def _checked(ask_guard: Guard, *, cacheable: bool = True) -> FalseHitMonitor:
    """A monitor asking ``ask_guard``, after three lookups of a paraphrase in a cache it
    watches (semantic hits, each checked)."""

    def ask(request: ChatRequest) -> ChatResponse:
        return ask_guard.chat(request=request, cacheable=cacheable)

    monitor = FalseHitMonitor(
        ask, sample_rate=1.0, window=3, min_checks=3, max_raise=0.0, clock=lambda: 0.0
    )
    cache = ResponseCache(namespace="n", monitor=monitor)
    try:
        cache.store(_ask(QUESTION), ChatResponse(text="Open the printer's settings page.",
                                                 finish_reason="stop"))  # fmt: skip
        for _ in range(3):
            cache.lookup(_ask(PARAPHRASE))  # (None once the monitor stopped the hits)
            assert monitor.wait_idle(10)
        assert cache.stats.semantic_hits + cache.stats.monitor_refusals == 3
    finally:
        cache.close()
    return monitor


def test_a_degraded_answer_to_a_re_check_is_no_verdict() -> None:
    with FakeProvider(model="fake-model") as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="fake-model")
        guard = Guard([provider], degraded="Answers are limited right now.", breaker=None,
                      environ={})  # fmt: skip
        fake.always(Fault(status=503))
        try:
            with waits_off():
                monitor = _checked(guard, cacheable=False)
        finally:
            guard.close()
    state = monitor.metrics()["n"]
    assert (state.verdicts, state.checks) == (0, 0)  # was (0, 3): 3 wrong, acted on
    assert monitor.serving("n")  # was False: the outage stopped the semantic hits


def test_a_re_check_answered_from_the_cache_is_no_verdict() -> None:
    with FakeProvider(model="fake-model") as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="fake-model")
        guard = Guard([provider], cache=True, breaker=None, environ={})
        try:
            guard.chat(request=_ask(PARAPHRASE))  # the Guard's own cache holds the question
            monitor = _checked(guard)
        finally:
            guard.close()
    state = monitor.metrics()["n"]
    assert (state.verdicts, state.checks) == (0, 0)  # was (0, 3): 3 verdicts on the cached answer
