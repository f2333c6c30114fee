"""A stream that breaks after the caller got part of a tool call: the call's arguments are
JSON cut in the middle, which no route can go on from (a continuation asks for text after
text; the next route's own tool calls were merged by index into the partial one, arguments
run together). So ``continue_interrupted_streams`` does not continue it: the caller gets the
interruption, and the next route is not asked."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, StreamInterruptedError
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, chat_chunk_event, sse_head

ASK: Any = [{"role": "user", "content": "what is the weather in Paris?"}]
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
    }
]


def _broken_tool_call() -> bytes:
    """A chat-completions stream that breaks inside its tool call's arguments."""
    call = {"index": 0, "id": "call_1", "type": "function"}
    return (
        chat_chunk_event({"role": "assistant", "content": None})
        + chat_chunk_event(
            {"tool_calls": [{**call, "function": {"name": "weather", "arguments": ""}}]}
        )
        + chat_chunk_event({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]})
    )


def test_a_stream_broken_inside_a_tool_call_is_not_continued(fake: FakeProvider) -> None:
    with RawServer(sse_head(), (_broken_tool_call(),)) as raw:
        routes = [
            OpenAICompatibleProvider(raw.base_url, model="m", name="first"),
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="next"),
        ]
        with (
            Guard(routes, continue_interrupted_streams=True, environ={}, retry=None) as guard,
            pytest.raises(StreamInterruptedError) as info,
            guard.chat(ASK, tools=TOOLS, stream=True) as chat,
        ):
            for _ in chat:
                pass
        assert len(raw.received) == 1
    assert info.value.route == "first"
    assert fake.requests == []  # the next route was not asked to go on from cut JSON
