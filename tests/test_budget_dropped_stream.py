"""A stream whose connection drops after its provider's HTTP 200, before any content and with
no server-side tools, is charged its prompt: the provider took the request and bills the
input it processed (a stream the caller closed, or the deadline cut, already was; one cut
after server-side tools was charged their fees and the prompt). A request that never reached
the provider (the connection refused) costs nothing, nor does a stream its provider failed
with an error event of its own. Chat completions, Claude's Messages and OpenAI's Responses
streams, sync and async; a hedged call's first leg dropped so. Real Redis budgets, the
loopback FakeProvider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import ChatRequest, Guard, LLMGuardError, Message, Usage
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.providers import (
    AnthropicProvider,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    Provider,
)
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

from .conftest import MODES, USER

PRICES = PriceTable.default_table().with_prices(
    {
        "fake-model": Price(input=100.0, output=200.0),
        "backup-model": Price(input=10.0, output=20.0),
    }
)
# the prompt as the budget estimates it (the fake provider counts words): $0.0002 and more
PROMPT_USD = count_request_tokens([Message(**m) for m in USER]).tokens * 100 / 1e6
APIS = ["chat", "messages", "responses"]
SEARCH: list[dict[str, Any]] = [{"type": "web_search"}]  # (a Responses web search tool)
SEARCH_USD = 0.01  # a web search, the default fee (the fake models' prices name none)


def _route(api: str, fake: FakeProvider) -> Provider:
    if api == "messages":
        return AnthropicProvider(fake.url, model=fake.model, api_key="x", name=fake.name)
    if api == "responses":
        return OpenAIResponsesProvider(fake.base_url, model=fake.model, api_key="x", name=fake.name)
    return OpenAICompatibleProvider(fake.base_url, model=fake.model, name=fake.name)


def _guard(routes: list[Provider], redis: tuple[str, str], **options: object) -> Guard:
    """A Guard on ``routes`` with a $1 budget in Redis, not retrying (one attempt a route)."""
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    store, prefix = redis
    return Guard(
        routes,
        budgets=budgets,
        environ={},
        store=store,
        key_prefix=prefix,
        retry=None,
        **options,  # type: ignore[arg-type]
    )


def _streamed(guard: Guard, mode: str, **options: Any) -> str:
    """One streamed call of :data:`USER` (``options``: more of the request) read to its end
    (its failure raised): its text."""
    if mode == "sync":
        with guard.chat(USER, stream=True, max_tokens=20, **options) as chunks:
            return "".join(chunk.text for chunk in chunks)

    async def read() -> str:
        try:
            stream = await guard.achat(USER, stream=True, max_tokens=20, **options)
            async with stream:
                return "".join([chunk.text async for chunk in stream])
        finally:
            await guard.aclose()

    return anyio.run(read)


def _charged(guard: Guard) -> float:
    """What the budget charged; nothing is left held."""
    (row,) = guard.budget_status()
    assert row["held_usd"] == 0
    return float(row["spent_usd"])


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(model="fake-model", name="primary") as server:
        yield server


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_a_stream_dropped_before_content_is_charged_its_prompt(
    fake: FakeProvider, redis_url: str, redis_prefix: str, api: str, mode: str
) -> None:
    """The connection closes mid-event after the opening events (before: $0 charged); no
    usage came (Claude's ``message_start`` without one): the prompt as the hold counts it."""
    fake.script(Fault(cut_stream_after=0, omit_usage=True))
    with _guard([_route(api, fake)], (redis_url, redis_prefix)) as guard:
        with pytest.raises(LLMGuardError):
            _streamed(guard, mode)
        assert len(fake.requests) == 1  # (it reached the provider)
        assert _charged(guard) == pytest.approx(PROMPT_USD)


@pytest.mark.parametrize("mode", MODES)
def test_a_dropped_stream_is_charged_the_input_its_provider_reported(
    fake: FakeProvider, redis_url: str, redis_prefix: str, mode: str
) -> None:
    """Claude's ``message_start`` said the prompt's input tokens before the stream dropped:
    charged that count (the fake counts words), not the SDK's estimate ($0.0008 before)."""
    fake.script(None, Fault(cut_stream_after=0))
    with _guard([_route("messages", fake)], (redis_url, redis_prefix)) as guard:
        with guard.chat(USER, stream=True, max_tokens=20) as chunks:  # (its count learnt)
            list(chunks)
        assert chunks.response.usage is not None
        reported = chunks.response.usage.input_tokens
        assert reported * 100 / 1e6 != pytest.approx(PROMPT_USD)  # (they differ)
        before = _charged(guard)
        with pytest.raises(LLMGuardError):
            _streamed(guard, mode)
        assert _charged(guard) - before == pytest.approx(reported * 100 / 1e6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_a_stream_whose_connection_was_refused_costs_nothing(
    redis_url: str, redis_prefix: str, api: str, mode: str
) -> None:
    """The route's port refuses the connection: the request never reached a provider."""
    dead = FakeProvider(model="fake-model", name="primary")
    dead.start()
    dead.stop()
    with _guard([_route(api, dead)], (redis_url, redis_prefix)) as guard:
        with pytest.raises(LLMGuardError):
            _streamed(guard, mode)
        assert _charged(guard) == 0


@pytest.mark.parametrize("api", APIS)
def test_a_stream_failed_by_its_providers_error_event_costs_nothing(
    fake: FakeProvider, redis_url: str, redis_prefix: str, api: str
) -> None:
    """The provider's own error event (its server error, Claude's overload) before any
    content: the provider says it failed the request; nothing is charged."""
    fake.script(Fault(stream_error_after=0))
    with _guard([_route(api, fake)], (redis_url, redis_prefix)) as guard:
        with pytest.raises(LLMGuardError):
            _streamed(guard, "sync")
        assert _charged(guard) == 0


@pytest.mark.parametrize("api", APIS)
def test_a_hedged_stream_whose_first_leg_dropped_pays_for_its_prompt(
    fake: FakeProvider, redis_url: str, redis_prefix: str, api: str
) -> None:
    """The first leg's stream drops before content; the second leg serves the call: both
    prompts are charged (before: the second leg's answer alone), the first's as its provider
    reported it where it did (Claude's ``message_start``: the fake counts words)."""
    fake.script(Fault(cut_stream_after=0))
    with FakeProvider(model="backup-model", name="backup") as backup:
        routes = [_route(api, fake), _route(api, backup)]
        with _guard(routes, (redis_url, redis_prefix), hedge_after=5.0, timeout=10) as guard:
            with guard.chat(USER, stream=True, max_tokens=20) as chunks:
                assert "".join(chunk.text for chunk in chunks)
            response = chunks.response
            assert response.route == "backup"
            assert response.usage is not None  # (the same fake's count of the same prompt)
            first = response.usage.input_tokens * 100 / 1e6 if api == "messages" else PROMPT_USD
            assert response.cost_usd == pytest.approx(_tokens_usd(response.usage) + first)
            assert _charged(guard) == pytest.approx(response.cost_usd)


def test_a_hedged_leg_dropped_after_a_search_pays_for_it(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    """The first leg, a Responses stream, showed its ``web_search_call`` item and dropped
    before content; the second leg serves the call: the first is charged its prompt and its
    search ($0.01 a search; before: its prompt alone)."""
    fake.script(Fault(cut_stream_after=0))
    with FakeProvider(model="backup-model", name="backup") as backup:
        routes = [_route("responses", fake), _route("responses", backup)]
        with _guard(routes, (redis_url, redis_prefix), hedge_after=5.0, timeout=10) as guard:
            with guard.chat(USER, stream=True, max_tokens=20, tools=SEARCH) as chunks:
                assert "".join(chunk.text for chunk in chunks)
            response = chunks.response
            assert response.route == "backup"
            assert response.usage is not None
            assert response.usage.web_search_requests == 1  # (the backup's own: $0.01)
            asked = ChatRequest.model_validate({"messages": USER, "tools": SEARCH})
            prompt = count_request_tokens(asked).tokens
            first = prompt * 100 / 1e6 + SEARCH_USD
            won = _tokens_usd(response.usage) + SEARCH_USD
            assert response.cost_usd == pytest.approx(won + first)
            assert _charged(guard) == pytest.approx(response.cost_usd)


@pytest.mark.parametrize("mode", MODES)
def test_hedged_legs_timed_out_after_a_search_pay_for_it(
    fake: FakeProvider, redis_url: str, redis_prefix: str, mode: str
) -> None:
    """Both legs, Responses streams, showed their ``web_search_call`` items and stalled
    until the call's deadline: each is charged its prompt and its search (before: its
    prompt alone)."""
    fake.always(Fault(first_token_delay=30))
    with FakeProvider(model="backup-model", name="backup") as backup:
        backup.always(Fault(first_token_delay=30))
        routes = [_route("responses", fake), _route("responses", backup)]
        with _guard(routes, (redis_url, redis_prefix), hedge_after=0.2, timeout=2) as guard:
            with pytest.raises(LLMGuardError):
                _streamed(guard, mode, tools=SEARCH)
            asked = ChatRequest.model_validate({"messages": USER, "tools": SEARCH})
            prompt = count_request_tokens(asked).tokens
            assert _charged(guard) == pytest.approx(prompt * 110 / 1e6 + 2 * SEARCH_USD)


def _tokens_usd(usage: Usage | None) -> float:
    """What ``usage`` costs on the backup's model."""
    assert usage is not None
    return (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
