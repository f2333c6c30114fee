"""Server-side tools priced per use besides web search, and uses a cut stream showed: OpenAI's
``web_search_preview`` on a non-reasoning model ($25 per 1,000 calls, not the $10 of the
``web_search`` tool), OpenAI's file search calls and Code Interpreter containers, Claude's code
execution sessions (each read from the answer onto the usage, charged in ``cost_usd`` and the
Redis budget's settle, and held before the call), and a Claude stream cut before
``message_delta`` charged the searches its ``server_tool_use`` blocks showed (as a cut
stream's tokens are charged what it delivered)."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.errors import BudgetExceededError, StreamInterruptedError
from llmguard_sdk.models import ChatResponse
from llmguard_sdk.providers import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider, Fault

from .test_budget_tool_fees import USER, _answer, _claude

# token rates of our own; the fees below them: genai-prices' (gpt-4.1, o4-mini: $10 per 1,000
# web searches, $2.50 per 1,000 file searches) or the defaults (a container: $0.03)
PRICES = PriceTable.default_table().with_prices(
    {
        "gpt-4.1": Price(input=2.0, output=8.0),
        "o4-mini": Price(input=1.1, output=4.4),
        "claude-fake": Price(input=3.0, output=15.0),
    }
)
RATES = {"gpt-4.1": (2.0, 8.0), "o4-mini": (1.1, 4.4), "claude-fake": (3.0, 15.0)}
FILES = {"type": "file_search", "vector_store_ids": ["vs_fake"]}
CODE = {"type": "code_interpreter", "container": {"type": "auto"}}
CLAUDE_CODE = {"type": "code_execution_20250825", "name": "code_execution"}


def _guard(route: Any, limit_usd: float, redis: tuple[str, str]) -> Guard:
    budgets = Budgets([Budget(limit_usd=limit_usd)], prices=PRICES)
    return Guard(route, budgets=budgets, environ={}, store=redis[0], key_prefix=redis[1])


def _responses(fake: FakeProvider, model: str) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(fake.base_url, model=model, api_key="x")


def _tokens_usd(answer: ChatResponse, model: str) -> float:
    assert answer.usage is not None
    rate_in, rate_out = RATES[model]
    return (answer.usage.input_tokens * rate_in + answer.usage.output_tokens * rate_out) / 1e6


def _spent(guard: Guard) -> float:
    spent: float = guard.budget_status()[0]["spent_usd"]
    return spent


@pytest.mark.parametrize(
    ("model", "tool", "fee"),
    [
        ("gpt-4.1", "web_search_preview", 0.025),  # non-reasoning: $25 per 1,000 calls
        ("o4-mini", "web_search_preview", 0.01),  # reasoning: $10 per 1,000
        ("gpt-4.1", "web_search", 0.01),  # the web search tool: $10 per 1,000 on any model
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_web_search_fee_follows_the_tool_and_the_model(
    redis_url: str, redis_prefix: str, model: str, tool: str, fee: float, stream: bool
) -> None:
    with (
        FakeProvider(model=model) as fake,
        _guard(_responses(fake, model), 5.0, (redis_url, redis_prefix)) as guard,
    ):
        answer = _answer(guard, stream, tools=[{"type": tool}])
        spent = _spent(guard)
    assert answer.usage is not None
    assert answer.usage.web_search_requests == 1
    assert answer.cost_usd == pytest.approx(_tokens_usd(answer, model) + fee)
    assert spent == pytest.approx(answer.cost_usd, abs=1e-9)


def test_a_preview_search_holds_its_dearer_fee(redis_url: str, redis_prefix: str) -> None:
    """Ten searches held: $0.10 for the web search tool fits a $0.15 budget, $0.25 for the
    preview on gpt-4.1 does not (refused before it goes out)."""
    with (
        FakeProvider(model="gpt-4.1") as fake,
        _guard(_responses(fake, "gpt-4.1"), 0.15, (redis_url, redis_prefix)) as guard,
    ):
        guard.chat(USER, max_tokens=50, tools=[{"type": "web_search"}])
        with pytest.raises(BudgetExceededError):
            guard.chat(USER, max_tokens=50, tools=[{"type": "web_search_preview"}])
        assert fake.stats.requests == 1


@pytest.mark.parametrize("stream", [False, True])
def test_openai_file_search_and_code_interpreter_are_charged(
    redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """A ``file_search_call`` item is a file search ($2.50 per 1,000, genai-prices'), a
    ``code_interpreter_call``'s container a session ($0.03): on the usage, in ``cost_usd``
    and in the Redis budget's spend (the tokens alone before)."""
    with (
        FakeProvider(model="gpt-4.1") as fake,
        _guard(_responses(fake, "gpt-4.1"), 5.0, (redis_url, redis_prefix)) as guard,
    ):
        answer = _answer(guard, stream, tools=[FILES, CODE])
        spent = _spent(guard)
    assert answer.usage is not None
    assert (answer.usage.file_search_calls, answer.usage.code_executions) == (1, 1)
    assert answer.cost_usd == pytest.approx(_tokens_usd(answer, "gpt-4.1") + 0.0025 + 0.03)
    assert spent == pytest.approx(answer.cost_usd, abs=1e-9)


def test_openai_server_tools_are_held(redis_url: str, redis_prefix: str) -> None:
    """A container ($0.03) does not fit a $0.02 budget; ten file searches ($0.025) do not
    either, but a ``max_tool_calls`` of 4 caps them ($0.01); and so the web search's ten."""
    with (
        FakeProvider(model="gpt-4.1") as fake,
        _guard(_responses(fake, "gpt-4.1"), 0.02, (redis_url, redis_prefix)) as guard,
    ):
        for tools in ([CODE], [FILES], [{"type": "web_search"}]):
            with pytest.raises(BudgetExceededError):
                guard.chat(USER, max_tokens=50, tools=tools)
        capped = {"max_tool_calls": 4}
        guard.chat(USER, max_tokens=50, tools=[FILES], extra_body=capped)
        assert fake.stats.requests == 1


@pytest.mark.parametrize("stream", [False, True])
def test_claude_code_execution_is_charged_a_session(
    redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """An answer whose ``server_tool_use`` block ran code: one session, its 5 minutes at
    $0.05 per container-hour, on the usage, in ``cost_usd`` and in the spend."""
    with (
        FakeProvider(model="claude-fake") as fake,
        _guard(_claude(fake), 5.0, (redis_url, redis_prefix)) as guard,
    ):
        answer = _answer(guard, stream, tools=[CLAUDE_CODE])
        spent = _spent(guard)
    assert answer.usage is not None
    assert answer.usage.code_executions == 1
    assert answer.cost_usd == pytest.approx(_tokens_usd(answer, "claude-fake") + 0.05 / 12)
    assert spent == pytest.approx(answer.cost_usd, abs=1e-9)


def test_a_claude_stream_cut_before_its_usage_is_charged_its_searches(
    redis_url: str, redis_prefix: str
) -> None:
    """Three searches ran (their ``server_tool_use`` blocks came), then the stream was cut
    after some text, before ``message_delta``: the spend counts the three ($0.03) besides
    what it delivered (its tokens alone before)."""
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    with FakeProvider(model="claude-fake") as fake:
        fake.script(Fault(cut_stream_after=2))
        with _guard(_claude(fake), 5.0, (redis_url, redis_prefix)) as guard:
            with pytest.raises(StreamInterruptedError):
                _answer(guard, True, tools=tools)
            spent = _spent(guard)
            held = guard.budget_status()[0]["held_usd"]
    assert 0.03 < spent < 0.031  # (the tokens: under $0.001)
    assert held == 0
