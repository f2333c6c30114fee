"""AnthropicProvider end to end against FakeProvider speaking /v1/messages (and raw servers)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    AuthenticationError,
    BadRequestError,
    ChatRequest,
    ConfigurationError,
    ContextLengthExceededError,
    Guard,
    MalformedResponseError,
    Message,
    PromptBuilder,
    ProviderUnavailableError,
    RateLimitedError,
    StreamInterruptedError,
)
from llmguard_sdk.prompts import PrefixCacheStats
from llmguard_sdk.providers.anthropic import (
    anthropic_params,
    build_anthropic_payload,
    parse_anthropic_message,
)
from llmguard_sdk.providers.wire import usage_from_payload
from llmguard_sdk.testing import FakeProvider, Fault

from .rawserver import RawServer, http_response, sse_head

QUESTION = [Message(role="user", content="What is a circuit breaker?")]
STATIC = " ".join(f"Rule {i}: answer from the handbook and cite the rule." for i in range(40))


@pytest.fixture
def api() -> Iterator[FakeProvider]:
    with FakeProvider(model="claude-fake", prefix_cache=True) as server:
        yield server


@pytest.fixture
def guard(api: FakeProvider) -> Iterator[Guard]:
    provider = AnthropicProvider(api.base_url, api_key="test-key", model="claude-fake")
    with Guard(provider, timeout=10, retry=None, environ={}) as guard:
        yield guard


def deadline(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


# -- plain calls ---------------------------------------------------------------------------


def test_a_call_through_the_guard_sends_the_messages_api_shape(
    api: FakeProvider, guard: Guard
) -> None:
    answer = guard.chat(
        [{"role": "system", "content": "Be brief."}, *QUESTION],
        max_tokens=50,
        temperature=0.5,
        stop="END",
    )
    assert answer.text == "Echo: What is a circuit breaker?"
    assert answer.route == "anthropic"
    assert answer.finish_reason == "stop"
    assert answer.id == "msg_fake_1"
    assert answer.model == "claude-fake"
    assert answer.usage is not None
    assert answer.usage.input_tokens == 4 + 2 + 4 + 5  # system and user, each framed by 4
    assert answer.usage.output_tokens == 6
    received = api.requests[-1]
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == "test-key"
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers
    assert received.body == {
        "model": "claude-fake",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": "What is a circuit breaker?"}],
        "temperature": 0.5,
        "stop_sequences": ["END"],
    }


def test_max_tokens_defaults_and_a_short_limit_reads_as_length(api: FakeProvider) -> None:
    provider = AnthropicProvider(api.base_url, model="claude-fake", default_max_tokens=77)
    try:
        answer = provider.complete(ChatRequest(messages=QUESTION), model="m", deadline=deadline())
        assert api.requests[-1].body["max_tokens"] == 77
        short = provider.complete(
            ChatRequest(messages=QUESTION, max_tokens=2), model="m", deadline=deadline()
        )
    finally:
        provider.close()
    assert answer.finish_reason == "stop"
    assert short.text == "Echo: What"
    assert short.finish_reason == "length"


def test_streams_yield_text_and_end_with_usage(api: FakeProvider, guard: Guard) -> None:
    api.always(Fault(inter_token_delay=0.01))
    with guard.chat(QUESTION, stream=True, max_tokens=50) as stream:
        pieces = [chunk.text for chunk in stream]
    assert "".join(pieces) == "Echo: What is a circuit breaker?"
    response = stream.response
    assert response is not None
    assert response.finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.output_tokens == 6
    assert response.usage.input_tokens == 9
    assert response.timings.first_token_s is not None
    assert api.requests[-1].body["stream"] is True
    assert "content-type" in response.headers  # the first chunk carries the HTTP headers


def test_async_calls_and_streams(api: FakeProvider) -> None:
    async def run() -> tuple[str, str]:
        provider = AnthropicProvider(api.base_url, model="claude-fake")
        async with Guard(provider, timeout=10, environ={}) as guard:
            answer = await guard.achat(QUESTION, max_tokens=20)
            stream = await guard.achat(QUESTION, max_tokens=20, stream=True)
            async with stream:
                text = "".join([chunk.text async for chunk in stream])
        return answer.text, text

    plain, streamed = anyio.run(run)
    assert plain == streamed == "Echo: What is a circuit breaker?"


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault(status=429, retry_after=7), RateLimitedError),
        (Fault(status=529), ProviderUnavailableError),
        (Fault(status=401), AuthenticationError),
        (Fault(status=400), BadRequestError),
        (Fault(malformed_json=True), MalformedResponseError),
        (Fault(missing_fields=True), MalformedResponseError),
        (Fault(wrong_content_type=True), MalformedResponseError),
        (Fault(reset=True), ProviderUnavailableError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_provider_failures_become_typed_errors(
    api: FakeProvider, fault: Fault, error: type[Exception], stream: bool
) -> None:
    api.script(fault)
    provider = AnthropicProvider(api.base_url, model="claude-fake")
    request = ChatRequest(messages=QUESTION, max_tokens=20)

    def call() -> object:
        if stream:
            return list(provider.stream(request, model="m", deadline=deadline()))
        return provider.complete(request, model="m", deadline=deadline())

    try:
        with pytest.raises(error) as caught:
            call()
    finally:
        provider.close()
    if isinstance(caught.value, RateLimitedError):
        assert caught.value.retry_after == 7
        assert caught.value.status_code == 429


def test_a_missing_version_header_and_a_too_long_prompt_are_request_errors(
    api: FakeProvider,
) -> None:
    provider = AnthropicProvider(api.base_url, model="claude-fake", anthropic_version="")
    with pytest.raises(BadRequestError, match="anthropic-version"):
        provider.complete(ChatRequest(messages=QUESTION), model="m", deadline=deadline())
    provider.close()
    body = b'{"type":"error","error":{"type":"invalid_request_error",' + (
        b'"message":"prompt is too long: 210000 tokens > 200000 maximum"}}'
    )
    with RawServer(http_response(body, status="400 Bad Request")) as raw:
        provider = AnthropicProvider(raw.base_url, model="m")
        with pytest.raises(ContextLengthExceededError, match="prompt is too long"):
            provider.complete(ChatRequest(messages=QUESTION), model="m", deadline=deadline())
        provider.close()


def test_a_stream_cut_after_text_is_interrupted_with_the_partial_text(api: FakeProvider) -> None:
    api.script(Fault(cut_stream_after=2))
    provider = AnthropicProvider(api.base_url, model="claude-fake")
    request = ChatRequest(messages=QUESTION, max_tokens=20)
    with pytest.raises(StreamInterruptedError) as caught:
        list(provider.stream(request, model="m", deadline=deadline()))
    provider.close()
    assert caught.value.partial_text == "Echo: What"


def test_an_error_event_in_the_stream_is_a_provider_error() -> None:
    events = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m1","model":"x",'
        b'"usage":{"input_tokens":3,"output_tokens":0}}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n'
    )
    with RawServer(sse_head(), (events,)) as raw:
        provider = AnthropicProvider(raw.base_url, model="m")
        request = ChatRequest(messages=QUESTION)
        with pytest.raises(ProviderUnavailableError, match="Overloaded") as caught:
            list(provider.stream(request, model="m", deadline=deadline()))
        provider.close()
    assert not isinstance(caught.value, StreamInterruptedError)  # nothing was shown yet


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        AnthropicProvider("ftp://example.invalid")
    with pytest.raises(ConfigurationError):
        AnthropicProvider(api_key=" padded ")
    with pytest.raises(ConfigurationError):
        AnthropicProvider(default_max_tokens=0)
    assert "AnthropicProvider" in repr(AnthropicProvider(name="claude"))


# -- tools ---------------------------------------------------------------------------------

TOOL_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order": "A1"}},
    ],
    "stop_reason": "tool_use",
    "usage": {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
    },
}


def test_tool_use_answers_become_openai_shaped_tool_calls() -> None:
    response = parse_anthropic_message(
        200, {"content-type": "application/json"}, json.dumps(TOOL_ANSWER).encode(), route="a"
    )
    assert response.text == "Let me look."
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"order":"A1"}'},
        }
    ]
    assert response.usage is not None
    assert response.usage.input_tokens == 130
    assert response.usage.cached_input_tokens == 100
    assert response.usage.cache_write_input_tokens == 20


def test_streamed_tool_use_is_assembled_by_the_guard() -> None:
    def event(kind: str, **data: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    events = (
        event(
            "message_start",
            message={"id": "m", "model": "x", "usage": {"input_tokens": 7, "output_tokens": 0}},
        )
        + event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Checking"})
        + event(
            "content_block_start",
            index=1,
            content_block={"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {}},
        )
        + event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '{"order":'},
        )
        + event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '"B2"}'},
        )
        + event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 12})
        + event("message_stop")
    )
    with RawServer(sse_head(), (events,)) as raw:
        guard = Guard(AnthropicProvider(raw.base_url, model="x"), timeout=10, environ={})
        with guard, guard.chat(QUESTION, stream=True) as stream:
            assert "".join(c.text for c in stream) == "Checking"
    response = stream.response
    assert response is not None
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        {
            "id": "toolu_9",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"order":"B2"}'},
        }
    ]
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 12)


def test_openai_shaped_requests_are_translated() -> None:
    messages: list[Any] = [  # dicts in OpenAI's shape: ChatRequest reads them as Messages
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is on it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/i.png"}},
            ],
        },
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "y"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "found x"},
        {"role": "tool", "tool_call_id": "call_2", "content": "found y"},
    ]
    request = ChatRequest(
        messages=messages,
        tools=[{"type": "function", "function": {"name": "lookup", "description": "Find."}}],
        tool_choice="required",
        seed=3,
        response_format={"type": "json_object"},
        extra_body={"prompt_cache_key": "k", "metadata": {"user_id": "u"}},
    )
    payload = build_anthropic_payload(request, model="claude-x", stream=False)
    assert payload["system"] == [{"type": "text", "text": "Be brief."}]
    user, assistant, results = payload["messages"]
    assert user["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    assert user["content"][2]["source"] == {"type": "url", "url": "https://example.invalid/i.png"}
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "x"}},
            {"type": "tool_use", "id": "call_2", "name": "lookup", "input": {"q": "y"}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "found x"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "found y"},
        ],
    }
    assert payload["tools"] == [
        {"name": "lookup", "description": "Find.", "input_schema": {"type": "object"}}
    ]
    assert payload["tool_choice"] == {"type": "any"}
    assert payload["metadata"] == {"user_id": "u"}
    for left_out in ("seed", "response_format", "prompt_cache_key"):
        assert left_out not in payload


# -- prompt caching end to end -------------------------------------------------------------


def test_builder_prompts_get_cache_breakpoints_and_read_the_cache(
    api: FakeProvider, guard: Guard
) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    builder = PromptBuilder("handbook", instructions=STATIC, tools=[tool], drift=None)
    answers = [
        guard.chat(request=builder.build(q, tenant="acme").request(max_tokens=30))
        for q in ("First question?", "Second question?", "Third one?")
    ]
    body = api.requests[-1].body
    assert body["system"] == [
        {"type": "text", "text": STATIC, "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "prompt_cache_key" not in body
    assert "cache_control" not in json.dumps(body["messages"])
    usages = [a.usage for a in answers]
    assert all(u is not None for u in usages)
    first, second, third = usages
    assert first is not None
    assert second is not None
    assert third is not None
    assert first.cached_input_tokens == 0
    assert first.cache_write_input_tokens > 200
    assert second.cached_input_tokens == first.cache_write_input_tokens
    assert second.cache_write_input_tokens == 0
    assert third.cached_input_tokens == first.cache_write_input_tokens
    assert second.input_tokens > second.cached_input_tokens  # the question itself is not cached


def test_without_breakpoints_the_emulated_anthropic_cache_reads_nothing(
    api: FakeProvider, guard: Guard
) -> None:
    for question in ("First question?", "Second question?"):
        answer = guard.chat(
            [{"role": "system", "content": STATIC}, {"role": "user", "content": question}]
        )
        assert answer.usage is not None
        assert answer.usage.cached_input_tokens == 0
        assert answer.usage.cache_write_input_tokens == 0
    assert api.stats.cached_input_tokens == 0


def test_a_history_breakpoint_caches_the_conversation_so_far(
    api: FakeProvider, guard: Guard
) -> None:
    builder = PromptBuilder("chat", instructions=STATIC, drift=None)
    history = [
        {"role": "user", "content": "My bike squeaks. " * 20},
        {"role": "assistant", "content": "Oil the chain. " * 20},
    ]
    for question in ("Which oil?", "How often?"):
        request = builder.build(question, history=history).request(cache_history=True)
        answer = guard.chat(request=request)
    body = api.requests[-1].body
    assert body["messages"][1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert answer.usage is not None
    history_tokens = 2 * 4 + 3 * 20 + 3 * 20
    assert answer.usage.cached_input_tokens >= history_tokens
    params = builder.build("Which oil?", history=history).anthropic_params(cache_history=True)
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert params["messages"][-1] == {"role": "user", "content": "Which oil?"}


def test_explicit_breakpoints_are_sent_as_they_are() -> None:
    marked = {"type": "text", "text": "Long context.", "cache_control": {"type": "ephemeral"}}
    request = ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": [marked]}, {"role": "user", "content": "q"}],
            "metadata": {"llmguard.prompt.static_messages": "0"},
        }
    )
    params = anthropic_params(request)
    assert params["messages"][0]["content"] == [marked]
    assert json.dumps(params).count("cache_control") == 1


@pytest.mark.parametrize("count", ["\u00b2", "\u0661", "1\u00b2"])
@pytest.mark.parametrize(
    "key", ["llmguard.prompt.static_messages", "llmguard.prompt.cache_history"]
)
def test_a_non_ascii_digit_count_in_the_metadata_is_ignored(key: str, count: str) -> None:
    """``_int`` took "\u00b2" for a number (``str.isdigit``), then ``int()`` raised ValueError."""
    messages: list[Any] = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    params = anthropic_params(ChatRequest(messages=messages, metadata={key: count}))
    assert params == anthropic_params(ChatRequest(messages=messages))  # as if none were given


def test_anthropic_usage_is_read_from_streams_and_reaches_the_hit_ratio(api: FakeProvider) -> None:
    stats = PrefixCacheStats()
    builder = PromptBuilder("handbook", instructions=STATIC, drift=None)
    provider = AnthropicProvider(api.base_url, model="claude-fake")
    with Guard(provider, hooks=[stats], timeout=10, environ={}) as guard:
        for question in ("One?", "Two?", "Three?", "Four?"):
            request = builder.build(question).request(max_tokens=10)
            with guard.chat(request=request, stream=True, feature="handbook") as stream:
                for _ in stream:
                    pass
    figures = stats.feature("handbook")
    assert figures.calls == 4
    assert figures.calls_with_hits == 3
    assert figures.cached_tokens == api.stats.cached_input_tokens
    assert figures.written_tokens == api.stats.cache_write_input_tokens
    assert 0.5 < figures.hit_ratio < 1.0


def test_usage_parsing_of_both_shapes() -> None:
    openai, _ = usage_from_payload(
        {
            "prompt_tokens": 120,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 100},
        }
    )
    anthropic, _ = usage_from_payload(
        {
            "input_tokens": 20,
            "output_tokens": 4,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": None,
        }
    )
    assert openai is not None
    assert anthropic is not None
    assert (openai.input_tokens, openai.cached_input_tokens) == (120, 100)
    assert (anthropic.input_tokens, anthropic.cached_input_tokens) == (120, 100)
    assert anthropic.cache_write_input_tokens == 0


def test_a_message_stop_without_its_blank_line_ends_the_stream() -> None:
    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    events = (
        event("message_start", message={"id": "m", "model": "x", "usage": {"input_tokens": 3}})
        + event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
        + event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1})
        + event("message_stop")[:-1]  # the server closes before the blank line
    )
    with RawServer(sse_head(), (events.encode(),)) as raw:
        provider = AnthropicProvider(raw.base_url, model="m")
        chunks = list(
            provider.stream(ChatRequest(messages=QUESTION), model="m", deadline=deadline())
        )
        provider.close()
    assert "".join(chunk.text for chunk in chunks) == "Hi"


def test_a_streamed_tool_use_without_input_has_the_arguments_a_whole_answer_has() -> None:
    def event(kind: str, **data: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    tool = {"type": "tool_use", "id": "toolu_0", "name": "now", "input": {}}
    events = (
        event("message_start", message={"id": "m", "model": "x", "usage": {"input_tokens": 7}})
        + event("content_block_start", index=0, content_block=tool)
        + event(
            "content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": ""}
        )
        + event("content_block_stop", index=0)
        + event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 3})
        + event("message_stop")
    )
    with RawServer(sse_head(), (events,)) as raw:
        guard = Guard(AnthropicProvider(raw.base_url, model="x"), timeout=10, environ={})
        with guard, guard.chat(QUESTION, stream=True) as stream:
            list(stream)
    assert stream.response is not None
    assert stream.response.tool_calls is not None
    # "" before: json.loads fails on it; the whole (non-streamed) answer says "{}"
    assert stream.response.tool_calls[0]["function"]["arguments"] == "{}"
    whole = {**TOOL_ANSWER, "content": [tool]}
    parsed = parse_anthropic_message(
        200, {"content-type": "application/json"}, json.dumps(whole).encode(), route="a"
    )
    assert parsed.tool_calls is not None
    assert parsed.tool_calls[0]["function"]["arguments"] == "{}"


def test_an_answer_cut_at_the_context_window_finishes_as_length() -> None:
    """``model_context_window_exceeded`` (the output ran into the context window) was passed on
    as it is, so code that tells a cut answer by ``finish_reason == "length"`` missed it."""
    answer = {**TOOL_ANSWER, "content": [{"type": "text", "text": "Partial"}]}
    answer["stop_reason"] = "model_context_window_exceeded"
    response = parse_anthropic_message(
        200, {"content-type": "application/json"}, json.dumps(answer).encode(), route="a"
    )
    assert response.finish_reason == "length"


def test_a_200_answer_that_is_an_anthropic_error_keeps_its_kind_and_message() -> None:
    """A gateway's 200 answer holding Anthropic's error object was a MalformedResponseError
    ("response is not a message object") without the error's kind or message."""
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    headers = {"content-type": "application/json", "request-id": "req_7"}
    with pytest.raises(ProviderUnavailableError) as info:
        parse_anthropic_message(200, headers, json.dumps(error).encode(), route="a")
    assert "Overloaded" in str(info.value)
    assert info.value.headers["request-id"] == "req_7"
