"""FakeProvider cuts a forced tool call's arguments at the output limit, as the real APIs do.

Each argument fragment counts one output token; a ``max_tokens`` (``max_output_tokens``)
under their number ends the call there, with the APIs' own words for a cut answer:
``finish_reason="length"``, ``stop_reason="max_tokens"``, ``status="incomplete"``."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from llmguard_sdk.testing import FakeProvider

USER: Any = [{"role": "user", "content": "plan a trip"}]
SCHEMA: Any = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in "abcdefgh"},
    "required": list("abcdefgh"),
}
WHOLE = json.dumps({name: "x" for name in "abcdefgh"}, separators=(",", ":"))
LIMIT = 16  # (the least max_output_tokens the Responses API takes; the call has 33 fragments)
TOOL: Any = {"name": "plan", "parameters": SCHEMA}
CHAT_TOOLS: Any = [{"type": "function", "function": TOOL}]
CHAT_CALL: Any = {"model": "m", "messages": USER, "max_tokens": LIMIT, "tools": CHAT_TOOLS}
CHAT_CALL["tool_choice"] = "required"
RESPONSES_CALL: Any = {"model": "m", "input": "plan a trip", "max_output_tokens": LIMIT}
RESPONSES_CALL |= {"tools": [{"type": "function", **TOOL}], "tool_choice": "required"}
CLAUDE_CALL: Any = {
    "model": "m",
    "max_tokens": LIMIT,
    "messages": USER,
    "tools": [{"name": "plan", "input_schema": SCHEMA}],
    "tool_choice": {"type": "any"},
}


def _is_cut(arguments: str) -> None:
    """``arguments`` are the whole call's first :data:`LIMIT` fragments: a proper prefix."""
    assert arguments
    assert WHOLE.startswith(arguments)
    assert len(arguments) < len(WHOLE)


def test_chat_cuts_a_forced_call_at_max_tokens(fake: FakeProvider, oai: openai.OpenAI) -> None:
    """The whole call came back with ``finish_reason="tool_calls"`` and 33 completion
    tokens over a ``max_tokens`` of 16."""
    answer = oai.chat.completions.create(**CHAT_CALL)
    (call,) = answer.choices[0].message.tool_calls or []
    assert answer.choices[0].finish_reason == "length"
    _is_cut(call.function.arguments)
    assert answer.usage is not None
    assert answer.usage.completion_tokens == LIMIT
    stream = oai.chat.completions.create(**CHAT_CALL, stream=True)
    chunks = list(stream)
    parts = [
        c for chunk in chunks if chunk.choices for c in chunk.choices[0].delta.tool_calls or ()
    ]
    streamed = "".join(c.function.arguments or "" for c in parts if c.function)
    assert streamed == call.function.arguments
    assert len(parts) == 1 + LIMIT
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert fake.stats.output_tokens == 2 * LIMIT


def test_responses_cuts_a_forced_call_at_max_output_tokens(
    fake: FakeProvider, oai: openai.OpenAI
) -> None:
    events = list(oai.responses.create(**RESPONSES_CALL, stream=True))
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details is not None
    assert final.response.incomplete_details.reason == "max_output_tokens"
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) == LIMIT
    answer = oai.responses.create(**RESPONSES_CALL)
    assert (answer.status, answer.usage.output_tokens if answer.usage else None) == (
        "incomplete",
        LIMIT,
    )
    assert answer.incomplete_details is not None
    assert answer.incomplete_details.reason == "max_output_tokens"
    (item,) = [o for o in answer.output if o.type == "function_call"]
    _is_cut(item.arguments)
    assert "".join(deltas) == item.arguments
    assert fake.stats.output_tokens == 2 * LIMIT


def test_messages_cuts_a_forced_call_at_max_tokens(
    fake: FakeProvider, claude: anthropic.Anthropic
) -> None:
    answer = claude.messages.create(**CLAUDE_CALL)
    assert answer.stop_reason == "max_tokens"
    assert [block.type for block in answer.content] == ["tool_use"]
    # the parameters complete before the cut, as Anthropic's buffered input has them (d's
    # value "x" was cut before its closing quote: it could have gone on)
    assert answer.content[0].input == {"a": "x", "b": "x", "c": "x"}
    assert answer.usage.output_tokens == LIMIT
    with claude.messages.stream(**CLAUDE_CALL) as stream:
        events = list(stream)
    parts = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    _is_cut("".join(parts))
    assert len(parts) == 1 + LIMIT  # (an empty one first, as Anthropic sends)
    (end,) = [e for e in events if e.type == "message_delta"]
    assert end.delta.stop_reason == "max_tokens"
    assert end.usage.output_tokens == LIMIT
    assert fake.stats.output_tokens == 2 * LIMIT


def test_batches_cut_a_forced_call_as_the_endpoints_do(
    fake: FakeProvider, oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    fake.batch_seconds = 0.0  # (a batch has ended at its first status read)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": CHAT_CALL}
    uploaded = oai.files.create(file=("b.jsonl", json.dumps(line).encode()), purpose="batch")
    created = oai.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    output = oai.batches.retrieve(created.id).output_file_id
    assert output is not None
    (row,) = map(json.loads, oai.files.content(output).text.splitlines())
    (choice,) = row["response"]["body"]["choices"]
    assert choice["finish_reason"] == "length"
    _is_cut(choice["message"]["tool_calls"][0]["function"]["arguments"])
    assert row["response"]["body"]["usage"]["completion_tokens"] == LIMIT
    batch = claude.messages.batches.create(requests=[{"custom_id": "a", "params": CLAUDE_CALL}])
    (result,) = claude.messages.batches.results(batch.id)
    assert result.result.type == "succeeded"
    assert result.result.message.stop_reason == "max_tokens"
    assert result.result.message.content[0].input == {"a": "x", "b": "x", "c": "x"}  # type: ignore[union-attr]
    assert result.result.message.usage.output_tokens == LIMIT
