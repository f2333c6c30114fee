"""OpenAI-compatible chat answers that servers other than OpenAI's send, read as the answers
they are: Gemini's parallel tool calls streamed whole without an ``index``; a message whose
``content`` is null with its answer elsewhere (OpenAI's audio, vLLM's reasoning cut short);
a stream's last, usage-only chunk without a ``choices`` key (FastChat's)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, StreamChunk
from llmguard_sdk._core.assembly import CallSlots, merge_tool_call_deltas
from llmguard_sdk.transport._chat import ChunkWriter

from .rawserver import RawServer, chat_chunk_event, http_response, sse_head

ASK: Any = [{"role": "user", "content": "weather and time"}]
WEATHER: dict[str, Any] = {
    "id": "function-call-1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
}
TIME: dict[str, Any] = {
    "id": "function-call-2",
    "type": "function",
    "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'},
}


def _gemini_event(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
    """One event as Gemini's OpenAI-compatible endpoint sends it (CRLF lines)."""
    chunk = {
        "choices": [{"delta": {"role": "assistant", **delta}, "finish_reason": finish, "index": 0}],
        "created": 1,
        "id": "x",
        "model": "gemini-2.5-flash",
        "object": "chat.completion.chunk",
        **more,
    }
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


# each parallel call whole, without an index, one call a chunk
GEMINI_CALLS = (
    _gemini_event({"tool_calls": [WEATHER]}),
    _gemini_event({"tool_calls": [TIME]}),
    _gemini_event(
        {},
        "tool_calls",
        usage={"completion_tokens": 10, "prompt_tokens": 5, "total_tokens": 15},
    ),
    b"data: [DONE]\r\n\r\n",
)


def test_gemini_s_parallel_calls_without_an_index_stay_apart() -> None:
    with RawServer(sse_head(), GEMINI_CALLS) as server:
        route = OpenAICompatibleProvider(server.base_url, api_key="k", model="gemini-2.5-flash")
        with Guard([route]) as guard, guard.chat(ASK, stream=True) as stream:
            for _ in stream:
                pass
    assert stream.response.tool_calls == [WEATHER, TIME]
    assert stream.response.finish_reason == "tool_calls"


def test_openai_s_pieces_still_join_by_index() -> None:
    calls: dict[int, dict[str, Any]] = {}
    slots = CallSlots()
    first = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}
    merge_tool_call_deltas(calls, [first], slots)
    merge_tool_call_deltas(calls, [{"index": 0, "function": {"arguments": '{"a"'}}], slots)
    merge_tool_call_deltas(calls, [{"index": 0, "function": {"arguments": ": 1}"}}], slots)
    assert calls == {
        0: {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    }


def test_an_index_less_piece_joins_its_call_unless_it_brings_another_id() -> None:
    calls: dict[int, dict[str, Any]] = {}
    slots = CallSlots()
    for piece in (
        {"id": "a", "function": {"name": "f", "arguments": '{"x"'}},
        {"function": {"arguments": ": 1}"}},  # no id: the call so far
        {"id": "b", "function": {"name": "g", "arguments": "{"}},  # another id: a new call
        {"id": "b", "function": {"arguments": "}"}},  # the same id again: that call
    ):
        merge_tool_call_deltas(calls, [piece], slots)
    assert [(c["id"], c["function"]) for c in calls.values()] == [
        ("a", {"name": "f", "arguments": '{"x": 1}'}),
        ("b", {"name": "g", "arguments": "{}"}),
    ]
    # without the stream's slots, the calls so far are gone on from
    merge_tool_call_deltas(calls, [{"id": "c", "function": {"name": "h", "arguments": "{}"}}])
    assert [c["id"] for c in calls.values()] == ["a", "b", "c"]


def test_the_chat_seam_numbers_gemini_s_calls_apart() -> None:
    writer = ChunkWriter("m")
    indexes = []
    for call in (WEATHER, TIME):
        event = writer.event(StreamChunk(tool_calls=[dict(call)]))
        sent = json.loads(event.decode().removeprefix("data: "))
        indexes += [c["index"] for c in sent["choices"][0]["delta"]["tool_calls"]]
    assert indexes == [0, 1]


def _completion(message: dict[str, Any], finish: str) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26},
    }
    return http_response(json.dumps(body).encode())


AUDIO = {"id": "audio_1", "data": "UklGRg==", "expires_at": 1, "transcript": "Hello there"}
# (the message, its finish, what the answer's metadata holds of it)
NULL_CONTENT: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "openai audio": (
        {"role": "assistant", "content": None, "refusal": None, "audio": AUDIO},
        "stop",
        {"message_fields": {"audio": AUDIO, "content": None}},  # (a drop-in gives it back)
    ),
    "vllm reasoning cut by max_tokens": (
        {"role": "assistant", "reasoning_content": "Let me think", "content": None},
        "length",
        {"reasoning": "Let me think", "message_fields": {"content": None}},
    ),
    "nothing else": (
        {"role": "assistant", "content": None},
        "content_filter",
        {"message_fields": {"content": None}},
    ),
}


@pytest.mark.parametrize("case", list(NULL_CONTENT))
def test_a_message_with_null_content_is_an_answer_asked_once(case: str) -> None:
    message, finish, held = NULL_CONTENT[case]
    with RawServer(_completion(message, finish)) as server:
        route = OpenAICompatibleProvider(server.base_url, api_key="k", model="m")
        with Guard([route]) as guard:
            answer = guard.chat(ASK)
    assert (answer.text, answer.finish_reason) == ("", finish)
    assert answer.usage is not None
    assert answer.usage.output_tokens == 16
    assert held.items() <= answer.metadata.items()
    assert len(server.received) == 1  # not retried as a malformed answer


USAGE_ALONE = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
USAGE_ALONE += b'"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}\n\n'


def test_a_last_usage_chunk_without_choices_ends_the_stream_with_its_usage() -> None:
    parts = (
        chat_chunk_event({"role": "assistant", "content": "Hello"}),
        chat_chunk_event({}, "stop"),
        USAGE_ALONE,
        b"data: [DONE]\n\n",
    )
    with RawServer(sse_head(), parts) as server:
        route = OpenAICompatibleProvider(server.base_url, api_key="k", model="m")
        with Guard([route]) as guard, guard.chat(ASK, stream=True) as stream:
            text = "".join(chunk.text for chunk in stream)
    assert text == stream.response.text == "Hello"
    assert stream.response.finish_reason == "stop"
    usage = stream.response.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (9, 2, False)
    assert len(server.received) == 1
