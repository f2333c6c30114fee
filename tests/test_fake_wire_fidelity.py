"""FakeProvider answers as the real APIs do, read by the official ``openai`` and
``anthropic`` clients: Anthropic error bodies carry their request id, forced tool calls carry
arguments their schema accepts, batches go through each API's phases, and the batch settings
are declared (typed) parts of the provider."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.responses import ResponseCompletedEvent, ResponseFunctionToolCall
from typing_extensions import assert_type

from llmguard_sdk.testing import FakeProvider, Fault

USER: Any = [{"role": "user", "content": "find my order"}]
SCHEMA: Any = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "count": {"type": "integer", "minimum": 3},
        "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
        "express": {"type": "boolean"},
        "status": {"type": "string", "enum": ["open", "closed"]},
        "kind": {"const": "parcel"},
        "note": {"type": ["null", "string"]},
        "when": {"type": "string", "format": "date-time"},
        "address": {"$ref": "#/$defs/Address"},
        "items": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "gift": {"type": "boolean"}},
                "required": ["sku"],
            },
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "either": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "left_out": {"type": "string"},
    },
    "required": [
        "order_id", "count", "price", "express", "status", "kind", "note", "when", "address",
        "items", "tags", "either",
    ],
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "minLength": 5}},
            "required": ["city", "zip"],
        }
    },
}  # fmt: skip
ARGUMENTS = {
    "order_id": "x",
    "count": 3,
    "price": 0.5,
    "express": False,
    "status": "open",
    "kind": "parcel",
    "note": "x",
    "when": "1970-01-01T00:00:00Z",
    "address": {"city": "x", "zip": "xxxxx"},
    "items": [{"sku": "x"}, {"sku": "x"}],
    "tags": ["x"],
    "either": 0,
}
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "ship", "parameters": SCHEMA}},
]
CHAT_CHOICE: Any = {"type": "function", "function": {"name": "ship"}}
RESPONSES_TOOLS: Any = [{"type": "function", "name": "ship", "parameters": SCHEMA}]
CLAUDE_TOOLS: Any = [{"name": "ship", "input_schema": SCHEMA}]
CLAUDE_CHOICE: Any = {"type": "tool", "name": "ship"}


@dataclass
class Apis:
    """A fake provider and the official clients of both APIs, pointed at it."""

    fake: FakeProvider
    oai: openai.OpenAI
    claude: anthropic.Anthropic


@pytest.fixture
def apis(fake: FakeProvider) -> Iterator[Apis]:
    fake.batch_seconds = 0.0  # (a batch has ended at its first status read)
    with (
        openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0) as oai,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        yield Apis(fake, oai, claude)


# ---- 1. Anthropic error bodies


def test_anthropic_error_bodies_carry_the_request_id_of_their_header() -> None:
    """Anthropic's error body says ``request_id`` (the ``request-id`` header's value); the
    fake's did not, and its Message Batches answered OpenAI's error body."""
    with (
        FakeProvider(rpm=1) as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        params: Any = {"model": "m", "max_tokens": 5, "messages": USER}
        raised: list[anthropic.APIStatusError] = []
        fake.script(None, Fault(status=529))
        claude.messages.create(**params)  # (the one request rpm=1 lets through)
        for attempt in (
            lambda: claude.messages.create(**params),  # 529
            lambda: claude.messages.create(**params),  # 429
            lambda: claude.messages.create(**{**params, "max_tokens": 0}),  # 400
            lambda: claude.messages.batches.retrieve("msgbatch_none"),  # 404
        ):
            with pytest.raises(anthropic.APIStatusError) as failed:
                attempt()
            raised.append(failed.value)
        lone = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\\ud800"}]}'
        headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
        refused = httpx.post(f"{fake.url}/v1/messages", content=lone, headers=headers)
        assert refused.status_code == 400
        assert refused.json()["request_id"] == refused.headers["request-id"]
    assert [e.status_code for e in raised] == [529, 429, 400, 404]
    for error in raised:
        assert isinstance(error.body, dict)
        assert error.body["type"] == "error"
        assert error.body["request_id"] == error.request_id
        assert error.request_id
    assert raised[3].body["error"]["type"] == "not_found_error"  # type: ignore[index]


# ---- 2. forced tool calls carry arguments their schema accepts


def _chat(apis: Apis) -> Any:
    answer = apis.oai.chat.completions.create(
        model="m", messages=USER, tools=CHAT_TOOLS, tool_choice=CHAT_CHOICE
    )
    call = (answer.choices[0].message.tool_calls or [])[0]
    assert call.type == "function"
    return json.loads(call.function.arguments)


def _chat_stream(apis: Apis) -> Any:
    chunks = apis.oai.chat.completions.create(
        model="m", messages=USER, tools=CHAT_TOOLS, tool_choice=CHAT_CHOICE, stream=True
    )
    calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or ()]
    return json.loads("".join((c.function.arguments or "") for c in calls if c.function))


def _responses(apis: Apis) -> Any:
    answer = apis.oai.responses.create(
        model="m", input="find my order", tools=RESPONSES_TOOLS, tool_choice="required"
    )
    (call,) = answer.output
    assert isinstance(call, ResponseFunctionToolCall)
    return json.loads(call.arguments)


def _responses_stream(apis: Apis) -> Any:
    events = list(
        apis.oai.responses.create(
            model="m", input="x", tools=RESPONSES_TOOLS, tool_choice="required", stream=True
        )
    )
    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    (call,) = completed.response.output
    assert isinstance(call, ResponseFunctionToolCall)
    return json.loads(call.arguments)


def _messages(apis: Apis) -> Any:
    message = apis.claude.messages.create(
        model="m", max_tokens=4096, messages=USER, tools=CLAUDE_TOOLS, tool_choice=CLAUDE_CHOICE
    )
    block = message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    return block.input


def _messages_stream(apis: Apis) -> Any:
    with apis.claude.messages.stream(
        model="m", max_tokens=4096, messages=USER, tools=CLAUDE_TOOLS, tool_choice=CLAUDE_CHOICE
    ) as stream:
        final = stream.get_final_message()
    block = final.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    return block.input


def _openai_batch(apis: Apis) -> Any:
    body = {"model": "m", "messages": USER, "tools": CHAT_TOOLS, "tool_choice": CHAT_CHOICE}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}
    uploaded = apis.oai.files.create(file=("b.jsonl", json.dumps(line).encode()), purpose="batch")
    created = apis.oai.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    output = apis.oai.batches.retrieve(created.id).output_file_id
    assert output is not None
    (row,) = map(json.loads, apis.oai.files.content(output).text.splitlines())
    call = row["response"]["body"]["choices"][0]["message"]["tool_calls"][0]
    return json.loads(call["function"]["arguments"])


def _message_batch(apis: Apis) -> Any:
    params: Any = {"model": "m", "max_tokens": 4096, "messages": USER, "tools": CLAUDE_TOOLS}
    params["tool_choice"] = CLAUDE_CHOICE
    created = apis.claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    (row,) = apis.claude.messages.batches.results(created.id)
    assert row.result.type == "succeeded"
    block = row.result.message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    return block.input


@pytest.mark.parametrize(
    "call",
    [
        _chat,
        _chat_stream,
        _responses,
        _responses_stream,
        _messages,
        _messages_stream,
        _openai_batch,
        _message_batch,
    ],
)
def test_a_forced_tool_call_has_arguments_its_schema_accepts(
    apis: Apis, call: Callable[[Apis], Any]
) -> None:
    """A forced call came with the arguments ``{}`` on every route: code reading its
    required arguments failed on the fake, never on the provider."""
    assert call(apis) == ARGUMENTS


def test_recursive_schemas_are_cut_at_a_bounded_depth(apis: Apis) -> None:
    node: Any = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    tools: Any = [{"type": "function", "function": {"name": "walk", "parameters": node}}]
    answer = apis.oai.chat.completions.create(
        model="m", messages=USER, tools=tools, tool_choice="required"
    )
    call = (answer.choices[0].message.tool_calls or [])[0]
    assert call.type == "function"
    arguments = json.loads(call.function.arguments)
    depth = 0
    while arguments:
        arguments, depth = arguments["next"], depth + 1
    assert 2 <= depth <= 10


# ---- 3. batches go through each API's phases


def _upload(oai: openai.OpenAI) -> str:
    body = {"model": "m", "messages": USER}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}
    return oai.files.create(file=("b.jsonl", json.dumps(line).encode()), purpose="batch").id


def _create(oai: openai.OpenAI) -> Any:
    return oai.batches.create(
        input_file_id=_upload(oai), endpoint="/v1/chat/completions", completion_window="24h"
    )


def test_an_openai_batch_is_validated_then_finalized(apis: Apis) -> None:
    """A batch was ``in_progress`` from its creation and then ``completed``: OpenAI's
    ``validating`` and ``finalizing`` (and their timestamps) never came."""
    fake, oai = apis.fake, apis.oai
    created = _create(oai)
    assert created.status == "validating"
    assert created.in_progress_at is None
    done = oai.batches.retrieve(created.id)
    assert done.status == "completed"
    stamps = [done.in_progress_at, done.finalizing_at, done.completed_at]
    assert None not in stamps
    assert created.created_at <= stamps[0] <= stamps[1] <= stamps[2]  # type: ignore[operator]
    assert done.expires_at == done.created_at + 86_400
    fake.batch_outcome = "failed"  # OpenAI fails a batch whose input it could not validate
    failed = oai.batches.retrieve(_create(oai).id)
    assert (failed.status, failed.in_progress_at) == ("failed", None)
    assert failed.failed_at is not None
    fake.batch_seconds = 600.0
    assert oai.batches.retrieve(_create(oai).id).status == "validating"


def test_an_openai_batch_s_statuses_come_in_order(apis: Apis) -> None:
    fake, oai = apis.fake, apis.oai
    fake.batch_seconds = 0.3
    created = _create(oai)
    seen = [created.status]
    end = time.monotonic() + 10
    while seen[-1] != "completed" and time.monotonic() < end:
        status = oai.batches.retrieve(created.id).status
        if status != seen[-1]:
            seen.append(status)
        time.sleep(0.005)
    order = ["validating", "in_progress", "finalizing", "completed"]
    assert seen[0] == "validating"
    assert seen[-1] == "completed"
    assert seen == sorted(seen, key=order.index)


def test_a_message_batch_is_in_progress_when_created(apis: Apis) -> None:
    """A message batch that runs no time at all was answered ``ended`` by its creation,
    which Anthropic answers ``in_progress``."""
    params: Any = {"model": "m", "max_tokens": 10, "messages": USER}
    created = apis.claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    assert (created.processing_status, created.results_url) == ("in_progress", None)
    assert apis.claude.messages.batches.retrieve(created.id).processing_status == "ended"


def test_a_cancelled_batch_is_cancelling_first(apis: Apis) -> None:
    """A cancel ended a batch at once; both APIs answer it still cancelling (OpenAI's
    ``cancelling``, Anthropic's ``canceling``) and end it later."""
    fake, oai, claude = apis.fake, apis.oai, apis.claude
    fake.batch_seconds = 600.0
    created = _create(oai)
    cancelling = oai.batches.cancel(created.id)
    assert (cancelling.status, cancelling.cancelled_at) == ("cancelling", None)
    assert cancelling.cancelling_at is not None
    cancelled = oai.batches.retrieve(created.id)
    assert cancelled.status == "cancelled"
    assert cancelled.cancelled_at is not None
    params: Any = {"model": "m", "max_tokens": 10, "messages": USER}
    batch = claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    assert batch.processing_status == "in_progress"
    canceling = claude.messages.batches.cancel(batch.id)
    assert (canceling.processing_status, canceling.ended_at) == ("canceling", None)
    assert canceling.cancel_initiated_at is not None
    ended = claude.messages.batches.retrieve(batch.id)
    assert (ended.processing_status, ended.request_counts.canceled) == ("ended", 1)
    assert ended.ended_at is not None
    (row,) = claude.messages.batches.results(batch.id)
    assert row.result.type == "canceled"


# ---- 4. the batch settings are declared


def test_the_batch_settings_are_typed_constructor_arguments() -> None:
    """``batch_seconds``, ``batch_rows`` and ``batch_outcome`` were undeclared attributes:
    a typed test set them under ``# type: ignore``, and a misspelt one did nothing."""
    seen: list[str] = []

    def rows(row: dict[str, Any]) -> dict[str, Any] | str | None:
        seen.append(row["custom_id"])
        return row

    with (
        FakeProvider(batch_seconds=0.0, batch_rows=rows, batch_outcome="expired") as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        assert_type(fake.batch_seconds, float)
        assert fake.batch_rows is rows
        assert fake.batch_outcome == "expired"
        params: Any = {"model": "m", "max_tokens": 10, "messages": USER}
        created = claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
        (row,) = claude.messages.batches.results(created.id)
        assert (row.result.type, seen) == ("expired", ["a"])
    assert (FakeProvider().batch_seconds, FakeProvider().batch_outcome) == (0.2, None)
    with pytest.raises(ValueError, match="batch_outcome"):
        FakeProvider(batch_outcome="lost")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_seconds"):
        FakeProvider(batch_seconds=-1.0)
