"""OpenAI-compatible chat answers that servers other than OpenAI's send, read as the answers
they are: Gemini's parallel tool calls streamed whole without an ``index``."""

from __future__ import annotations

import json
from typing import Any

from llmguard_sdk import Guard, OpenAICompatibleProvider, StreamChunk
from llmguard_sdk._core.assembly import CallSlots, merge_tool_call_deltas
from llmguard_sdk.transport._chat import ChunkWriter

from .rawserver import RawServer, sse_head

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
