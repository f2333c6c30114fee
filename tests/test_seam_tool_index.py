"""Streamed tool calls without an ``index`` (as Gemini's OpenAI-compatible endpoint sends whole
calls, several in one delta) or with a null one, through the seams: each call is its own, as
the Guard's own assembly reads them (by position), in the Responses and Messages events too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.client import anthropic_client
from llmguard_sdk.transport import http_client

from .conftest import require_module
from .rawserver import RawServer, chat_chunk_event, sse_head

ASK: Any = [{"role": "user", "content": "call a and b"}]


def _stream(index: dict[str, Any]) -> bytes:
    calls = [
        {"id": f"call_{name}", "type": "function", **index}
        | {"function": {"name": name, "arguments": json.dumps({"x": n})}}
        for n, name in enumerate(("a", "b"))
    ]
    return (
        chat_chunk_event({"role": "assistant", "content": None})
        + chat_chunk_event({"tool_calls": calls})
        + chat_chunk_event({}, "tool_calls")
        + b"data: [DONE]\n\n"
    )


def _through_the_seams(events: bytes) -> tuple[Any, Any, Any]:
    """``events`` (a chat-completions stream) read by the Guard's own stream, and through the
    seams as openai's Responses stream and anthropic's Messages stream: their ends."""
    openai = require_module("openai", "openai is a dev dependency")
    require_module("anthropic", "anthropic is a dev dependency")
    with (
        RawServer(sse_head(), (events,)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        with guard.chat(ASK, stream=True) as chat:
            list(chat)
        sdk = openai.OpenAI(
            api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
        )
        with sdk.responses.stream(model="m", input="call a and b") as stream:
            response = stream.get_final_response()
        with anthropic_client(guard).messages.stream(
            model="m", max_tokens=99, messages=ASK
        ) as messages:
            message = messages.get_final_message()
    return chat.response, response, message


@pytest.mark.parametrize("index", [{}, {"index": None}], ids=["missing", "null"])
def test_calls_without_an_index_stay_apart_through_the_seams(index: dict[str, Any]) -> None:
    """The Responses and Messages writers took a call's ``index`` as ``int(call.get("index",
    0))``: calls without one were merged into the first (its name, their arguments joined),
    and a null one ended the stream with a TypeError."""
    own, response, message = _through_the_seams(_stream(index))
    expected = [("a", {"x": 0}), ("b", {"x": 1})]
    calls = own.tool_calls or []
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == (
        expected
    )
    items = [item for item in response.output if item.type == "function_call"]
    assert [(item.name, json.loads(item.arguments)) for item in items] == expected
    uses = [block for block in message.content if block.type == "tool_use"]
    assert [(block.name, block.input) for block in uses] == expected


def test_a_call_whose_function_is_no_object_does_not_break_the_seams() -> None:
    """A streamed call whose ``function`` is no object (a hostile or broken server's) is read
    past by the Guard's assembly; the Responses and Messages writers called ``.get`` on it and
    the stream ended with an AttributeError."""
    bad = {"index": 0, "id": "call_a", "type": "function", "function": "a"}
    events = (
        chat_chunk_event({"role": "assistant", "content": None})
        + chat_chunk_event({"tool_calls": [bad]})
        + chat_chunk_event({}, "tool_calls")
        + b"data: [DONE]\n\n"
    )
    _, response, message = _through_the_seams(events)
    assert [item.call_id for item in response.output if item.type == "function_call"] == ["call_a"]
    assert [block.id for block in message.content if block.type == "tool_use"] == ["call_a"]


def _calls_at(indices: tuple[int, ...], text: str | None) -> bytes:
    """A stream that says ``text`` (if any), then calls ``a``, ``b`` ... with these indices."""
    events = chat_chunk_event({"role": "assistant", "content": text})
    for n, index in enumerate(indices):
        name = "ab"[n]
        start = {"index": index, "id": f"call_{name}", "type": "function"}
        events += chat_chunk_event({"tool_calls": [start | {"function": {"name": name}}]})
        piece = {"index": index, "function": {"arguments": json.dumps({"x": n})}}
        events += chat_chunk_event({"tool_calls": [piece]})
    return events + chat_chunk_event({}, "tool_calls") + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("indices", "text"), [((1,), "Let me look. "), ((1, 3), None)], ids=["after-text", "gaps"]
)
def test_calls_numbered_from_elsewhere_reach_the_responses_sdk(
    indices: tuple[int, ...], text: str | None
) -> None:
    """A route whose streamed calls do not count from 0 (a gateway in front of Claude numbers
    them by content block: the first call after text is index 1): the Responses writer looked
    the call up by that index in its list of calls and the stream ended with an IndexError
    inside the SDK's iteration; its output items must be numbered as they stand."""
    openai = require_module("openai", "openai is a dev dependency")
    names = ["ab"[n] for n in range(len(indices))]
    with (
        RawServer(sse_head(), (_calls_at(indices, text),)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        sdk = openai.OpenAI(api_key="sk-x", base_url="http://g/v1", http_client=http_client(guard))
        with sdk.responses.stream(model="m", input="look") as stream:
            events = list(stream)
            response = stream.get_final_response()
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        (name, {"x": n}) for n, name in enumerate(names)
    ]
    assert response.output_text == (text or "")
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == list(range(len(response.output)))  # each item where it stands


@pytest.mark.parametrize(
    ("events", "count"),
    [
        (_calls_at((1,), "Let me look. "), 1),
        (_calls_at((1, 3), None), 2),
        (_stream({}), 2),
        (_stream({"index": None}), 2),
    ],
    ids=["after-text", "gaps", "missing", "null"],
)
def test_the_chat_seam_numbers_streamed_calls_as_openai_s_helpers_read_them(
    events: bytes, count: int
) -> None:
    """The chat seam passed each call's ``index`` on as the route gave it: openai's stream
    helpers (``chat.completions.stream``, ``ChatCompletionStreamState``) put a call at
    ``index`` in their list of calls, so a first call numbered 1 was an IndexError and one
    without an index a TypeError, though the Guard's own answer held the calls; the seam
    numbers them 0, 1 ... in the order they came, as OpenAI does."""
    openai = require_module("openai", "openai is a dev dependency")
    with (
        RawServer(sse_head(), (events,)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        sdk = openai.OpenAI(api_key="sk-x", base_url="http://g/v1", http_client=http_client(guard))
        with sdk.chat.completions.stream(model="m", messages=ASK) as stream:
            chunks = [e.chunk for e in stream if e.type == "chunk"]
            completion = stream.get_final_completion()
    calls = completion.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("a", {"x": 0}),
        ("b", {"x": 1}),
    ][:count]
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or ()]
    assert sorted({d.index for d in deltas}) == list(range(count))
