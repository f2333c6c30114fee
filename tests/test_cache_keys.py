"""A call's cache keys are computed once: the Guard's lookup computes them and hands them to
the store after a miss, which files the answer under them, and only while the call still
asks what was looked up; ``keys=`` does the same for direct users of the cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk._core.opening import _clamped
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.cache import ResponseCache, core
from llmguard_sdk.cache.keys import CacheKeys, request_keys
from llmguard_sdk.context import Scope
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.testing import FakeProvider

ANSWER = ChatResponse(text="Use the link in the email.", finish_reason="stop")
QUESTION = "How do I reset my password on the app?"


def ask(text: str, **fields: object) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], **fields)  # type: ignore[arg-type]


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[ChatRequest]:
    """The requests whose keys the cache computes (the real computation, counted)."""
    seen: list[ChatRequest] = []
    assert core.request_keys is request_keys  # type: ignore[attr-defined]  # (imported there)

    def counted(request: ChatRequest, partition: tuple[str, ...]) -> CacheKeys:
        seen.append(request)
        return request_keys(request, partition)

    monkeypatch.setattr(core, "request_keys", counted)
    return seen


def test_the_keys_module_keeps_no_state_between_calls() -> None:
    from llmguard_sdk.cache import keys

    assert not [name for name in vars(keys) if name.startswith("_LAST")]
    cache = ResponseCache()
    request = ask(QUESTION)
    assert cache.keys(request) == cache.keys(request)
    assert cache.keys(request) is not cache.keys(request)  # computed each time


def test_another_partition_gets_its_own_keys() -> None:
    cache = ResponseCache()
    versioned = ResponseCache(version="2")
    request = ask(QUESTION)
    base = cache.keys(request, Scope(tenant="acme"))
    assert cache.keys(request, Scope(tenant="globex")).partition != base.partition
    assert cache.keys(request, Scope(tenant="acme"), tags=["admin"]).partition != base.partition
    assert versioned.keys(request, Scope(tenant="acme")).partition != base.partition
    assert cache.keys(request, Scope(tenant="acme")) == base


def test_a_lookup_and_store_given_the_call_keys_compute_them_once(
    computed: list[ChatRequest],
) -> None:
    cache = ResponseCache()
    request = ask(QUESTION)
    keys = cache.call_keys(request)
    assert keys is not None
    assert cache.lookup(request, keys=keys) is None
    assert cache.store(request, ANSWER, keys=keys)
    assert len(computed) == 1
    hit = cache.lookup(ask(QUESTION))  # without keys: computed, and they are the same
    assert hit is not None
    assert (hit.kind, hit.entry_id) == ("exact", keys.exact)
    assert len(computed) == 2
    assert cache.store(ask("How do I close my account?"), ANSWER)  # without keys: computed
    assert len(computed) == 3


def test_given_keys_do_not_make_a_call_cacheable() -> None:
    cache = ResponseCache()
    request = ask(QUESTION)
    keys = cache.keys(request)
    assert cache.call_keys(request, cacheable=False, keys=keys) is None
    assert not cache.store(request, ANSWER, cacheable=False, keys=keys)
    sampled = ask(QUESTION, temperature=0.7)
    assert not cache.store(sampled, ANSWER, keys=keys)
    assert cache.lookup(request) is None


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_a_guarded_call_computes_its_keys_once_and_stores_under_them(
    mode: str,
    computed: list[ChatRequest],
    fake: FakeProvider,
    make_guard: Callable[..., Guard],
) -> None:
    cache = ResponseCache(semantic=False)  # a hit below is an exact one
    guard = make_guard(fake, cache=cache)

    def call(text: str, **options: Any) -> str:
        if mode == "sync":
            return guard.chat(chat(text), **options).route or ""
        if mode == "async":
            return anyio.run(lambda: guard.achat(chat(text), **options)).route or ""
        with guard.chat(chat(text), stream=True, **options) as stream:
            list(stream)
        return stream.response.route or ""

    assert call(QUESTION) == "primary"
    assert len(computed) == 1  # the store took the lookup's keys
    # stored under the exact key of the request the lookup keyed (the route's model named)
    assert cache._backend.get(cache.keys(ask(QUESTION, model="fake-model")).exact) is not None
    before = len(computed)
    assert call(QUESTION) == "cache"
    # a request that differs only in a part of its key is another entry
    assert call(QUESTION, seed=7) == "primary"
    assert call(QUESTION, seed=7) == "cache"
    assert call("How do I close my account?") == "primary"
    assert fake.stats.requests == 3
    assert len(computed) == before + 4  # once per call: a hit's lookup, a miss's and its store


def test_concurrent_calls_store_their_own_answers(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    guard = make_guard(fake, cache=ResponseCache(semantic=False))
    questions = [f"What is the status of order {n}?" for n in range(100, 108)]
    answers: dict[str, str] = {}

    async def one(text: str) -> None:
        answers[text] = (await guard.achat(chat(text))).text or ""

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for text in questions:
                group.start_soon(one, text)

    anyio.run(main)
    assert len(set(answers.values())) == len(questions)
    for text in questions:
        again = guard.chat(chat(text))
        assert (again.route, again.text) == ("cache", answers[text])
    assert fake.stats.requests == len(questions)


def test_an_answer_within_a_budget_clamp_is_filed_under_what_was_asked(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    """A spend budget lowers ``max_tokens`` in the opening batch, after the lookup keyed
    the request: an answer that finished within the lower bound answers what the caller
    asked, so it is filed under the lookup's keys and the same call hits it next time."""
    cache = ResponseCache(semantic=False)
    prices = PriceTable.default_table().with_prices(
        {"fake-model": Price(input=100.0, output=200.0)}
    )
    budgets = Budgets([Budget(limit_usd=0.01)], prices=prices, clamp_max_tokens=True)
    guard = make_guard(fake, cache=cache, budgets=budgets)
    assert guard.chat(chat(QUESTION), max_tokens=1000).route == "primary"
    sent = fake.requests[-1].body["max_tokens"]
    assert sent < 1000
    asked = ask(QUESTION, model="fake-model", max_tokens=1000)
    clamped = asked.model_copy(update={"max_tokens": sent})
    assert cache._backend.get(cache.keys(asked).exact) is not None
    assert cache._backend.get(cache.keys(clamped).exact) is None
    again = guard.chat(chat(QUESTION), max_tokens=1000)
    assert again.route == "cache"
    assert len(fake.requests) == 1


def test_a_request_changed_otherwise_after_the_lookup_is_keyed_again() -> None:
    source = ask(QUESTION, model="fake-model", max_tokens=1000)
    assert _clamped(source.model_copy(update={"max_tokens": 10}), source)
    assert _clamped(
        source.model_copy(update={"max_tokens": 10}), source.model_copy(update={"max_tokens": None})
    )
    assert not _clamped(source, source)  # not lowered: the same object decides that
    assert not _clamped(source.model_copy(update={"max_tokens": 2000}), source)
    assert not _clamped(source.model_copy(update={"max_tokens": 10, "seed": 7}), source)


def _parts(*parts: dict[str, Any], role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": list(parts)}


def test_a_text_and_one_text_part_of_it_are_one_request(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    """``"content": "hi"`` and ``"content": [{"type": "text", "text": "hi"}]`` are one
    request to the APIs, but two entries: the second was asked of the provider again. The
    system prompt's and the last turn's alike; a part with anything else, or more parts,
    stay another request."""
    text = {"type": "text", "text": QUESTION}
    system = {"type": "text", "text": "Be brief."}
    plain = [{"role": "system", "content": "Be brief."}, *chat(QUESTION)]
    as_parts = [_parts(system, role="system"), _parts(text)]
    keys = [
        request_keys(ChatRequest(messages=messages), ("p",))  # type: ignore[arg-type]
        for messages in (plain, as_parts)
    ]
    assert keys[0] == keys[1]
    others = [
        [_parts(system, role="system"), _parts(text, text)],
        [_parts(system, role="system"), _parts({**text, "cache_control": {"type": "ephemeral"}})],
    ]
    for messages in others:
        other = request_keys(ChatRequest(messages=messages), ("p",))  # type: ignore[arg-type]
        assert other.exact != keys[0].exact
    cache = ResponseCache(redis_url, key_prefix=redis_prefix)
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    guard = Guard([provider], cache=cache, environ={})
    try:
        assert guard.chat(plain).route == "primary"
        assert guard.chat(as_parts).route == "cache"
        assert fake.stats.requests == 1
    finally:
        cache.clear()
        guard.close()
