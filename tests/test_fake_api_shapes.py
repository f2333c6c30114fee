"""FakeProvider answers in the real APIs' shapes, read by the official ``openai`` and
``anthropic`` clients: tool-call arguments streamed in fragments and counted as output,
Anthropic's 404 body and request ids, schema ``pattern`` s honoured, ``batch_outcome``
checked where it is set."""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import httpx
import openai
import pytest

from llmguard_sdk.testing import FakeProvider

USER: Any = [{"role": "user", "content": "plan a trip"}]
SCHEMA: Any = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3},
        "days": {"type": "integer", "minimum": 2},
        "tags": {"type": "array", "items": {"enum": ["sea", "hills"]}},
    },
    "required": ["city", "days", "tags"],
}
ARGUMENTS = {"city": "xxx", "days": 2, "tags": ["sea"]}
CHAT_CALL: Any = {
    "model": "m",
    "messages": USER,
    "tools": [{"type": "function", "function": {"name": "plan", "parameters": SCHEMA}}],
    "tool_choice": "required",
}
RESPONSES_CALL: Any = {
    "model": "m",
    "input": "plan a trip",
    "tools": [{"type": "function", "name": "plan", "parameters": SCHEMA}],
    "tool_choice": "required",
}
CLAUDE_CALL: Any = {
    "model": "m",
    "max_tokens": 50,
    "messages": USER,
    "tools": [{"name": "plan", "input_schema": SCHEMA}],
    "tool_choice": {"type": "any"},
}
OPENAI_ID = re.compile(r"req_[0-9a-f]{32}")
ANTHROPIC_ID = re.compile(r"req_011C[1-9A-HJ-NP-Za-km-z]{20}")


# ---- 1 and 2. tool-call arguments streamed in fragments, counted as output tokens


def _chat_fragments(oai: openai.OpenAI) -> list[str]:
    stream = oai.chat.completions.create(**CHAT_CALL, stream=True)
    calls = [c for chunk in stream for c in chunk.choices[0].delta.tool_calls or ()]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", calls[0].id or "")
    assert calls[0].function is not None
    assert (calls[0].function.name, calls[0].function.arguments) == ("plan", "")
    assert {c.index for c in calls} == {0}
    assert all(c.id is None for c in calls[1:])
    return [c.function.arguments or "" for c in calls[1:] if c.function]


def test_chat_streams_tool_arguments_in_fragments_and_counts_them(
    fake: FakeProvider, oai: openai.OpenAI
) -> None:
    """The arguments came in one delta, so code that joins fragments was never exercised;
    a forced call reported 0 completion tokens."""
    fragments = _chat_fragments(oai)
    assert len(fragments) > 2
    assert all(fragments)
    assert json.loads("".join(fragments)) == ARGUMENTS
    with oai.chat.completions.stream(**CHAT_CALL) as stream:
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == ARGUMENTS
    usage = oai.chat.completions.create(**CHAT_CALL).usage
    assert usage is not None
    assert usage.completion_tokens == len(fragments)
    assert fake.stats.output_tokens == 3 * len(fragments)


def test_responses_streams_tool_arguments_in_delta_events(
    fake: FakeProvider, oai: openai.OpenAI
) -> None:
    events = list(oai.responses.create(**RESPONSES_CALL, stream=True))
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) > 2
    assert "".join(deltas) == done.arguments
    assert json.loads(done.arguments) == ARGUMENTS
    final = events[-1]
    assert final.type == "response.completed"
    usages = [final.response.usage, oai.responses.create(**RESPONSES_CALL).usage]
    assert [u.output_tokens if u else None for u in usages] == [len(deltas)] * 2
    assert fake.stats.output_tokens == 2 * len(deltas)


def test_messages_streams_tool_input_in_json_deltas(
    fake: FakeProvider, claude: anthropic.Anthropic
) -> None:
    with claude.messages.stream(**CLAUDE_CALL) as stream:
        parts = [
            e.delta.partial_json
            for e in stream
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
        final = stream.get_final_message()
    filled = [p for p in parts if p]
    assert len(filled) > 2
    assert json.loads("".join(parts)) == ARGUMENTS
    block = final.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert block.input == ARGUMENTS
    assert final.usage.output_tokens == len(filled)
    plain = claude.messages.create(**CLAUDE_CALL)
    assert plain.usage.output_tokens == len(filled)
    assert fake.stats.output_tokens == 2 * len(filled)


def test_batches_count_a_forced_call_s_output_tokens(
    fake: FakeProvider, claude: anthropic.Anthropic
) -> None:
    tokens = claude.messages.create(**CLAUDE_CALL).usage.output_tokens
    fake.batch_seconds = 0.0
    created = claude.messages.batches.create(requests=[{"custom_id": "a", "params": CLAUDE_CALL}])
    (row,) = claude.messages.batches.results(created.id)
    assert row.result.type == "succeeded"
    assert row.result.message.usage.output_tokens == tokens > 0


# ---- 3 and 4. Anthropic's 404 body; request ids shaped as each API's


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/messages/nope"), ("POST", "/v1/messages/count_tokenz")]
)
def test_an_unknown_messages_path_answers_anthropic_s_404(
    fake: FakeProvider, method: str, path: str
) -> None:
    """A path under ``/v1/messages/`` that the fake has not answered with OpenAI's body."""
    answer = httpx.request(method, fake.url + path, headers={"anthropic-version": "2023-06-01"})
    assert answer.status_code == 404
    body = answer.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert body["request_id"] == answer.headers["request-id"]
    assert ANTHROPIC_ID.fullmatch(body["request_id"])
    assert "x-request-id" not in answer.headers


def test_request_ids_are_shaped_as_each_api_s_and_deterministic(
    oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """The ids were ``req-1``, ``req-2``: neither API's shape (OpenAI: ``req_`` and 32 hex
    digits; Anthropic: ``req_011C`` and 20 base58 characters)."""
    params: Any = {"model": "m", "max_tokens": 5, "messages": USER}
    first = claude.messages.with_raw_response.create(**params)
    second = oai.chat.completions.with_raw_response.create(model="m", messages=USER)
    third = oai.responses.with_raw_response.create(model="m", input="hi")
    fourth = claude.messages.with_raw_response.create(**params)
    claude_ids = [first.headers["request-id"], fourth.headers["request-id"]]
    openai_ids = [second.headers["x-request-id"], third.headers["x-request-id"]]
    assert all(ANTHROPIC_ID.fullmatch(i) for i in claude_ids)
    assert all(OPENAI_ID.fullmatch(i) for i in openai_ids)
    assert len(set(claude_ids + openai_ids)) == 4
    assert first.parse()._request_id == claude_ids[0]
    with (
        FakeProvider() as other,
        anthropic.Anthropic(base_url=other.url, api_key="x", max_retries=0) as again,
    ):
        repeated = again.messages.with_raw_response.create(**params)
    assert repeated.headers["request-id"] == claude_ids[0]  # (the n-th request's, per server)


# ---- 5. string patterns in tool schemas


PATTERNS = [
    r"^[A-Z]{3}-\d{4}$",
    r"^(foo|bar)_[a-z]+$",
    r"\d{5}(-\d{4})?",
    r"^[^@\s]+@example\.com$",
    r"^(?:[01]\d|2[0-3]):[0-5]\d$",
    r"^SKU-[A-F0-9]{8}$",
    r"^\w+\.txt$",
    r"^[a-z][a-z0-9_-]{2,15}$",
    r"^\+?[1-9]\d{1,14}$",
]


def _arguments(oai: openai.OpenAI, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    tools: Any = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    answer = oai.chat.completions.create(
        model="m", messages=USER, tools=tools, tool_choice="required"
    )
    (call,) = answer.choices[0].message.tool_calls or []
    arguments: dict[str, Any] = json.loads(call.function.arguments)  # type: ignore[union-attr]
    return arguments


def test_placeholder_strings_match_their_schema_s_pattern(oai: openai.OpenAI) -> None:
    """A ``pattern`` was ignored: every string was ``"x"``, which a user's validation of
    the arguments refused."""
    properties = {f"p{i}": {"type": "string", "pattern": p} for i, p in enumerate(PATTERNS)}
    arguments = _arguments(oai, properties)
    for i, pattern in enumerate(PATTERNS):
        assert re.search(pattern, arguments[f"p{i}"]), (pattern, arguments[f"p{i}"])
    bounded = {"type": "string", "pattern": r"^[a-z]+$", "minLength": 4, "maxLength": 6}
    assert re.fullmatch("[a-z]{4,6}", _arguments(oai, {"b": bounded})["b"])


def test_a_pattern_it_cannot_follow_falls_back_without_hanging(oai: openai.OpenAI) -> None:
    hard = {
        "look": {"type": "string", "pattern": r"^(?=.*\d)(?=.*[A-Z]).{8,}$"},
        "broken": {"type": "string", "pattern": "[unclosed"},
        "huge": {"type": "string", "pattern": r"^a{100000000}$"},
        "evil": {"type": "string", "pattern": r"^(x+x+)+y$", "minLength": 30},
    }
    arguments = _arguments(oai, hard)
    assert all(isinstance(value, str) and value for value in arguments.values())


# ---- 6. batch_outcome checked where it is set


def test_an_unknown_batch_outcome_is_refused_when_set(fake: FakeProvider) -> None:
    """Setting ``batch_outcome`` took any value; the batch that read it failed later."""
    with pytest.raises(ValueError, match="batch_outcome"):
        fake.batch_outcome = "lost"  # type: ignore[assignment]
    assert fake.batch_outcome is None
    fake.batch_outcome = "failed"
    assert fake.batch_outcome == "failed"
    with pytest.raises(ValueError, match="batch_outcome"):
        FakeProvider(batch_outcome="lost")  # type: ignore[arg-type]
