"""``client.messages.count_tokens(...)`` (``POST /v1/messages/count_tokens``) through the Messages
seam: the Guard's own count of the request as the route the call would take counts it,
without a call to any provider; an estimate where the route's model has no tokenizer here
(Claude's), and says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    BreakerPolicy,
    Budget,
    Guard,
    OpenAICompatibleProvider,
    RateLimit,
)
from llmguard_sdk.client import anthropic_client, async_anthropic_client
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

from .conftest import USER, require_module

MakeGuard = Callable[..., Guard]
SENT: Any = [{"role": "system", "content": "be brief"}, *USER]  # as the seam sends it


@pytest.fixture
def anthropic() -> Any:
    return require_module("anthropic", "anthropic is a dev dependency")


def _gpt(fake: FakeProvider, **options: Any) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, model="gpt-4", name="gpt", **options)


def _claude(fake: FakeProvider) -> AnthropicProvider:
    return AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude")


def test_count_tokens_counts_as_the_route_does(anthropic: Any, fake: FakeProvider) -> None:
    # the seam answered 404 (NotFoundError): count_tokens did not work through a Guard
    guard = Guard(_gpt(fake), environ={})
    raw = anthropic_client(guard).messages.with_raw_response.count_tokens(
        model="claude-anything", system="be brief", messages=USER
    )
    counted = raw.parse()
    assert isinstance(counted, anthropic.types.MessageTokensCount)
    assert counted.input_tokens == count_request_tokens(SENT, model="gpt-4").tokens
    assert raw.headers["x-llmguard-route"] == "gpt"
    assert raw.headers["x-llmguard-estimated"] == "false"  # gpt-4's own encoding
    assert fake.requests == []  # counted here: no provider asked
    guard.close()


def test_a_claude_route_s_count_is_an_estimate(anthropic: Any, fake: FakeProvider) -> None:
    guard = Guard(_claude(fake), environ={})
    raw = anthropic_client(guard).messages.with_raw_response.count_tokens(
        model="claude-x", system="be brief", messages=USER
    )
    assert raw.parse().input_tokens == count_request_tokens(SENT, model="claude-x").tokens
    assert raw.headers["x-llmguard-estimated"] == "true"
    assert fake.requests == []
    guard.close()


def test_the_count_is_the_route_s_the_call_would_take(
    anthropic: Any, fake: FakeProvider, fake2: FakeProvider
) -> None:
    # the first route's known window cannot hold the request: the call would go to the next
    guard = Guard([_gpt(fake, context_window=8), _claude(fake2)], environ={})
    raw = anthropic_client(guard).messages.with_raw_response.count_tokens(
        model="m", system="be brief", messages=USER
    )
    assert raw.headers["x-llmguard-route"] == "claude"
    assert raw.headers["x-llmguard-estimated"] == "true"
    guard.close()


def test_a_count_over_max_input_tokens_is_a_count(anthropic: Any, fake: FakeProvider) -> None:
    # counting is how a caller learns whether its input fits: not refused as the call is
    guard = Guard(_gpt(fake), max_input_tokens=5, environ={})
    counted = anthropic_client(guard).messages.count_tokens(model="m", messages=USER)
    assert counted.input_tokens > 5
    guard.close()


def test_without_a_model_it_is_the_messages_call_s_error(
    anthropic: Any, fake: FakeProvider
) -> None:
    guard = Guard(OpenAICompatibleProvider(fake.base_url, name="open"), environ={})
    client = anthropic_client(guard)
    with pytest.raises(anthropic.BadRequestError) as created:
        client.messages.create(model=None, max_tokens=10, messages=USER)
    with pytest.raises(anthropic.BadRequestError) as counting:
        client.messages.count_tokens(model=None, messages=USER)
    assert (counting.value.status_code, counting.value.body) == (
        created.value.status_code,
        created.value.body,
    )
    assert "no model" in str(counting.value)
    counted = client.messages.count_tokens(model="gpt-4", messages=USER)  # the request's model
    assert counted.input_tokens == count_request_tokens(USER, model="gpt-4").tokens
    assert fake.requests == []
    guard.close()


def test_the_async_client_counts(anthropic: Any, fake: FakeProvider) -> None:
    guard = Guard(_gpt(fake), environ={})

    async def run() -> int:
        counted = await async_anthropic_client(guard).messages.count_tokens(
            model="m", messages=USER
        )
        await guard.aclose()
        return int(counted.input_tokens)

    assert anyio.run(run) == count_request_tokens(USER, model="gpt-4").tokens


@pytest.mark.parametrize("how", ["isolated", "opened"])
def test_a_count_skips_a_route_whose_breaker_is_open(
    anthropic: Any, fake: FakeProvider, fake2: FakeProvider, how: str
) -> None:
    # the count named (and counted as) the first route, which the call would not take
    fake.always(Fault(status=500))
    guard = Guard(
        [_gpt(fake), _claude(fake2)],
        environ={},
        retry=None,
        breaker=BreakerPolicy(minimum_calls=1, failure_rate=0.5),
    )
    assert guard.breakers is not None
    if how == "isolated":
        guard.breakers.isolate("gpt")
    else:
        guard.chat(USER)  # the gpt route fails and its breaker opens; claude answers
    assert guard.breakers.state("gpt") in ("open", "isolated")
    raw = anthropic_client(guard).messages.with_raw_response.count_tokens(
        model="m", system="be brief", messages=USER
    )
    assert raw.headers["x-llmguard-route"] == "claude"
    assert raw.parse().input_tokens == count_request_tokens(SENT, model="claude-x").tokens
    guard.breakers.reset("gpt")
    again = anthropic_client(guard).messages.with_raw_response.count_tokens(
        model="m", system="be brief", messages=USER
    )
    assert again.headers["x-llmguard-route"] == "gpt"
    guard.close()


def test_a_count_when_every_breaker_is_open_is_the_first_route_s(
    anthropic: Any, fake: FakeProvider, fake2: FakeProvider
) -> None:
    guard = Guard([_gpt(fake), _claude(fake2)], environ={})
    assert guard.breakers is not None
    guard.breakers.isolate("gpt")
    guard.breakers.isolate("claude")
    raw = anthropic_client(guard).messages.with_raw_response.count_tokens(model="m", messages=USER)
    assert raw.headers["x-llmguard-route"] == "gpt"
    guard.close()


def test_a_count_spends_no_rate_limit_and_no_budget(anthropic: Any, fake: FakeProvider) -> None:
    """Counting is free at Anthropic, and asks no provider here: it takes no request from a
    rate limit and holds no spend, however often a caller counts."""
    limits: Any = {"gpt": RateLimit(rpm=1, batch_headroom=0)}
    # a model the shipped price table knows too (the only one on Python 3.10)
    route = OpenAICompatibleProvider(fake.base_url, model="gpt-4o", name="gpt")
    guard = Guard(route, environ={}, rate_limits=limits, budgets=[Budget(limit_usd=1.0)])
    client = anthropic_client(guard)
    for _ in range(5):
        client.messages.count_tokens(model="m", messages=USER)
    ((row,),) = [guard.budget_status()]
    assert (row["spent_usd"], row["held_usd"]) == (0, 0)
    guard.chat(USER, max_tokens=1, timeout=5)  # the one request a minute, still there
    assert len(fake.requests) == 1
    guard.close()
