"""A call whose routes all failed looks the cache up twice, the lookup and then the stale
lookup, and the stale one counted the same candidates again: during an outage each call's
guard rejection (and near miss) counted twice in ``stats``. The stale lookup counts its
hit alone (``stale_hits``); the counters of the candidates are the lookup's."""

from __future__ import annotations

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault

STORED = "How do I reset my password on the mobile app?"
OTHER = "How do I reset my password on the mobile app today?"  # a word more: refused
NEAR = "Reset the password on my phone app"  # similarity 0.64: just short of 0.675


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="fake-model")


def test_a_call_in_an_outage_counts_its_candidates_once() -> None:
    with FakeProvider(model="fake-model") as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="fake-model")
        cache = ResponseCache()
        guard = Guard([provider], cache=cache, degraded="Later.", breaker=None, environ={})
        try:
            guard.chat(request=_ask(STORED))
            fake.always(Fault(status=503))
            with waits_off():
                assert guard.chat(request=_ask(OTHER)).route == "degraded"
        finally:
            guard.close()
    assert cache.stats.guard_rejections == {"term": 1}  # was {"term": 2}
    assert cache.stats.misses == 2  # (a lookup a call)


def test_a_stale_lookup_counts_no_near_miss_the_lookup_counted() -> None:
    cache = ResponseCache(ttl=60)
    cache.store(_ask(STORED), ChatResponse(text="Open Settings.", finish_reason="stop"))
    assert cache.lookup(_ask(NEAR)) is None
    assert cache.stats.near_misses == 1
    assert cache.lookup_stale(_ask(NEAR)) is None
    assert cache.stats.near_misses == 1  # was 2
