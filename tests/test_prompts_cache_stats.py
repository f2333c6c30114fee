""":class:`PrefixCacheStats` counts the requests that reached a provider: an answer served
from the SDK's response cache (or a degraded answer) used no provider's prefix cache."""

from __future__ import annotations

from collections.abc import Callable

from llmguard_sdk import Guard
from llmguard_sdk.prompts import PrefixCacheStats, PromptBuilder
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault

MakeGuard = Callable[..., Guard]
INSTRUCTIONS = " ".join(["You are the support assistant of a bicycle shop."] * 40)


def test_response_cache_hits_are_no_provider_calls(make_guard: MakeGuard) -> None:
    """Two provider requests and one answer from the response cache counted 3 calls (the
    hit's 0-token usage among them): the hit ratio per call read lower than it was."""
    stats = PrefixCacheStats()
    b = PromptBuilder("support", instructions=INSTRUCTIONS, drift=None)
    with FakeProvider(model="fake-model", name="primary", prefix_cache=True) as api:
        guard = make_guard(api, cache=True, hooks=[stats])
        for question in ("Where is my order?", "Can I return a helmet?", "Where is my order?"):
            guard.chat(request=b.build(question).request(max_tokens=20), feature="support")
        assert len(api.requests) == 2
    support = stats.feature("support")
    assert (support.calls, support.calls_with_hits) == (2, 1)
    assert support.input_tokens == api.stats.input_tokens
    assert support.cached_tokens == api.stats.cached_input_tokens > 0


def test_degraded_answers_are_no_provider_calls(make_guard: MakeGuard) -> None:
    stats = PrefixCacheStats()
    with FakeProvider(model="fake-model", name="primary") as api:
        guard = make_guard(api, hooks=[stats], degraded="Sorry, later.", breaker=None)
        guard.chat([{"role": "user", "content": "hi"}], feature="f")
        api.always(Fault(status=503))
        with waits_off():
            answer = guard.chat([{"role": "user", "content": "hi"}], feature="f")
        assert answer.route == "degraded"
    assert stats.feature("f").calls == 1
