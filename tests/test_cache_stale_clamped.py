"""Stale-if-error under ``Budgets(clamp_max_tokens=True)``.

A budget that lowers a call's ``max_tokens`` (in the opening batch, or when it tops the hold
up before a retry) files the answer under the caller's keys, the ones the lookup computed
(``CallKeys``), and fresh hits found it; but the stale lookup after every route failed, and
the one before a local route that stands in for a remote one, keyed the *lowered* request
and never found the expired answer: the call failed (or went to the small local model)
instead of being served the stale answer. Those lookups use the call's keys now.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmguard_sdk import ChatRequest, ChatResponse, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.retry import RetryPolicy, waits_off
from llmguard_sdk.testing import FakeProvider, Fault

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
QUESTION = "How do I reset my password on the mobile app?"
USER = [{"role": "user", "content": QUESTION}]
TIGHT = Budget(limit_usd=0.01)  # room for a few dozen output tokens: 1000 are clamped


@pytest.fixture(params=["memory", "redis"])
def cache(request: pytest.FixtureRequest) -> Iterator[ResponseCache]:
    """A cache whose entries are fresh 0.5 s, then stale for a minute."""
    options: dict[str, Any] = {"ttl": 0.5, "stale_ttl": 60, "semantic": False}
    if request.param == "redis":
        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        options.update(store=url, key_prefix=prefix)
    made = ResponseCache(**options)
    yield made
    made.close()


def _call(guard: Guard, kind: str, **params: Any) -> ChatResponse:
    if kind == "complete":
        answer: ChatResponse = guard.chat(USER, **params)
        return answer
    with guard.chat(USER, stream=True, **params) as stream:
        list(stream)
    streamed: ChatResponse = stream.response
    return streamed


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("kind", ["complete", "stream"])
def test_an_expired_answer_is_served_stale_when_the_budget_lowered_max_tokens(
    fake: FakeProvider, make_guard: MakeGuard, cache: ResponseCache, kind: str, limit: str
) -> None:
    budgets = Budgets([TIGHT], prices=PRICES, clamp_max_tokens=True)
    guard = make_guard(fake, budgets=budgets, cache=cache, breaker=None)
    first = _call(guard, kind, **{limit: 1000})
    assert first.route == "primary"
    assert fake.requests[-1].body[limit] < 1000  # lowered by the budget
    again = _call(guard, kind, **{limit: 1000})
    assert (again.route, again.metadata["cache"]) == ("cache", "exact")
    time.sleep(0.6)  # (the entry expires: only a stale-if-error read finds it)
    fake.always(Fault(status=503))
    with waits_off():
        stale = _call(guard, kind, **{limit: 1000})
    assert (stale.route, stale.metadata["cache"], stale.text) == ("cache", "stale", first.text)
    assert fake.stats.requests == 1 + 3  # (the outage's attempts)


def test_the_stale_answer_before_a_local_stand_in_is_found_when_max_tokens_was_lowered(
    cache: ResponseCache,
) -> None:
    """A local route standing in for the remote primary comes after the primary's own
    expired answer (stale-if-error), clamped or not."""
    with (
        FakeProvider(model="fake-model", name="primary") as primary,
        FakeProvider(model="fake-model", name="local") as local,
    ):
        remote = OpenAICompatibleProvider(primary.base_url, model="fake-model", name="primary")
        stand_in = OpenAICompatibleProvider(local.base_url, model="fake-model", name="local")
        stand_in.is_local = True  # type: ignore[attr-defined]
        budgets = Budgets([TIGHT], prices=PRICES, clamp_max_tokens=True)
        guard = Guard([remote, stand_in], cache=cache, budgets=budgets, breaker=None, environ={})
        try:
            fresh = guard.chat(USER, max_tokens=1000)
            assert primary.requests[-1].body["max_tokens"] < 1000
            time.sleep(0.6)
            primary.always(Fault(status=503))
            with waits_off():
                during = guard.chat(USER, max_tokens=1000)
        finally:
            guard.close()
        assert (during.route, during.metadata.get("cache")) == ("cache", "stale")
        assert during.text == fresh.text
        assert local.stats.requests == 0


def test_the_stale_answer_is_found_after_a_retrys_top_up_lowered_max_tokens(
    fake: FakeProvider, make_guard: MakeGuard, cache: ResponseCache
) -> None:
    """The call's hold covers its first attempt; that attempt times out after its request
    went out (billed its prompt), so the retry's top-up lowers ``max_tokens``; the retry
    fails too, and the expired answer to what the caller asked is served."""
    asked = ChatRequest(messages=USER, model="fake-model", max_tokens=10)  # type: ignore[arg-type]
    assert cache.store(asked, ChatResponse(text="the stored answer", finish_reason="stop"))
    budgets = Budgets(
        [Budget(limit_usd=_tight_for_a_retry(asked))],
        prices=PRICES,
        clamp_max_tokens=True,
        min_output_tokens=2,
    )
    guard = make_guard(
        fake,
        budgets=budgets,
        cache=cache,
        breaker=None,
        retry=RetryPolicy(attempts=2, base=0.01, cap=0.05),
        attempt_timeout=1.0,
        timeout=20,
    )
    time.sleep(0.6)
    fake.script(Fault(latency=3.0), Fault(status=503))
    stale = guard.chat(USER, max_tokens=10)
    assert [r.body["max_tokens"] for r in fake.requests] == [10, pytest.approx(5, abs=3)]
    assert (stale.route, stale.metadata["cache"], stale.text) == (
        "cache",
        "stale",
        "the stored answer",
    )


def _tight_for_a_retry(request: ChatRequest) -> float:
    """A limit with room for one attempt (the prompt and 10 output tokens) and a second
    prompt, not the second attempt's 10 output tokens."""
    from llmguard_sdk.tokens import count_request_tokens

    prompt_usd = count_request_tokens(request).tokens * 100 / 1e6
    return prompt_usd * 1.1 + 10 * 200 / 1e6 + prompt_usd / 2
