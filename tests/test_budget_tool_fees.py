"""Server-side tool fees: the web searches a provider runs for a call (Anthropic's
``usage.server_tool_use.web_search_requests``, OpenAI's Responses ``web_search_call`` items,
OpenAI's chat search models) are read onto the usage, priced per search, charged in the
budget's settle and the answer's ``cost_usd``, and held before the call (the searches its
tools allow)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.errors import BudgetExceededError
from llmguard_sdk.models import ChatResponse, Usage
from llmguard_sdk.providers import (
    AnthropicProvider,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
)
from llmguard_sdk.providers.wire import usage_from_payload
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.transport import http_client

from .conftest import require_module

CLAUDE = Price(input=3.0, output=15.0)  # no fee of its own: the default $10 per thousand
PRICES = PriceTable.default_table().with_prices({"claude-fake": CLAUDE})
USER = [{"role": "user", "content": "what is new today?"}]
# OpenAI's chat search models at their token rates (no fee given: their own $25 per thousand)
SEARCH_PRICES = PriceTable.default_table().with_prices(
    {
        "gpt-4o-mini-search-preview": Price(input=0.15, output=0.6),
        "gpt-4o-search-preview": Price(input=2.5, output=10.0),
    }
)


def _search_tool(max_uses: int | None = None) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "web_search_20250305", "name": "web_search"}
    if max_uses is not None:
        tool["max_uses"] = max_uses
    return tool


def test_anthropic_usage_counts_its_web_searches() -> None:
    raw = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 1},
    }
    usage, _ = usage_from_payload(raw)
    assert usage is not None
    assert usage.web_search_requests == 2
    plain, _ = usage_from_payload({**raw, "server_tool_use": None})
    assert plain is not None
    assert plain.web_search_requests == 0
    absurd = {**raw, "server_tool_use": {"web_search_requests": 2**31}}
    assert usage_from_payload(absurd)[0] is None  # (a count read: bounded)


def test_a_price_charges_each_web_search() -> None:
    usage = Usage(input_tokens=1000, output_tokens=100, web_search_requests=3)
    tokens = (1000 * 3.0 + 100 * 15.0) / 1e6
    assert CLAUDE.cost(usage) == pytest.approx(tokens + 3 * 0.01)  # (the default fee)
    own = Price(input=3.0, output=15.0, web_search=0.02)
    assert own.cost(usage) == pytest.approx(tokens + 3 * 0.02)
    assert own.scaled(0.5).web_search == 0.02  # (a batch discount leaves it whole)
    assert own.cost(usage.model_copy(update={"web_search_requests": 0})) == pytest.approx(tokens)
    # with_prices keeps the fee of the price below; the JSON table reads one
    merged = PriceTable({"m": own}).with_prices({"m": Price(input=1.0, output=1.0)})
    assert merged.price("m").web_search == 0.02
    table = PriceTable.from_json(
        {"prices": [{"model": "m", "input": 1.0, "output": 1.0, "web_search": 0.03}]}
    )
    assert table.price("m").web_search == 0.03


def test_the_default_table_prices_web_searches() -> None:
    """genai-prices' ``web_searches_kcount`` ($10 per thousand for Claude and OpenAI's
    models); OpenAI's chat search models at their own $25 per thousand calls."""
    table = PriceTable.default_table()
    day = dt.date(2026, 1, 1)
    if "not installed" in table.version or "not read" in table.version:
        table = SEARCH_PRICES  # (the shipped table alone: the user's prices of the two)
    else:
        assert table.price("claude-sonnet-4-5", provider="anthropic", at=day).web_search == 0.01
        assert table.price("gpt-4.1", provider="openai", at=day).web_search == 0.01
    for model in ("gpt-4o-search-preview", "gpt-4o-mini-search-preview-2025-03-11"):
        assert table.price(model, provider="openai", at=day).search_fee == 0.025
    own = SEARCH_PRICES.with_prices({"gpt-4o-search-preview": Price(1.0, 1.0, web_search=0.03)})
    assert own.price("gpt-4o-search-preview").search_fee == 0.03  # (the user's fee wins)


def _guard(
    route: Any, limit_usd: float, redis: tuple[str, str] | None = None, prices: Any = PRICES
) -> Guard:
    """A Guard on ``route`` with one daily budget (in Redis: ``(url, key prefix)``)."""
    budgets = Budgets([Budget(limit_usd=limit_usd)], prices=prices)
    if redis is None:
        return Guard(route, budgets=budgets, environ={})
    return Guard(route, budgets=budgets, environ={}, store=redis[0], key_prefix=redis[1])


def _claude(fake: FakeProvider) -> AnthropicProvider:
    return AnthropicProvider(fake.url, model="claude-fake", api_key="x")


def _answer(guard: Guard, stream: bool, **request: Any) -> ChatResponse:
    """The answer of one call, whole or streamed (its assembled response)."""
    if not stream:
        answer: ChatResponse = guard.chat(USER, max_tokens=50, **request)
        return answer
    with guard.chat(USER, stream=True, max_tokens=50, **request) as streamed:
        list(streamed)
    assembled: ChatResponse = streamed.response
    return assembled


def _tokens_usd(answer: ChatResponse) -> float:
    assert answer.usage is not None
    return (answer.usage.input_tokens * 3.0 + answer.usage.output_tokens * 15.0) / 1e6


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_web_searches_are_charged_to_a_redis_budget(
    redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """The fake runs the tool's ``max_uses`` searches (Claude's usage shape; a stream's
    ``message_delta`` gives the count): the answer's cost and the Redis budget's settled
    spend count them at $0.01 each (they counted the tokens alone)."""
    with (
        FakeProvider(model="claude-fake") as fake,
        _guard(_claude(fake), 5.0, (redis_url, redis_prefix)) as guard,
    ):
        answer = _answer(guard, stream, tools=[_search_tool(3)])
        spent = guard.budget_status()[0]["spent_usd"]
    assert answer.usage is not None
    assert answer.usage.web_search_requests == 3
    assert answer.cost_usd == pytest.approx(_tokens_usd(answer) + 0.03)
    assert spent == pytest.approx(answer.cost_usd, abs=1e-9)


def test_a_call_that_may_search_holds_its_searches(redis_url: str, redis_prefix: str) -> None:
    """The hold counts the searches the tool allows (``max_uses``, else ten): a budget that
    covers the tokens' worst case but not the searches refuses the call before it goes out."""
    with FakeProvider(model="claude-fake") as fake:
        with _guard(_claude(fake), 0.02, (redis_url, redis_prefix)) as guard:
            guard.chat(USER, max_tokens=50)  # (tokens alone: well under the limit)
            guard.chat(USER, max_tokens=50, tools=[_search_tool(1)])  # one search: fits
            with pytest.raises(BudgetExceededError):
                guard.chat(USER, max_tokens=50, tools=[_search_tool()])  # ten: $0.10
            with pytest.raises(BudgetExceededError):
                guard.chat(USER, max_tokens=50, tools=[_search_tool(5)])
        assert fake.stats.requests == 2


GPT = Price(input=2.0, output=8.0, web_search=0.01)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_web_search_calls_are_charged(
    redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """Each ``web_search_call`` output item of a Responses answer (the fake answers one per
    web search tool, as OpenAI's item; streamed as ``output_item`` events) is a search: on the
    usage, in ``cost_usd`` and in the Redis budget's spend (the tokens alone before)."""
    prices = PriceTable.default_table().with_prices({"gpt-fake": GPT})
    with FakeProvider(model="gpt-fake") as fake:
        route = OpenAIResponsesProvider(fake.base_url, model="gpt-fake", api_key="x")
        tools = [{"type": "web_search"}, {"type": "web_search_preview"}]
        with _guard(route, 5.0, (redis_url, redis_prefix), prices) as guard:
            answer = _answer(guard, stream, tools=tools)
            plain = guard.chat(USER, max_tokens=50)
            spent = guard.budget_status()[0]["spent_usd"]
    assert answer.usage is not None
    assert answer.usage.web_search_requests == 2
    assert plain.usage is not None
    assert plain.usage.web_search_requests == 0
    tokens = (answer.usage.input_tokens * 2.0 + answer.usage.output_tokens * 8.0) / 1e6
    # a web_search_preview tool on a model not of OpenAI's reasoning ones: each search at its
    # $25 per 1,000 (the items do not say which tool ran them)
    assert answer.cost_usd == pytest.approx(tokens + 0.05)
    assert answer.cost_usd is not None
    assert spent == pytest.approx(answer.cost_usd + (plain.cost_usd or 0.0), abs=1e-9)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_search_models_are_charged_their_search(
    redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """OpenAI's chat search models search on every request, at $25 per thousand calls
    (genai-prices prices their tokens only): one search on the usage, in the cost, in the
    spend, and held (a budget below it refuses the call)."""
    model = "gpt-4o-mini-search-preview"
    with FakeProvider(model=model) as fake:
        route = OpenAICompatibleProvider(fake.base_url, model=model, api_key="x")
        with _guard(route, 1.0, (redis_url, redis_prefix), SEARCH_PRICES) as guard:
            answer = _answer(guard, stream, extra_body={"web_search_options": {}})
            spent = guard.budget_status()[0]["spent_usd"]
    assert answer.usage is not None
    assert answer.usage.web_search_requests == 1
    tokens = (answer.usage.input_tokens * 0.15 + answer.usage.output_tokens * 0.6) / 1e6
    assert answer.cost_usd == pytest.approx(tokens + 0.025)
    assert spent == pytest.approx(answer.cost_usd, abs=1e-9)


def test_a_chat_search_model_holds_its_search(redis_url: str, redis_prefix: str) -> None:
    model = "gpt-4o-search-preview"
    with FakeProvider(model=model) as fake:
        route = OpenAICompatibleProvider(fake.base_url, model=model, api_key="x")
        guard = _guard(route, 0.02, (redis_url, redis_prefix), SEARCH_PRICES)
        with guard, pytest.raises(BudgetExceededError):
            guard.chat(USER, max_tokens=50)  # its tokens fit; its $0.025 search does not
    assert fake.stats.requests == 0


def test_the_drop_in_anthropic_client_sees_the_searches() -> None:
    """``anthropic.Anthropic(http_client=...)`` through the Guard: the message's
    ``usage.server_tool_use.web_search_requests``, whole and streamed (it was left out)."""
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    with FakeProvider(model="claude-fake") as fake, _guard(_claude(fake), 5.0) as guard:
        sdk = anthropic.Anthropic(
            api_key="x", base_url="http://guard.test", http_client=http_client(guard)
        )
        ask: dict[str, Any] = {
            "model": "claude-fake",
            "max_tokens": 50,
            "messages": USER,
            "tools": [_search_tool(2)],
        }
        message = sdk.messages.create(**ask)
        assert message.usage.server_tool_use.web_search_requests == 2
        with sdk.messages.stream(**ask) as stream:
            final = stream.get_final_message()
        assert final.usage.server_tool_use.web_search_requests == 2
