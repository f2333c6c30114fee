"""FakeProvider answers as the real APIs do, read by the official ``openai`` and
``anthropic`` clients (which parse strictly): tool calls on every route, and the gaps a user
who knows the real APIs would find."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any, Literal

import anthropic
import httpx
import openai
import pytest
from openai.types import Batch
from openai.types.responses import ResponseCompletedEvent, ResponseErrorEvent

from llmguard_sdk.testing import FakeProvider, Fault

USER: Any = [{"role": "user", "content": "find my order"}]
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "cancel", "parameters": {"type": "object"}}},
]
CLAUDE_TOOLS: Any = [
    {"name": "lookup", "input_schema": {"type": "object"}},
    {"name": "cancel", "input_schema": {"type": "object"}},
]


def _drain(texts: Iterable[str], into: list[str]) -> None:
    """Append each of ``texts`` to ``into`` until they end or raise."""
    for text in texts:
        into.append(text)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


@pytest.mark.parametrize(
    ("choice", "name"),
    [("required", "lookup"), ({"type": "function", "function": {"name": "cancel"}}, "cancel")],
)
def test_chat_answers_a_required_tool_with_a_tool_call(
    oai: openai.OpenAI, choice: Any, name: str
) -> None:
    """The chat endpoint answered text whatever the ``tool_choice``, while ``/v1/responses``
    answered a function call: a drill with tools differed by route."""
    answer = oai.chat.completions.create(
        model="m", messages=USER, tools=CHAT_TOOLS, tool_choice=choice
    )
    choice_0 = answer.choices[0]
    assert choice_0.finish_reason == "tool_calls"
    assert choice_0.message.content is None
    calls = choice_0.message.tool_calls or []
    assert [(c.type, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("function", name, "{}")
    ]
    auto = oai.chat.completions.create(model="m", messages=USER, tools=CHAT_TOOLS)
    assert auto.choices[0].message.content == "Echo: find my order"


def test_a_streamed_chat_tool_call_arrives_in_deltas(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="m", messages=USER, tools=CHAT_TOOLS, tool_choice="required", stream=True
    )
    chunks = list(stream)
    calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or ()]
    assert [c.index for c in calls] == [0, 0]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", calls[0].id or "")
    assert calls[0].function is not None
    assert calls[0].function.name == "lookup"
    arguments = "".join((c.function.arguments or "") for c in calls if c.function)
    assert arguments == "{}"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("choice", "name"),
    [({"type": "any"}, "lookup"), ({"type": "tool", "name": "cancel"}, "cancel")],
)
def test_messages_answers_a_forced_tool_with_tool_use(
    claude: anthropic.Anthropic, choice: Any, name: str
) -> None:
    message = claude.messages.create(
        model="m", max_tokens=50, messages=USER, tools=CLAUDE_TOOLS, tool_choice=choice
    )
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert (block.name, block.input) == (name, {})


def test_a_streamed_tool_use_sends_its_input_as_json_deltas(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="m", max_tokens=50, messages=USER, tools=CLAUDE_TOOLS, tool_choice={"type": "any"}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert "input_json" in kinds
    assert kinds[-2] == "message_delta"
    assert kinds[-3] == "content_block_stop"
    block = final.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert (block.name, block.input, final.stop_reason) == ("lookup", {}, "tool_use")


def test_responses_reads_input_file_parts(oai: openai.OpenAI) -> None:
    """``/v1/responses`` refused an ``input_file`` part (a PDF by file id, data or URL) with
    a 400 that OpenAI never gives: code sending documents could not be tested."""
    sources: list[dict[str, str]] = [
        {"file_id": "file-abc"},
        {"file_url": "https://example.invalid/a.pdf"},
    ]
    for source in sources:
        parts: Any = [{"type": "input_text", "text": "summarise this"}]
        parts.append({"type": "input_file", **source})
        answer = oai.responses.create(model="m", input=[{"role": "user", "content": parts}])
        assert answer.output_text == "Echo: summarise this"
    with pytest.raises(openai.BadRequestError, match="input_file"):
        oai.responses.create(
            model="m",
            input=[{"role": "user", "content": [{"type": "input_file"}]}],
        )


def test_a_chat_stream_fails_with_openais_error_chunk(
    fake: FakeProvider, oai: openai.OpenAI
) -> None:
    """No fault failed a stream the way providers do once it started: an error in the
    stream, HTTP 200, which the official client raises."""
    fake.script(Fault(stream_error_after=2, error_message="overloaded", error_code="busy"))
    texts: list[str] = []
    stream = oai.chat.completions.create(model="m", messages=USER, stream=True)
    with pytest.raises(openai.APIError, match="overloaded") as raised:
        _drain((chunk.choices[0].delta.content or "" for chunk in stream), texts)
    assert "".join(texts) == "Echo: find"
    assert raised.value.body == {
        "message": "overloaded",
        "type": "server_error",
        "param": None,
        "code": "busy",
    }
    fake.script(Fault(stream_error_after=2))  # not streamed: an HTTP error
    with pytest.raises(openai.InternalServerError):
        oai.chat.completions.create(model="m", messages=USER)


def test_a_messages_stream_fails_with_an_error_event(
    fake: FakeProvider, claude: anthropic.Anthropic
) -> None:
    fake.script(Fault(stream_error_after=1, error_message="Overloaded"))
    texts: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError, match="overloaded_error") as raised,
        claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream,
    ):
        _drain(stream.text_stream, texts)
    assert texts == ["Echo:"]
    assert raised.value.body == {  # (the stream's request id in it, as Anthropic's has)
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": raised.value.response.headers["request-id"],
    }


def test_a_responses_stream_fails_with_an_error_event(
    fake: FakeProvider, oai: openai.OpenAI
) -> None:
    """``/v1/responses`` never sent the ``error`` event OpenAI fails a started stream with."""
    fake.script(Fault(stream_error_after=1, error_message="try again", error_code="busy"))
    events = list(oai.responses.create(model="m", input="find my order", stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created"
    assert "response.completed" not in kinds
    assert kinds.count("response.output_text.delta") == 1
    last = events[-1]
    assert isinstance(last, ResponseErrorEvent)
    assert (last.code, last.message) == ("busy", "try again")
    assert fake.stats.faults == 1
    assert fake.stats.succeeded == 0


def _openai_batch(fake: FakeProvider, oai: openai.OpenAI, texts: list[str], **extra: Any) -> Batch:
    """Run a chat batch of one call per text (``extra`` in each body; done at once); its
    final status."""
    fake.batch_seconds = 0.0
    lines = [
        json.dumps(
            {
                "custom_id": text,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": text}], **extra},
            }
        )
        for text in texts
    ]
    uploaded = oai.files.create(file=("b.jsonl", "\n".join(lines).encode()), purpose="batch")
    created = oai.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return oai.batches.retrieve(created.id)


def _rows(oai: openai.OpenAI, file_id: str | None) -> dict[str, Any]:
    assert file_id is not None
    text = oai.files.content(file_id).text
    return {row["custom_id"]: row for row in map(json.loads, text.splitlines())}


def test_an_openai_batch_puts_failed_requests_in_its_error_file(
    fake: FakeProvider, oai: openai.OpenAI
) -> None:
    """A batch had no error file: a request that failed stayed in the output file, and the
    counts said every request completed."""
    refused = {"error": {"message": "no", "type": "invalid_request_error", "code": None}}
    fake.batch_rows = lambda row: (
        {**row, "response": {"status_code": 400, "body": refused}}
        if row["custom_id"] == "two"
        else row
    )
    batch = _openai_batch(fake, oai, ["one", "two"])
    assert batch.status == "completed"
    counts = batch.request_counts
    assert counts is not None
    assert (counts.total, counts.completed, counts.failed) == (2, 1, 1)
    assert list(_rows(oai, batch.output_file_id)) == ["one"]
    assert _rows(oai, batch.error_file_id)["two"]["response"]["status_code"] == 400


def test_an_openai_batch_can_expire_or_fail(fake: FakeProvider, oai: openai.OpenAI) -> None:
    """A batch never expired nor failed, so the code handling it could not be tested."""
    fake.batch_outcome = "expired"
    batch = _openai_batch(fake, oai, ["one"])
    assert (batch.status, batch.output_file_id) == ("expired", None)
    assert _rows(oai, batch.error_file_id)["one"]["error"]["code"] == "batch_expired"
    fake.batch_outcome = "failed"
    batch = _openai_batch(fake, oai, ["one"])
    assert (batch.status, batch.output_file_id, batch.error_file_id) == ("failed", None, None)
    assert batch.errors is not None
    assert [e.code for e in batch.errors.data or ()] == ["batch_failed"]


@pytest.mark.parametrize(("outcome", "kind"), [("expired", "expired"), ("failed", "errored")])
def test_a_message_batch_can_expire_or_error(
    fake: FakeProvider,
    claude: anthropic.Anthropic,
    outcome: Literal["expired", "failed"],
    kind: str,
) -> None:
    fake.batch_seconds = 0.0
    fake.batch_outcome = outcome
    params: Any = {"model": "m", "max_tokens": 10, "messages": USER}
    created = claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    batch = claude.messages.batches.retrieve(created.id)
    assert batch.processing_status == "ended"
    assert getattr(batch.request_counts, kind) == 1
    assert batch.request_counts.succeeded == 0
    assert batch.ended_at is not None
    assert batch.created_at < batch.expires_at
    (row,) = claude.messages.batches.results(created.id)
    assert (row.custom_id, row.result.type) == ("a", kind)


def test_limits_answer_with_each_api_s_own_headers() -> None:
    """The Messages endpoint sent OpenAI's ``x-ratelimit-*`` and ``x-request-id`` where
    Anthropic sends ``anthropic-ratelimit-*`` (resets as RFC 3339 instants) and
    ``request-id``; ``/v1/responses``' 429 had no ``retry-after-ms``."""
    with (
        FakeProvider(rpm=1, limit_window=30) as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
        openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0) as oai,
    ):
        params: Any = {"model": "m", "max_tokens": 10, "messages": USER}
        ok = claude.messages.with_raw_response.create(**params)
        assert re.fullmatch(r"req_011C[1-9A-HJ-NP-Za-km-z]{20}", ok.headers["request-id"])
        assert ok.headers["anthropic-ratelimit-requests-limit"] == "1"
        assert ok.headers["anthropic-ratelimit-requests-remaining"] == "0"
        reset = datetime.fromisoformat(ok.headers["anthropic-ratelimit-requests-reset"])
        assert 25 < (reset - datetime.now(timezone.utc)).total_seconds() <= 31
        assert not [name for name in ok.headers if name.startswith("x-ratelimit")]
        with pytest.raises(anthropic.RateLimitError) as limited:
            claude.messages.create(**params)
        assert limited.value.response.headers["retry-after"] in {str(s) for s in range(25, 31)}
        assert "anthropic-ratelimit-requests-reset" in limited.value.response.headers
        with pytest.raises(openai.RateLimitError) as refused:
            oai.responses.create(model="m", input="hi")
        headers = refused.value.response.headers
        assert 25_000 < int(headers["retry-after-ms"]) <= 30_000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert refused.value.code == "rate_limit_exceeded"


@pytest.mark.parametrize(
    ("messages", "param", "code"),
    [
        ([{"role": "bot", "content": "hi"}], "messages[0].role", "invalid_value"),
        ([*USER, {"content": "hi"}], "messages[1].role", "missing_required_parameter"),
        ([], "messages", "empty_array"),
    ],
)
def test_chat_refuses_messages_as_openai_does(
    oai: openai.OpenAI, messages: Any, param: str, code: str
) -> None:
    """A message with a role chat has not was answered (its text left out of the echo), and
    refusals had neither ``param`` nor ``code``."""
    with pytest.raises(openai.BadRequestError) as refused:
        oai.chat.completions.create(model="m", messages=messages)
    assert (refused.value.param, refused.value.code) == (param, code)
    assert refused.value.type == "invalid_request_error"


def test_a_strict_fake_refuses_a_request_without_a_model() -> None:
    """The fake answered a request naming no model (as its own): code that forgot the model
    passed its tests and got a 400 from OpenAI."""
    body = {"messages": USER}
    with FakeProvider() as lenient:
        assert httpx.post(f"{lenient.base_url}/chat/completions", json=body).status_code == 200
    with FakeProvider(strict=True) as fake:
        chat = httpx.post(f"{fake.base_url}/chat/completions", json=body)
        assert chat.status_code == 400
        assert chat.json()["error"]["message"] == "you must provide a model parameter"
        responses = httpx.post(f"{fake.base_url}/responses", json={"input": "hi"})
        assert responses.status_code == 400
        assert responses.json()["error"]["param"] == "model"
        assert responses.json()["error"]["code"] == "missing_required_parameter"
        assert httpx.post(
            f"{fake.base_url}/responses", json={"model": "m", "input": "hi"}
        ).is_success


def test_batches_answer_a_forced_tool_with_a_tool_call(
    fake: FakeProvider, oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """A batch answered text whatever the ``tool_choice``, unlike the endpoints."""
    batch = _openai_batch(fake, oai, ["one"], tools=CHAT_TOOLS, tool_choice="required")
    body = _rows(oai, batch.output_file_id)["one"]["response"]["body"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    params: Any = {"model": "m", "max_tokens": 10, "messages": USER, "tools": CLAUDE_TOOLS}
    params["tool_choice"] = {"type": "tool", "name": "cancel"}
    created = claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
    (row,) = claude.messages.batches.results(created.id)
    assert row.result.type == "succeeded"
    block = row.result.message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock)
    assert (block.name, row.result.message.stop_reason) == ("cancel", "tool_use")


def test_streams_end_as_the_real_apis_end_them(fake: FakeProvider, oai: openai.OpenAI) -> None:
    """Pins what a review checked: chat's usage chunk (``include_usage``) has no choices and
    comes last, every other chunk's ``usage`` null; Anthropic's events come in its order."""
    chunks = list(
        oai.chat.completions.create(
            model="m", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    *content, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 4  # "Echo: find my order"
    assert all(c.usage is None and len(c.choices) == 1 for c in content)
    assert content[-1].choices[0].finish_reason == "stop"
    body = {"model": "m", "max_tokens": 2, "stream": True, "messages": USER}
    headers = {"anthropic-version": "2023-06-01"}
    raw = httpx.post(f"{fake.url}/v1/messages", headers=headers, json=body).text
    events = [line[len("event: ") :] for line in raw.splitlines() if line.startswith("event: ")]
    assert events == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    delta = json.loads(raw.split("event: message_delta\ndata: ", 1)[1].split("\n", 1)[0])
    assert delta["delta"]["stop_reason"] == "max_tokens"
    assert delta["usage"] == {"output_tokens": 2}


@pytest.mark.parametrize(
    "fault",
    [Fault(cut_stream_after=1), Fault(malformed_json=True), Fault(missing_fields=True)],
    ids=["cut", "malformed", "missing"],
)
@pytest.mark.parametrize("stream", [False, True])
def test_responses_breaks_its_answers_as_chat_does(
    fake: FakeProvider, oai: openai.OpenAI, fault: Fault, stream: bool
) -> None:
    """``/v1/responses`` answered every fault without a status as a 500, where chat sends a
    broken 200 (cut, malformed, missing its fields): a drill of broken answers tested the
    retry of a 500 on one route."""
    fake.script(fault)
    seen: list[str] = []
    if stream and fault.missing_fields:  # a stream that ends after its first event
        _drain(_event_types(oai, stream), seen)
        assert seen == ["response.created"]
    else:
        with pytest.raises(Exception) as raised:  # noqa: PT011 (each breaks the client its way)
            _drain(_event_types(oai, stream), seen)
        assert not isinstance(raised.value, openai.APIStatusError)
    assert fake.stats.by_status == {200: 1}
    if stream and fault.cut_stream_after == 1:
        assert seen.count("response.output_text.delta") == 1
        assert isinstance(raised.value, openai.APIConnectionError)


def _event_types(oai: openai.OpenAI, stream: bool) -> Iterator[str]:
    """The types of the events of a Responses answer (a plain one: its output items)."""
    if not stream:
        answer = oai.responses.create(model="m", input="find my order")
        yield from (item.type for item in answer.output)
        return
    yield from (event.type for event in oai.responses.create(model="m", input="x y", stream=True))


_CALLED: Any = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    ],
}


@pytest.mark.parametrize(
    ("messages", "param", "said"),
    [
        ([*USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}], "messages.[1].role",
         "must be a response to a preceeding message with 'tool_calls'"),
        ([*USER, _CALLED, *USER], "messages.[1].role", "did not have response messages: call_1"),
    ],
)  # fmt: skip
def test_a_strict_fake_refuses_tool_messages_that_answer_no_call(
    messages: Any, param: str, said: str
) -> None:
    """Tool messages that answer no call (the commonest 400 of code that runs tools) were
    answered: the code passed its tests and failed at OpenAI."""
    with (
        FakeProvider(strict=True) as fake,
        openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0) as oai,
    ):
        with pytest.raises(openai.BadRequestError, match=said) as refused:
            oai.chat.completions.create(model="m", messages=messages)
        assert refused.value.param == param
        answered = [*USER, _CALLED, {"role": "tool", "tool_call_id": "call_1", "content": "x"}]
        assert oai.chat.completions.create(model="m", messages=answered).choices


def test_a_strict_fake_refuses_tool_results_that_answer_no_tool_use() -> None:
    use: Any = {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "f"}]}
    use["content"][0]["input"] = {}
    result: Any = {"type": "tool_result", "tool_use_id": "tu_1", "content": "x"}
    with (
        FakeProvider(strict=True) as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        stray: Any = [{"role": "user", "content": [result]}]
        with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
            claude.messages.create(model="m", max_tokens=9, messages=stray)
        left: Any = [*USER, use, *USER]
        with pytest.raises(anthropic.BadRequestError, match=r"messages\.1: `tool_use` ids"):
            claude.messages.create(model="m", max_tokens=9, messages=left)
        answered: Any = [*USER, use, {"role": "user", "content": [result]}]
        assert claude.messages.create(model="m", max_tokens=9, messages=answered).content


@pytest.mark.parametrize("stream", [False, True])
def test_responses_can_leave_usage_out(
    fake: FakeProvider, oai: openai.OpenAI, stream: bool
) -> None:
    """``Fault(omit_usage=True)`` left usage out of chat and Messages answers only."""
    fake.script(Fault(omit_usage=True), None)
    for expected in (None, 7):  # "find my order": 3 words + 4
        if stream:
            events = list(oai.responses.create(model="m", input="find my order", stream=True))
            completed = events[-1]
            assert isinstance(completed, ResponseCompletedEvent)
            answer = completed.response
        else:
            answer = oai.responses.create(model="m", input="find my order")
        assert answer.output_text == "Echo: find my order"
        assert (answer.usage and answer.usage.input_tokens) == expected
