"""A call's cache keys are computed once: the store after a missed lookup reuses the
lookup's keys, and only for the same request in the same partition."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable

import anyio
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.cache import ResponseCache, keys
from llmguard_sdk.cache.keys import CacheKeys
from llmguard_sdk.context import Scope
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.testing import FakeProvider

ANSWER = ChatResponse(text="Use the link in the email.", finish_reason="stop")


def ask(text: str, **fields: object) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], **fields)  # type: ignore[arg-type]


def fresh(cache: ResponseCache, request: ChatRequest, scope: Scope | None = None) -> CacheKeys:
    """The keys as a context that computed nothing before computes them."""
    return contextvars.Context().run(cache.keys, request, scope)


def test_the_same_request_or_a_copy_of_it_reuses_the_keys() -> None:
    cache = ResponseCache()
    request = ask("how do I reset my password")
    first = cache.keys(request)
    assert cache.keys(request) is first
    copy = request.model_copy(update={"model": "gpt-x"})  # as the Guard names its route's model
    keyed = cache.keys(copy)
    assert keyed == fresh(cache, copy)
    assert keyed.exact != first.exact
    assert cache.keys(request.model_copy(update={"model": "gpt-x"})) is keyed


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.model_copy(update={"model": "other"}),
        lambda r: r.model_copy(update={"seed": 7}),
        lambda r: r.model_copy(update={"temperature": 0.0}),
        lambda r: r.model_copy(update={"messages": [*r.messages]}),  # the same messages, equal
        lambda r: r.model_copy(update={"tools": [{"type": "function"}]}),
        lambda r: ask("how do I reset my password", model="gpt-x", seed=True),
        lambda r: ask("how do I change my password", model="gpt-x", seed=1),
    ],
)
def test_another_request_gets_its_own_keys(change: Callable[[ChatRequest], ChatRequest]) -> None:
    cache = ResponseCache()
    request = ask("how do I reset my password", model="gpt-x", seed=1)
    before = cache.keys(request)
    other = change(request)
    assert cache.keys(other) == fresh(cache, other)
    if other.model_dump() != request.model_dump():
        assert cache.keys(other).exact != before.exact


def test_a_message_list_changed_in_place_is_keyed_again() -> None:
    cache = ResponseCache()
    request = ask("what is the capital of France")
    before = cache.keys(request)
    request.messages.append(Message(role="user", content="and of Spain"))
    after = cache.keys(request)
    assert after == fresh(cache, request)
    assert (after.exact, after.query) != (before.exact, before.query)


def test_another_partition_gets_its_own_keys() -> None:
    cache = ResponseCache()
    versioned = ResponseCache(version="2")
    request = ask("how do I reset my password")
    base = cache.keys(request, Scope(tenant="acme"))
    assert cache.keys(request, Scope(tenant="globex")).partition != base.partition
    assert cache.keys(request, Scope(tenant="acme"), tags=["admin"]).partition != base.partition
    assert versioned.keys(request, Scope(tenant="acme")).partition != base.partition
    assert cache.keys(request, Scope(tenant="acme")) == base


def test_threads_keep_their_own_last_keys() -> None:
    cache = ResponseCache()
    request = ask("how do I reset my password")
    mine = cache.keys(request)
    seen: list[CacheKeys] = []
    thread = threading.Thread(target=lambda: seen.append(cache.keys(request)))
    thread.start()
    thread.join()
    assert seen == [mine]
    assert seen[0] is not mine
    assert cache.keys(request) is mine


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[ChatRequest]:
    """The requests whose keys are computed (the real computation, counted)."""
    computed: list[ChatRequest] = []
    real = keys._computed

    def counted(request: ChatRequest, partition: tuple[str, ...]) -> CacheKeys:
        computed.append(request)
        return real(request, partition)

    monkeypatch.setattr(keys, "_computed", counted)
    return computed


def test_a_missed_lookup_and_its_store_compute_the_keys_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = ResponseCache()
    computed = _counting(monkeypatch)
    request = ask("how do I reset my password")
    assert cache.lookup(request) is None
    assert cache.store(request, ANSWER)
    assert len(computed) == 1
    hit = cache.lookup(ask("how do I reset my password"))
    assert hit is not None
    assert hit.kind == "exact"
    assert len(computed) == 2


def test_a_guarded_call_computes_its_keys_once(
    monkeypatch: pytest.MonkeyPatch, fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    guard = make_guard(fake, cache=ResponseCache())
    computed = _counting(monkeypatch)
    question = [{"role": "user", "content": "How do I reset my password on the app?"}]
    assert guard.chat(question).route == "primary"
    assert len(computed) == 1  # the lookup's keys were the store's
    assert guard.chat(question).route == "cache"
    assert anyio.run(guard.achat, [{"role": "user", "content": "How do I close my account?"}])
    assert len(computed) == 3
