"""A Responses stream's server-side tool call item is counted once, whichever of its
``response.output_item.added`` and ``.done`` events carries its ``id`` (a compatible server may
leave it out of one): both carry its ``output_index``. Keyed by ``id`` else ``output_index``,
an item whose ``id`` came on one event alone was two items: its fee charged twice, on a stream
that completed (the most of the items seen and ``response.completed``'s output) and on one cut
before ``response.completed``. Real Redis budgets, the loopback FakeProvider."""

from __future__ import annotations

import pytest

from llmguard_sdk import Guard, LLMGuardError
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.providers import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider, Fault

from .test_budget_cut_tools import FEES, OPENAI_TOOLS, PROMPT_AT_MOST
from .test_budget_server_tools import PRICES
from .test_budget_tool_fees import USER

FEE = FEES["gpt-4.1"]  # a web search, a file search and a container: each once


def _guard(fake: FakeProvider, redis: tuple[str, str]) -> Guard:
    budgets = Budgets([Budget(limit_usd=5.0)], prices=PRICES)
    route = OpenAIResponsesProvider(fake.base_url, model="gpt-4.1", api_key="x")
    store, prefix = redis
    return Guard(route, budgets=budgets, environ={}, store=store, key_prefix=prefix, retry=None)


def _charged(guard: Guard) -> float:
    (row,) = guard.budget_status()
    assert row["held_usd"] == 0
    return float(row["spent_usd"])


@pytest.mark.parametrize("without_id", ["added", "done"])
def test_a_completed_streams_tool_items_are_counted_once(
    redis_url: str, redis_prefix: str, without_id: str
) -> None:
    """Before: 2 web searches and 2 file searches counted ($0.055 of fees, not $0.0425)."""
    with FakeProvider(model="gpt-4.1") as fake:
        fake.script(Fault(omit_item_id=without_id))
        with _guard(fake, (redis_url, redis_prefix)) as guard:
            with guard.chat(USER, stream=True, max_tokens=50, tools=OPENAI_TOOLS) as streamed:
                assert "".join(chunk.text for chunk in streamed)
            usage = streamed.response.usage
            assert usage is not None
            uses = usage.web_search_requests, usage.file_search_calls, usage.code_executions
            assert uses == (1, 1, 1)
            tokens_at_most = (usage.input_tokens * 2.0 + usage.output_tokens * 8.0) / 1e6
            assert FEE < _charged(guard) <= FEE + tokens_at_most + 1e-9


@pytest.mark.parametrize("without_id", ["added", "done"])
def test_a_cut_streams_tool_items_are_counted_once(
    redis_url: str, redis_prefix: str, without_id: str
) -> None:
    """Cut before any text, after each item's two events: charged each tool once and the
    prompt (before: $0.055 of fees)."""
    with FakeProvider(model="gpt-4.1") as fake:
        fake.script(Fault(omit_item_id=without_id, cut_stream_after=0))
        with _guard(fake, (redis_url, redis_prefix)) as guard:
            with (
                pytest.raises(LLMGuardError),
                guard.chat(USER, stream=True, max_tokens=50, tools=OPENAI_TOOLS) as streamed,
            ):
                list(streamed)
            assert FEE < _charged(guard) < FEE + PROMPT_AT_MOST


def test_a_fault_names_which_event_leaves_the_id_out() -> None:
    with pytest.raises(ValueError, match="omit_item_id"):
        Fault(omit_item_id="both")
