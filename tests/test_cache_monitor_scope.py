"""The false-hit monitor's background re-check ran outside the scope of the lookup whose hit
it checks (its worker thread has no scope): a Guard's ``chat`` given as ``ask`` made each
re-check a call of no tenant, past the tenant's budget and rate limits and missing from its
spend. ``ask`` runs in the lookup's scope now, given or set by :func:`scoped`."""

from __future__ import annotations

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.cache import FalseHitMonitor, ResponseCache
from llmguard_sdk.context import Scope, current_scope, scoped
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.testing import FakeProvider


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="fake-model")


def test_a_re_check_is_asked_in_the_scope_of_the_hit_it_checks() -> None:
    asked_in: list[tuple[str | None, str | None]] = []
    with FakeProvider(model="fake-model") as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="fake-model")
        guard = Guard([provider], breaker=None, environ={})

        def ask(request: ChatRequest) -> ChatResponse:
            scope = current_scope()
            asked_in.append((scope.tenant, scope.feature))
            return guard.chat(request=request, cacheable=False)

        monitor = FalseHitMonitor(ask, sample_rate=1.0, clock=lambda: 0.0)
        cache = ResponseCache(monitor=monitor)
        answer = ChatResponse(text="Open the settings page.", finish_reason="stop")
        try:
            acme = Scope(tenant="acme", feature="support")
            cache.store(_ask("How do I configure the printer?"), answer, acme)
            assert cache.lookup(_ask("How can I configure the printer?"), acme) is not None
            assert monitor.wait_idle(10)
            with scoped(tenant="globex"):
                cache.store(_ask("How do I reset the router?"), answer)
                assert cache.lookup(_ask("How can I reset the router?")) is not None
            assert monitor.wait_idle(10)
        finally:
            cache.close()
            guard.close()
    assert asked_in == [("acme", "support"), ("globex", None)]  # was [(None, None)] * 2
    assert fake.stats.requests == 2
