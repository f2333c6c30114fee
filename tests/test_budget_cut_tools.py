"""A stream cut after the provider ran server-side tools but before any text is charged
those tools' fees besides its prompt: Claude's ``server_tool_use`` blocks (a web search each,
its ``web_search_tool_result`` come or not), OpenAI Responses' ``web_search_call``,
``file_search_call`` and ``code_interpreter_call`` output items (counted from their
``output_item.added``). The providers bill them once run, whoever cuts the stream: the
connection (dropped mid-event), the call's deadline, or the caller closing it. Real Redis
budgets, the loopback FakeProvider."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.errors import LLMGuardError, ProviderUnavailableError, StreamInterruptedError
from llmguard_sdk.providers import AnthropicProvider, OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider, Fault

from .test_budget_server_tools import CODE, FILES, PRICES
from .test_budget_tool_fees import USER

CLAUDE_SEARCH: list[dict[str, Any]] = [
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
]
# gpt-4.1 (genai-prices' fees): a web search $0.01, a file search $0.0025, a container $0.03
OPENAI_TOOLS: list[dict[str, Any]] = [{"type": "web_search"}, FILES, CODE]
FEES = {"claude-fake": 0.02, "gpt-4.1": 0.01 + 0.0025 + 0.03}
PROMPT_AT_MOST = 0.001  # the prompt's tokens (and no text): well under a tenth of a cent


def _route(fake: FakeProvider, model: str) -> Any:
    if model == "claude-fake":
        return AnthropicProvider(fake.url, model=model, api_key="x")
    return OpenAIResponsesProvider(fake.base_url, model=model, api_key="x")


def _guard(fake: FakeProvider, model: str, redis: tuple[str, str]) -> Guard:
    """A Guard on ``model``'s route with a $5 budget, not retrying (one attempt per call)."""
    budgets = Budgets([Budget(limit_usd=5.0)], prices=PRICES)
    route = _route(fake, model)
    store, prefix = redis
    return Guard(route, budgets=budgets, environ={}, store=store, key_prefix=prefix, retry=None)


def _tools(model: str) -> list[dict[str, Any]]:
    return CLAUDE_SEARCH if model == "claude-fake" else OPENAI_TOOLS


def _charged(guard: Guard) -> tuple[float, float]:
    row = guard.budget_status()[0]
    return float(row["spent_usd"]), float(row["held_usd"])


def _cut_by_server(guard: Guard, model: str, cut: str) -> None:
    """One call whose stream the connection drops (half an event) or the deadline cuts
    (the provider silent), both after the tools' events and before any text."""
    failure = ProviderUnavailableError if cut == "dropped" else LLMGuardError
    timeout = 60.0 if cut == "dropped" else 1.5
    texts: list[str] = []
    with (
        pytest.raises(failure),
        guard.chat(
            USER, stream=True, max_tokens=50, tools=_tools(model), timeout=timeout
        ) as streamed,
    ):
        texts += [chunk.text for chunk in streamed]
    assert not "".join(texts)


@pytest.mark.parametrize("model", ["claude-fake", "gpt-4.1"])
@pytest.mark.parametrize("cut", ["dropped", "deadline"])
def test_a_stream_cut_before_text_is_charged_the_tools_it_ran(
    redis_url: str, redis_prefix: str, model: str, cut: str
) -> None:
    """Claude's two searches ($0.02), or OpenAI's web search, file search and container
    ($0.0425), are charged besides the prompt (before: the prompt alone)."""
    fault = Fault(cut_stream_after=0) if cut == "dropped" else Fault(first_token_delay=30)
    with FakeProvider(model=model) as fake:
        fake.script(fault)
        with _guard(fake, model, (redis_url, redis_prefix)) as guard:
            _cut_by_server(guard, model, cut)
            spent, held = _charged(guard)
    assert FEES[model] < spent < FEES[model] + PROMPT_AT_MOST
    assert held == 0


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["claude-fake", "gpt-4.1"])
async def test_a_stream_closed_before_text_is_charged_the_tools_it_ran(
    redis_url: str, redis_prefix: str, model: str
) -> None:
    """The caller closes the stream (another task, while its reader waits for text after
    the tools' events): charged the tools' fees besides the prompt."""
    with FakeProvider(model=model) as fake:
        fake.script(Fault(first_token_delay=3.0))  # (its handler's wait outlasts the close)
        guard = _guard(fake, model, (redis_url, redis_prefix))
        stream = await guard.achat(USER, stream=True, max_tokens=50, tools=_tools(model))
        first = anyio.Event()

        async def read() -> None:
            async for chunk in stream:
                assert not chunk.text
                first.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            with anyio.fail_after(10):
                await first.wait()
            await anyio.sleep(1.0)  # (the tools' events, sent at once, are read by then)
            await stream.aclose()
        row = (await guard.abudget_status())[0]
        spent, held = float(row["spent_usd"]), float(row["held_usd"])
        await guard.aclose()
    assert FEES[model] < spent < FEES[model] + PROMPT_AT_MOST
    assert held == 0


def test_a_responses_stream_cut_after_text_is_charged_the_tools_it_ran(
    redis_url: str, redis_prefix: str
) -> None:
    """Cut after two pieces of text, before ``response.completed``: the tool call items it
    showed are charged besides its tokens (its tokens alone before)."""
    with FakeProvider(model="gpt-4.1") as fake:
        fake.script(Fault(cut_stream_after=2))
        with _guard(fake, "gpt-4.1", (redis_url, redis_prefix)) as guard:
            with (
                pytest.raises(StreamInterruptedError),
                guard.chat(USER, stream=True, max_tokens=50, tools=OPENAI_TOOLS) as streamed,
            ):
                list(streamed)
            spent, held = _charged(guard)
    assert FEES["gpt-4.1"] < spent < FEES["gpt-4.1"] + PROMPT_AT_MOST
    assert held == 0
