"""``Anthropic(http_client=guard.http_client())`` and ``anthropic_client(guard)``: anthropic's
SDK answered by the Guard, whatever route serves."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    Guard,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    ProviderUnavailableError,
)
from llmguard_sdk.client import ChunkStream, anthropic_client, async_anthropic_client
from llmguard_sdk.errors import LLMGuardError
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .conftest import require_module
from .rawserver import RawServer, http_response, sse_head

MakeGuard = Callable[..., Guard]
ASK: Any = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def anthropic() -> Any:
    return require_module("anthropic", "anthropic is a dev dependency")


def test_messages_through_the_seam_from_a_chat_route(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    sdk = anthropic.Anthropic(
        api_key="sk-not-sent",
        base_url="http://guard.test",
        http_client=http_client(make_guard(fake)),
    )
    message = sdk.messages.create(model="m", max_tokens=20, system="be brief", messages=ASK)
    assert isinstance(message, anthropic.types.Message)
    assert message.content[0].text == "Echo: hello there"
    assert (message.stop_reason, message.usage.input_tokens) == ("end_turn", 12)
    sent = fake.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body is not None
    assert sent.body["messages"][0] == {"role": "system", "content": "be brief"}
    with sdk.messages.stream(model="m", max_tokens=20, messages=ASK) as stream:
        assert "".join(stream.text_stream) == "Echo: hello there"
        assert stream.get_final_message().usage.output_tokens == 3


def test_stream_events_match_the_provider_s_own(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    direct = anthropic.Anthropic(api_key="sk-x", base_url=fake.url, max_retries=0)
    seam = anthropic.Anthropic(
        api_key="sk-x", base_url="http://guard.test", http_client=http_client(make_guard(fake))
    )
    options: dict[str, Any] = {"model": "fake-model", "max_tokens": 20, "messages": ASK}
    expected = list(direct.messages.create(stream=True, **options))
    got = list(seam.messages.create(stream=True, **options))
    assert [e.type for e in got] == [e.type for e in expected]
    deltas = [e.delta.text for e in got if e.type == "content_block_delta"]
    assert deltas == [e.delta.text for e in expected if e.type == "content_block_delta"]


def test_tools_and_errors(anthropic: Any, fake: FakeProvider, make_guard: MakeGuard) -> None:
    sdk = anthropic.Anthropic(
        api_key="sk-x",
        base_url="http://guard.test",
        http_client=http_client(make_guard(fake, retry=None)),
    )
    tools = [{"name": "lookup", "description": "find", "input_schema": {"type": "object"}}]
    turns: Any = [
        *ASK,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"q": "x"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "found"}],
        },
    ]
    sdk.messages.create(model="m", max_tokens=20, messages=turns, tools=tools)
    body = fake.requests[-1].body
    assert body is not None
    assert body["tools"][0]["function"]["name"] == "lookup"
    assert body["messages"][1]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q": "x"}',
    }
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "tu_1", "content": "found"}
    fake.always(Fault(status=503))
    with pytest.raises(anthropic.InternalServerError) as caught:
        sdk.messages.create(model="m", max_tokens=20, messages=ASK)
    assert caught.value.status_code == 503
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert len(fake.requests) == 2  # x-should-retry: false: anthropic's SDK did not retry


def test_anthropic_client_is_anthropic_s_own(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, retry=None)
    client = anthropic_client(guard)
    assert isinstance(client, anthropic.Anthropic)
    message = client.messages.create(model="m", max_tokens=20, messages=ASK)
    assert message.llmguard.route == "primary"
    fake.always(Fault(status=503))
    with pytest.raises(anthropic.InternalServerError) as caught:
        client.messages.create(model="m", max_tokens=20, messages=ASK)
    error = caught.value.response.extensions["llmguard_error"]
    assert isinstance(error, ProviderUnavailableError)
    fake.always(None)

    async def run() -> str:
        aclient = async_anthropic_client(guard)
        answer = await aclient.messages.create(model="m", max_tokens=20, messages=ASK)
        await guard.aclose()
        return str(answer.content[0].text)

    assert anyio.run(run) == "Echo: hello there"


def test_anthropic_client_takes_a_large_max_tokens_without_streaming(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # with anthropic's default timeout kept, its SDK refused a plain call whose max_tokens
    # might take over 10 minutes (ValueError "Streaming is required ...") before sending it:
    # the Guard's timeout bounds the call, as in guard.client()
    guard = make_guard(fake, retry=None)
    message = anthropic_client(guard).messages.create(model="m", max_tokens=64000, messages=ASK)
    assert message.content[0].text == "Echo: hello there"

    async def run() -> str:
        client = async_anthropic_client(guard)
        answer = await client.messages.create(model="m", max_tokens=64000, messages=ASK)
        return str(answer.content[0].text)

    assert anyio.run(run) == "Echo: hello there"
    fake.always(Fault(latency=3.0))
    with pytest.raises(anthropic.APIStatusError) as caught:  # a per-call timeout still applies
        anthropic_client(guard).messages.create(model="m", max_tokens=20, messages=ASK, timeout=0.3)
    assert caught.value.status_code == 504


def test_anthropic_client_needs_no_openai(anthropic: Any) -> None:
    # "Needs the anthropic package": it imported openai too (ModuleNotFoundError without it)
    script = textwrap.dedent(
        """
        import sys
        sys.modules["openai"] = None  # as if it were not installed
        from llmguard_sdk import Guard, OpenAICompatibleProvider
        from llmguard_sdk.client import anthropic_client
        from llmguard_sdk.testing import FakeProvider

        with FakeProvider() as fake:
            guard = Guard(OpenAICompatibleProvider(fake.base_url), environ={})
            ask = [{"role": "user", "content": "hi"}]
            message = anthropic_client(guard).messages.create(model="m", max_tokens=9, messages=ask)
            print(message.content[0].text, message.llmguard.attempts)
            guard.close()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Echo: hi 1"


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        # "refusal" (content_filter in between) came back as "end_turn"
        ("refusal", "content_filter"),
        # "pause_turn" (a long turn of server tools paused half-way: the answer is incomplete)
        # came back as finish_reason "stop" and stop_reason "end_turn"
        ("pause_turn", "pause_turn"),
    ],
)
def test_claudes_stop_reason_is_kept(anthropic: Any, stop_reason: str, finish_reason: str) -> None:
    body = (
        b'{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",'
        b'"content":[],"stop_reason":"%s","stop_sequence":null,'
        b'"usage":{"input_tokens":5,"output_tokens":0}}' % stop_reason.encode()
    )
    with RawServer(http_response(body)) as raw:
        guard = Guard(
            AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x"), environ={}
        )
        assert guard.chat(ASK, max_tokens=9).finish_reason == finish_reason
        message = anthropic_client(guard).messages.create(
            model="claude-x", max_tokens=9, messages=ASK
        )
        guard.close()
    assert message.stop_reason == stop_reason


def test_anthropic_client_with_options_keeps_the_guard(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake)
    client = anthropic_client(guard).with_options(timeout=5.0)
    assert client.guard is guard
    message = client.messages.create(model="m", max_tokens=20, messages=ASK)
    assert message.content[0].text == "Echo: hello there"
    assert async_anthropic_client(guard).copy().guard is guard


_ANTHROPIC_LIMITS = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-tokens-reset": "2026-12-03T12:00:30Z",
}


def test_anthropic_s_request_id_and_rate_limit_headers_reach_the_sdk(
    anthropic: Any, fake: FakeProvider
) -> None:
    # OpenAI's x-request-id and x-ratelimit-* were forwarded; Anthropic's request-id and
    # anthropic-ratelimit-* (what its SDK's `_request_id` and callers read) were dropped
    fake.always(Fault(headers=_ANTHROPIC_LIMITS))
    route = AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude")
    with Guard(route, environ={}, retry=None) as guard:
        sdk = anthropic.Anthropic(
            api_key="sk-x", base_url="http://guard.test", http_client=http_client(guard)
        )
        options: dict[str, Any] = {"model": "m", "max_tokens": 20, "messages": ASK}
        plain = sdk.messages.with_raw_response.create(**options)
        with sdk.messages.with_streaming_response.create(stream=True, **options) as streamed:
            streamed.read()
    request_ids = [answer.headers.get("request-id") for answer in (plain, streamed)]
    assert len(set(request_ids)) == 2
    for answer in (plain, streamed):
        assert re.fullmatch(r"req_011C\w{20}", answer.headers.get("request-id", ""))
        for name, value in _ANTHROPIC_LIMITS.items():
            assert answer.headers.get(name) == value
    assert plain.parse()._request_id == request_ids[0]


_FAILED_TOOL: Any = [
    *ASK,
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"q": "x"}}],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "boom", "is_error": True}
        ],
    },
]


def test_a_failed_tool_result_stays_an_error(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # tool_result's is_error was dropped on the way through the seam: an Anthropic route
    # told the model the tool had succeeded with the text "boom"
    route = AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude")
    for guard in (Guard(route, environ={}, retry=None), make_guard(fake, retry=None)):
        with guard:
            sdk = anthropic.Anthropic(
                api_key="sk-x", base_url="http://guard.test", http_client=http_client(guard)
            )
            sdk.messages.create(model="m", max_tokens=20, messages=_FAILED_TOOL)
    anthropic_body, chat_body = fake.requests[-2].body, fake.requests[-1].body
    assert anthropic_body is not None
    assert chat_body is not None
    assert anthropic_body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "boom", "is_error": True}
    ]
    # chat completions has no such field: the tool message goes as before
    assert chat_body["messages"][2] == {"role": "tool", "tool_call_id": "tu_1", "content": "boom"}


_THINKING = {"type": "enabled", "budget_tokens": 1024}


def test_anthropic_only_parameters_reach_anthropic_routes_only(
    anthropic: Any, fake: FakeProvider
) -> None:
    # top_k and thinking (Messages parameters chat completions and Responses lack) went to
    # every route, and OpenAI's API rejects what it does not know
    routes = (
        AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude"),
        OpenAICompatibleProvider(fake.base_url, model="m", name="chat"),
        OpenAIResponsesProvider(fake.base_url, model="m", name="responses"),
    )
    for route in routes:
        with Guard(route, environ={}, retry=None) as guard:
            sdk = anthropic.Anthropic(
                api_key="sk-x", base_url="http://guard.test", http_client=http_client(guard)
            )
            sdk.messages.create(  # (anthropic 2.x takes top_k in extra_body only)
                model="m",
                max_tokens=2000,
                messages=ASK,
                thinking=_THINKING,
                extra_body={"top_k": 5},
            )
    sent = [request.body or {} for request in fake.requests[-3:]]
    assert [request.path for request in fake.requests[-3:]] == [
        "/v1/messages",
        "/v1/chat/completions",
        "/v1/responses",
    ]
    assert (sent[0].get("top_k"), sent[0].get("thinking")) == (5, _THINKING)
    for body in sent[1:]:
        assert "top_k" not in body
        assert "thinking" not in body
    # the rule is the seam's: a caller's own extra_body is sent as given (vLLM takes top_k)
    with Guard(routes[1], environ={}, retry=None) as guard:
        guard.chat(ASK, extra_body={"top_k": 5})
    assert (fake.requests[-1].body or {}).get("top_k") == 5


def test_anthropic_beta_reaches_an_anthropic_route(anthropic: Any, fake: FakeProvider) -> None:
    # anthropic-beta (how anthropic's SDK asks for beta features: `betas=[...]`) was taken
    # for one of the SDK's own headers and dropped, so a beta feature was never turned on
    route = AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude")
    with Guard(route, environ={}, retry=None) as guard:
        sdk = anthropic.Anthropic(
            api_key="sk-x", base_url="http://guard.test", http_client=http_client(guard)
        )
        sdk.beta.messages.create(
            model="m", max_tokens=20, messages=ASK, betas=["context-1m-2025-08-07"]
        )
    sent = fake.requests[-1]
    assert sent.headers.get("anthropic-beta") == "context-1m-2025-08-07"
    assert sent.headers.get("anthropic-version") == "2023-06-01"  # the route's own


_THINKING = {"type": "thinking", "thinking": "Two and two.", "signature": "sig-1"}
_REDACTED = {"type": "redacted_thinking", "data": "opaque"}


def test_thinking_blocks_reach_the_sdk(anthropic: Any) -> None:
    # `thinking` reached an Anthropic route through the seam, but its thinking blocks were
    # dropped from the answer: the SDK saw only the text
    blocks = [_THINKING, _REDACTED, {"type": "text", "text": "Four."}]
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": blocks,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 9},
    }
    options: dict[str, Any] = {"model": "claude-x", "max_tokens": 99, "messages": ASK}
    options["thinking"] = {"type": "enabled", "budget_tokens": 64}
    with RawServer(http_response(json.dumps(body).encode())) as raw:
        direct = anthropic.Anthropic(api_key="sk-x", base_url=raw.base_url, max_retries=0)
        expected = direct.messages.create(**options)
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        with Guard(route, environ={}, retry=None) as guard:
            got = anthropic_client(guard).messages.create(**options)
    assert [b.model_dump() for b in got.content] == [b.model_dump() for b in expected.content]


def _sse(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _block_events(index: int, block: dict[str, Any], *deltas: dict[str, Any]) -> bytes:
    out = _sse("content_block_start", index=index, content_block=block)
    for delta in deltas:
        out += _sse("content_block_delta", index=index, delta=delta)
    return out + _sse("content_block_stop", index=index)


def _thinking_stream() -> bytes:
    """A Messages stream: a thinking block, a redacted one, then the text "Four."."""
    start: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
    }
    start.update(content=[], stop_reason=None, stop_sequence=None)
    return (
        _sse("message_start", message={**start, "usage": {"input_tokens": 5, "output_tokens": 1}})
        + _block_events(
            0,
            {"type": "thinking", "thinking": "", "signature": ""},
            {"type": "thinking_delta", "thinking": "Two and "},
            {"type": "thinking_delta", "thinking": "two."},
            {"type": "signature_delta", "signature": "sig-1"},
        )
        + _block_events(1, _REDACTED)
        + _block_events(2, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Four."})
        + _sse("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 9})
        + _sse("message_stop")
    )


def test_streamed_thinking_blocks_reach_the_sdk(anthropic: Any) -> None:
    # a stream's thinking deltas were skipped: the SDK's final message had only the text
    options: dict[str, Any] = {"model": "claude-x", "max_tokens": 99, "messages": ASK}
    options["thinking"] = {"type": "enabled", "budget_tokens": 64}
    with RawServer(sse_head(), (_thinking_stream(),)) as raw:
        direct = anthropic.Anthropic(api_key="sk-x", base_url=raw.base_url, max_retries=0)
        with direct.messages.stream(**options) as stream:
            expected = stream.get_final_message()
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        with Guard(route, environ={}, retry=None) as guard:
            with anthropic_client(guard).messages.stream(**options) as stream:
                got = stream.get_final_message()
            with guard.chat(ASK, stream=True) as chat:
                list(chat)
    assert [b.model_dump() for b in got.content] == [b.model_dump() for b in expected.content]
    assert chat.response.metadata["thinking"] == [_THINKING, _REDACTED]


def test_a_thinking_block_is_no_empty_chunk_of_a_chat_completions_stream() -> None:
    # the chat-completions wire has no place for thinking: a chunk that carried only a
    # thinking block reached openai's SDK as a chunk with an empty delta
    openai = require_module("openai", "openai is a dev dependency")
    with RawServer(sse_head(), (_thinking_stream(),)) as raw:
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        with Guard(route, environ={}, retry=None) as guard:
            sdk = openai.OpenAI(
                api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
            )
            chunks = list(sdk.chat.completions.create(model="m", messages=ASK, stream=True))
    with RawServer(sse_head(), (_thinking_stream(),)) as raw:  # the stand-in client's chunks
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        with Guard(route, environ={}, retry=None) as guard:
            stand_in = list(ChunkStream(guard.chat(ASK, stream=True)))
    for stream in (chunks, stand_in):
        choices = [c.choices[0] for c in stream if c.choices]
        assert "".join(choice.delta.content or "" for choice in choices) == "Four."
        # (the first chunk may carry the role alone, as OpenAI's do)
        assert all(choice.delta.content or choice.finish_reason for choice in choices[1:])


def test_a_stream_cut_after_a_thinking_block_is_not_replayed() -> None:
    # thinking blocks reach the caller now; a stream cut after one must not be retried, or
    # the caller gets the block again from each attempt
    start: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
    }
    events = _sse("message_start", message={**start, "content": [], "usage": {}}) + _block_events(
        0, _REDACTED
    )
    with RawServer(sse_head(), (events,)) as raw:
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        blocks: list[Any] = []
        guard = Guard(route, environ={})
        with guard, pytest.raises(LLMGuardError), guard.chat(ASK, stream=True) as stream:
            blocks.extend(b for chunk in stream for b in chunk.metadata.get("thinking", ()))
    assert blocks == [_REDACTED]


def test_thinking_blocks_sent_back_reach_an_anthropic_route(
    anthropic: Any, fake: FakeProvider
) -> None:
    # Claude wants the thinking blocks of its last turn back with the tool's result (tool use
    # with thinking on); the seam dropped them from the request
    route = AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude")
    use = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"}
    messages = [
        *ASK,
        {"role": "assistant", "content": [_THINKING, _REDACTED, use]},
        {"role": "user", "content": [result]},
    ]
    tools = [{"name": "add", "description": "adds", "input_schema": {"type": "object"}}]
    with Guard(route, environ={}, retry=None) as guard:
        anthropic_client(guard).messages.create(
            model="claude-x", max_tokens=99, messages=messages, tools=tools
        )
    sent = fake.requests[-1].body
    assert sent is not None
    assert sent["messages"][1]["content"][:2] == [_THINKING, _REDACTED]
    chat_route = OpenAICompatibleProvider(fake.base_url, model="m")  # no such field there
    with Guard(chat_route, environ={}, retry=None) as guard:
        anthropic_client(guard).messages.create(
            model="m", max_tokens=99, messages=messages, tools=tools
        )
    sent = fake.requests[-1].body
    assert sent is not None
    assert sent["messages"][1]["tool_calls"][0]["id"] == "toolu_1"
    assert "thinking" not in sent["messages"][1]
