"""OpenAI's Responses API: a route that calls /v1/responses, and responses.create answered by
the Guard (any route), cached, budgeted and reported like chat."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

import anyio
import openai
import pytest
from openai.types.responses import Response, ResponseCompletedEvent

from llmguard_sdk import (
    CallEvent,
    ChatRequest,
    Guard,
    ProviderError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.client import _async_openai_client, _openai_client
from llmguard_sdk.models import StreamChunk
from llmguard_sdk.providers._responses_wire import Answer, EventWriter
from llmguard_sdk.providers.anthropic import AnthropicStreamState
from llmguard_sdk.providers.responses import (
    OpenAIResponsesProvider,
    ResponsesStreamState,
    parse_response,
)
from llmguard_sdk.providers.wire import StreamState
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, require_module
from .rawserver import RawServer, http_response, sse_head

MakeGuard = Callable[..., Guard]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def _route(fake: FakeProvider, **options: Any) -> Guard:
    provider = OpenAIResponsesProvider(fake.base_url, model=fake.model, name=fake.name)
    options.setdefault("environ", {})
    return Guard(provider, **options)


def test_provider_plain_usage_with_cached_and_reasoning_tokens() -> None:
    with FakeProvider(model="fake-model", prefix_cache=True, prefix_cache_min_tokens=4) as fake:
        guard = _route(fake)
        long = [{"role": "system", "content": "you answer briefly and well"}, *USER]
        guard.chat(long)
        answer = guard.chat(long, extra_body={"reasoning_effort": "high"})
        guard.close()
    assert answer.text == "Echo: hello there"
    assert answer.usage is not None
    assert answer.usage.input_tokens == 15
    assert answer.usage.cached_input_tokens > 0
    assert answer.usage.reasoning_tokens == 8
    assert answer.usage.output_tokens == 3 + 8
    body = fake.requests[-1].body
    assert body is not None
    assert body["reasoning"] == {"effort": "high"}
    assert body["input"][0] == {"role": "system", "content": "you answer briefly and well"}
    assert fake.requests[-1].path == "/v1/responses"


def test_provider_length_tools_and_errors(fake: FakeProvider) -> None:
    guard = _route(fake, retry=None)
    words = [f"w{i}" for i in range(20)]  # (16 is the least max_output_tokens OpenAI takes)
    cut = guard.chat([{"role": "user", "content": " ".join(words)}], max_tokens=16)
    assert (cut.text, cut.finish_reason) == (" ".join(["Echo:", *words[:15]]), "length")
    call = guard.chat(
        USER, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "lookup"}}
    )
    assert call.finish_reason == "tool_calls"
    assert call.tool_calls is not None
    called = call.tool_calls[0]["id"]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", str(called))  # (new at each call)
    assert call.tool_calls == [
        {"id": called, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    ]
    sent = fake.requests[-1].body
    assert sent is not None
    assert sent["tools"] == [
        {"type": "function", "strict": False, "name": "lookup", "parameters": {"type": "object"}}
    ]
    assert sent["tool_choice"] == {"type": "function", "name": "lookup"}
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        guard.chat(USER)
    guard.close()


def test_provider_streams_text_tools_and_usage(fake: FakeProvider) -> None:
    guard = _route(fake)
    with guard.chat(USER, stream=True) as stream:
        text = "".join(c.text for c in stream)
    assert text == "Echo: hello there"
    assert stream.response.usage is not None
    assert stream.response.usage.output_tokens == 3
    with guard.chat(USER, stream=True, tools=TOOLS, tool_choice="required") as stream:
        list(stream)
    assert stream.response.tool_calls is not None
    assert stream.response.tool_calls[0]["function"] == {"name": "lookup", "arguments": "{}"}

    async def run() -> str:
        answer = await guard.achat(USER)
        await guard.aclose()
        return answer.text

    assert anyio.run(run) == "Echo: hello there"


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_responses_create_through_the_guard(
    fake: FakeProvider, make_guard: MakeGuard, route: str
) -> None:
    guard = make_guard(fake) if route == "chat" else _route(fake)
    client = _openai_client(guard)
    response = client.responses.create(
        model="fake-model", instructions="be brief", input="hello there", max_output_tokens=20
    )
    assert isinstance(response, Response)
    assert response.output_text == "Echo: hello there"
    assert response.usage is not None
    assert response.usage.input_tokens == 12  # instructions count as a system message
    assert response.llmguard.route == "primary"  # type: ignore[attr-defined]
    events = list(client.responses.create(model="fake-model", input="hello there", stream=True))
    direct = openai.OpenAI(api_key="sk-x", base_url=fake.base_url, max_retries=0)
    expected = list(direct.responses.create(model="fake-model", input="hello there", stream=True))
    assert [e.type for e in events] == [e.type for e in expected]
    (last, expected_last) = (events[-1], expected[-1])
    assert isinstance(last, ResponseCompletedEvent)
    assert isinstance(expected_last, ResponseCompletedEvent)
    assert last.response.output_text == expected_last.response.output_text
    guard.close()


def test_responses_tools_round_trip(fake: FakeProvider, make_guard: MakeGuard) -> None:
    client = _openai_client(_route(fake))
    tools: Any = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    first = client.responses.create(model="m", input="find it", tools=tools, tool_choice="required")
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, call.arguments) == ("lookup", "{}")
    follow_up: Any = [
        {"role": "user", "content": "find it"},
        {"type": "function_call", "call_id": call.call_id, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": call.call_id, "output": "found"},
    ]
    second = client.responses.create(model="m", input=follow_up, tools=tools)
    assert second.output_text == "Echo: find it"
    sent = fake.requests[-1].body
    assert sent is not None
    assert sent["input"][1:] == follow_up[1:]  # the Responses route sends the items back
    chat = _openai_client(make_guard(fake))  # a chat route gets them as chat messages
    assert chat.responses.create(model="m", input=follow_up).output_text == "Echo: find it"
    messages = fake.requests[-1].body["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call.call_id
    assert messages[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "found"}


def test_cache_budget_and_events_treat_responses_like_chat(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    prices = PriceTable.default_table().with_prices({"fake-model": Price(input=100, output=200)})
    guard = make_guard(
        fake,
        cache=True,
        hooks=[events.append],
        budgets=Budgets([Budget(limit_usd=1.0)], prices=prices),
    )
    client = _openai_client(guard)
    first = client.responses.create(model="fake-model", input="hello there")
    again = client.responses.create(model="fake-model", input="hello there")
    assert first.llmguard.route == "primary"
    assert again.llmguard.route == "cache"
    assert again.output_text == first.output_text
    assert len(fake.requests) == 1
    assert [e.route for e in events] == ["primary", "cache"]
    assert events[0].cost_usd == pytest.approx((6 * 100 + 3 * 200) / 1e6)
    with pytest.raises(Exception, match="previous_response_id"):
        client.responses.create(model="m", input="x", previous_response_id="resp_1")


def test_reasoning_tokens_reach_the_chat_shape_too(fake: FakeProvider) -> None:
    client = _openai_client(_route(fake))
    completion = client.chat.completions.create(model="m", messages=USER, reasoning_effort="low")
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 2
    response = client.responses.create(model="m", input="hi", reasoning={"effort": "medium"})
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 4


_JSON_DELTA = {"type": "input_json_delta", "partial_json": "{"}


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (ResponsesStreamState, {"type": "response.failed", "response": None}),
        (ResponsesStreamState, {"type": "response.failed", "response": [1]}),
        (
            ResponsesStreamState,
            {"type": "response.function_call_arguments.delta", "output_index": []},
        ),
        (AnthropicStreamState, {"type": "content_block_delta", "index": [], "delta": _JSON_DELTA}),
        (AnthropicStreamState, {"type": "content_block_stop", "index": {"a": 1}}),
    ],
)
def test_hostile_stream_events_are_provider_errors_or_nothing(
    state: type[StreamState], event: dict[str, Any]
) -> None:
    decoding = state("r", time.monotonic() + 60)
    decoding.accept(200, {"content-type": "text/event-stream"})
    with contextlib.suppress(ProviderError):  # AttributeError / TypeError (unhashable) before
        list(decoding.feed(b"data: " + json.dumps(event).encode() + b"\n\n"))


@pytest.mark.parametrize("content", [353, True, "text"])
def test_a_responses_message_whose_content_is_no_list_is_read_without_crashing(
    content: object,
) -> None:
    body = {"output": [{"type": "message", "content": content}], "status": "completed"}
    answer = parse_response(
        200, {"content-type": "application/json"}, json.dumps(body).encode(), route="r"
    )
    assert answer.text == ""  # a TypeError before ("'int' object is not iterable")


def _upstream(*chunks: StreamChunk) -> bytes:
    """A Responses stream of ``chunks``, as OpenAI's Responses API sends one."""
    writer = EventWriter(Answer("resp_up", "m"))
    return writer.start() + b"".join(writer.chunk(c) for c in chunks) + writer.end()


def _pieces(client: openai.OpenAI) -> tuple[list[Any], list[Any]]:
    events: list[Any] = list(client.responses.create(model="m", input="hi", stream=True))
    kinds = ("response.refusal.delta", "response.output_text.delta")
    deltas = [(e.type, e.delta, getattr(e, "logprobs", None)) for e in events if e.type in kinds]
    return deltas, events[-1].response.output[0].model_dump()["content"]


_TOKEN = {"token": "Hi", "logprob": -0.5, "top_logprobs": []}


@pytest.mark.parametrize(
    "chunks",
    [
        (
            StreamChunk(metadata={"refusal": "I cannot "}),
            StreamChunk(metadata={"refusal": "do that."}),
        ),
        (StreamChunk(text="Hi", metadata={"logprobs": {"content": [_TOKEN]}}),),
    ],
    ids=["refusal", "logprobs"],
)
def test_a_responses_route_passes_on_refusals_and_logprobs(chunks: tuple[StreamChunk, ...]) -> None:
    # the Responses route read only text deltas: an upstream refusal came back empty, and
    # the text's logprobs were lost, in streams and in plain answers
    events = _upstream(*chunks, StreamChunk(finish_reason="stop"))
    with RawServer(sse_head(), (events,)) as raw:
        direct = openai.OpenAI(api_key="sk-x", base_url=raw.base_url, max_retries=0)
        expected = _pieces(direct)
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            got = _pieces(_openai_client(guard))
    assert got == expected
    writer = EventWriter(Answer("resp_up", "m"))
    for chunk in chunks:
        writer.chunk(chunk)
    body = json.dumps(writer.answer.body()).encode()
    with RawServer(http_response(body)) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            plain = guard.chat(USER).metadata
    streamed = writer.answer
    assert plain.get("refusal", "") == streamed.refusal
    assert plain.get("logprobs", {}).get("content", []) == streamed.logprobs


def test_a_failed_response_keeps_its_headers_and_body() -> None:
    """A 200 Responses answer whose ``status`` is ``failed`` raised the error it names without
    the answer's headers (its request id, its rate-limit counters) or body."""
    error = {"code": "rate_limit_exceeded", "message": "slow down"}
    body = json.dumps(
        {"id": "resp_1", "object": "response", "status": "failed", "error": error, "output": []}
    ).encode()
    answer = (
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: req_42\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body
    with RawServer(answer) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        request = ChatRequest.model_validate({"messages": USER})
        try:
            with pytest.raises(RateLimitedError) as info:
                route.complete(request, model="m", deadline=time.monotonic() + 5)
        finally:
            route.close()
    assert "slow down" in str(info.value)
    assert info.value.headers.get("x-request-id") == "req_42"
    assert info.value.body is not None
    assert "rate_limit_exceeded" in info.value.body


@pytest.mark.parametrize("streaming", [False, True])
def test_a_drop_in_response_is_valid_by_openai_s_own_types(
    fake: FakeProvider, make_guard: MakeGuard, streaming: bool
) -> None:
    """openai-python's ``InputTokensDetails`` requires ``cache_write_tokens`` (the input
    tokens written to the cache) beside ``cached_tokens``; the drop-in answer had only the
    latter, so a client validating the body with openai's types (``Response.model_validate``)
    refused it."""
    client = _openai_client(make_guard(fake, retry=None))
    if streaming:
        events = list(client.responses.create(model="fake-model", input="hi", stream=True))
        body = events[-1].response.model_dump(mode="json")
    else:
        raw = client.responses.with_raw_response.create(model="fake-model", input="hi")
        body = raw.http_response.json()
    response = Response.model_validate(body)
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.input_tokens_details.cache_write_tokens == 0
    assert response.usage.input_tokens_details.cached_tokens == 0


def test_logprobs_asked_through_the_responses_api_are_asked_of_a_chat_route(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # the Responses API asks with include=["message.output_text.logprobs"] (and top_logprobs);
    # the include was dropped and top_logprobs passed on alone: the route was never asked
    # for logprobs, and OpenAI's chat completions refuse top_logprobs without logprobs
    client = _openai_client(make_guard(fake))
    asked = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    client.responses.create(model="fake-model", input="hello there", **asked)
    body = fake.requests[-1].body or {}
    assert (body.get("logprobs"), body.get("top_logprobs")) == (True, 2)
    client.responses.create(model="fake-model", input="hello there", top_logprobs=2)
    body = fake.requests[-1].body or {}  # no logprobs in the answer without the include
    assert "logprobs" not in body
    assert "top_logprobs" not in body
    agents = require_module("agents", "openai-agents is a dev dependency")
    agents.set_tracing_disabled(True)
    model = agents.OpenAIResponsesModel(
        model="fake-model", openai_client=_async_openai_client(make_guard(fake))
    )
    settings = agents.ModelSettings(top_logprobs=3)
    agent = agents.Agent(name="h", instructions="Answer.", model=model, model_settings=settings)
    assert agents.Runner.run_sync(agent, "hello there").final_output == "Echo: hello there"
    body = fake.requests[-1].body or {}
    assert (body.get("logprobs"), body.get("top_logprobs")) == (True, 3)
