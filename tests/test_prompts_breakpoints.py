"""A request's own Anthropic ``cache_control`` breakpoints and a PromptBuilder's: the builder
still marks its static part beside them, four breakpoints at most in all (its least valuable
left out first), and never a 5-minute one before a request's 1-hour one (Claude's 400)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from llmguard_sdk import ChatRequest, Guard, Message
from llmguard_sdk.errors import BadRequestError
from llmguard_sdk.prompts import PromptBuilder, add_cache_breakpoints
from llmguard_sdk.testing import FakeProvider

from .test_anthropic import STATIC, api, guard

__all__ = ["api", "guard"]  # (the fixtures, used here)

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
FIVE: dict[str, Any] = {"type": "ephemeral"}
HOUR: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}


def document(text: str, control: dict[str, Any]) -> list[dict[str, Any]]:
    """The user's content: a per-call document the caller marked, then the question."""
    return [
        {"type": "text", "text": text, "cache_control": control},
        {"type": "text", "text": "What does the document say?"},
    ]


def test_a_marked_document_leaves_the_static_part_cached(api: FakeProvider, guard: Guard) -> None:
    """The caller's breakpoint on a per-call document switched every one of the builder's
    off: the static part was never read from the cache (0 tokens a call)."""
    builder = PromptBuilder("handbook", instructions=STATIC, tools=[TOOL], drift=None)
    reads = []
    for text in ("Order 1 was sent. " * 30, "Order 2 was lost. " * 30, "Order 3 came. " * 30):
        answer = guard.chat(request=builder.build(document(text, FIVE)).request(max_tokens=20))
        assert answer.usage is not None
        reads.append(answer.usage.cached_input_tokens)
    body = api.requests[-1].body
    assert body["system"][-1]["cache_control"] == FIVE
    assert body["tools"][-1]["cache_control"] == FIVE
    assert body["messages"][-1]["content"][0]["cache_control"] == FIVE  # the caller's, kept
    assert reads[0] == 0
    assert reads[1] == reads[2] > 300  # the tools and the instructions


def test_never_more_than_four_the_builders_least_valuable_left_out_first() -> None:
    def request(own: int) -> tuple[list[Any], list[Any], list[Any]]:
        system = [{"type": "text", "text": "static"}]
        turns = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "ok"}]
        marked = [{"type": "text", "text": f"doc {i}", "cache_control": FIVE} for i in range(own)]
        messages = [*turns, {"role": "user", "content": [*marked, {"type": "text", "text": "q"}]}]
        return system, messages, [{"name": "lookup", "input_schema": {"type": "object"}}]

    placed = {}
    for own in range(5):
        system, messages, tools = request(own)
        add_cache_breakpoints(system, messages, tools, static_system_blocks=1, history_end=2)
        text = json.dumps([system, messages, tools])
        assert text.count("cache_control") == min(4, own + 3)
        placed[own] = (
            "cache_control" in system[0],
            "cache_control" in json.dumps(messages[1]),
            "cache_control" in tools[0],
        )
    # (static part, history, tools): the tools' goes first (the static part's covers them)
    assert placed == {
        0: (True, True, True),
        1: (True, True, True),
        2: (True, True, False),
        3: (True, False, False),
        4: (False, False, False),
    }


def test_no_five_minute_breakpoint_before_a_one_hour_one(api: FakeProvider, guard: Guard) -> None:
    builder = PromptBuilder("handbook", instructions=STATIC, tools=[TOOL], drift=None)
    request = builder.build(document("Order 1 was sent. " * 30, HOUR)).request(max_tokens=20)
    guard.chat(request=request)  # (Claude answers 400 to a 5-minute one before it)
    body = api.requests[-1].body
    assert json.dumps(body).count("cache_control") == 1
    hour_tool = {"name": "lookup", "input_schema": {"type": "object"}, "cache_control": HOUR}
    builder = PromptBuilder("tools", instructions=STATIC, tools=[hour_tool], drift=None)
    guard.chat(request=builder.build(document("Order 2. " * 30, FIVE)).request(max_tokens=20))
    body = api.requests[-1].body
    assert body["tools"][-1]["cache_control"] == HOUR  # the caller's, before: kept
    assert body["system"][-1]["cache_control"] == FIVE  # the builder's, after it


def test_the_fake_provider_refuses_what_claude_refuses(api: FakeProvider, guard: Guard) -> None:
    """(Five of the caller's own the SDK refuses before sending them: the fake is asked
    directly; see test_prompts_breakpoints_limit.py.)"""
    five = [{"type": "text", "text": f"part {i}", "cache_control": FIVE} for i in range(5)]
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": five}]}
    headers = {"anthropic-version": "2023-06-01"}
    answer = httpx.post(api.url + "/v1/messages", json=body, headers=headers)
    assert answer.status_code == 400
    assert "maximum of 4 blocks" in answer.text
    late = [
        {"type": "text", "text": "a", "cache_control": FIVE},
        {"type": "text", "text": "b", "cache_control": HOUR},
    ]
    with pytest.raises(BadRequestError, match="ttl='1h'"):
        guard.chat([{"role": "user", "content": late}], max_tokens=5)


def test_each_marked_block_of_a_tool_result_counts() -> None:
    marked = [{"type": "text", "text": f"row {i}", "cache_control": FIVE} for i in range(3)]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": marked}
    system = [{"type": "text", "text": "static"}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": [result]}]
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    add_cache_breakpoints(system, messages, tools, static_system_blocks=1)
    assert json.dumps([system, messages, tools]).count("cache_control") == 4
    assert "cache_control" in system[0]
    assert "cache_control" not in tools[0]


@pytest.mark.parametrize(("control", "added"), [(FIVE, 2), (HOUR, 0)])
def test_automatic_caching_takes_a_place_at_the_end(
    api: FakeProvider, guard: Guard, control: dict[str, Any], added: int
) -> None:
    """A top-level ``cache_control`` (Claude's automatic caching) is a breakpoint on the last
    block: with the caller's mark and the builder's three, Claude counted five."""
    builder = PromptBuilder("handbook", instructions=STATIC, tools=[TOOL], drift=None)
    prompt = builder.build(document("Order 1 was sent. " * 30, control))
    guard.chat(request=prompt.request(max_tokens=20, extra_body={"cache_control": control}))
    body = api.requests[-1].body
    assert body["cache_control"] == control
    assert json.dumps(body).count("cache_control") == 2 + added


def openai_marked(text: str) -> dict[str, Any]:
    """A content part openai's way: ``prompt_cache_breakpoint`` ends a reusable prefix."""
    return {"type": "text", "text": text, "prompt_cache_breakpoint": {"mode": "explicit"}}


def test_no_converted_breakpoint_before_a_one_hour_one(api: FakeProvider, guard: Guard) -> None:
    """openai's mark became a 5-minute breakpoint before the caller's 1-hour one: Claude's 400
    (the fake provider's). It is left out, as the builder's are there."""
    later = {"type": "text", "text": "B " * 50, "cache_control": HOUR}
    after = openai_marked("C " * 50)
    parts = [openai_marked("A " * 50), later, after, {"type": "text", "text": "question"}]
    guard.chat([{"role": "user", "content": parts}], max_tokens=5)
    content = api.requests[-1].body["messages"][0]["content"]
    assert [block.get("cache_control") for block in content] == [None, HOUR, FIVE, None]
    assert "prompt_cache_breakpoint" not in json.dumps(content)


@pytest.mark.parametrize("builder", [False, True])
def test_automatic_caching_counts_beside_converted_marks(
    api: FakeProvider, guard: Guard, builder: bool
) -> None:
    """A top-level ``cache_control`` is a breakpoint too: four openai marks beside it were
    five, Claude's 400 (the fake provider's). The latest marks are kept; a builder's static
    part keeps its breakpoint before them (the earliest marks are left out first)."""
    parts = [openai_marked(f"doc{i} " * 40) for i in range(4)]
    automatic: Any = {"cache_control": FIVE}
    if builder:
        prompt = PromptBuilder("handbook", instructions=STATIC, drift=None).build(parts)
        request = prompt.request(max_tokens=5, extra_body=automatic)
    else:
        request = ChatRequest(
            messages=[Message(role="user", content=parts)], max_tokens=5, extra_body=automatic
        )
    guard.chat(request=request)
    body = api.requests[-1].body
    assert body["cache_control"] == FIVE
    assert json.dumps(body).count("cache_control") == 4
    content = body["messages"][-1]["content"]
    marked = [i for i, block in enumerate(content) if "cache_control" in block]
    assert marked == ([2, 3] if builder else [1, 2, 3])
    assert builder == ("cache_control" in (body.get("system") or [{}])[-1])
