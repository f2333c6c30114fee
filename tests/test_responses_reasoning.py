"""Reasoning items through ``guard.client().responses``: a chat route has no place for those
a caller sends back (its calls and their outputs still pair up), a Responses route gets its
own back (never the Guard's, which no route knows), and a Responses route's items (their ids,
summaries and ``encrypted_content``) are given out as it sent them, whole and streamed.
Every body and event is checked with openai's own types."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, http_response, sse_head
from .routekinds import guard_over

_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
# a Responses route's own reasoning item (OpenAI's id: rs_ and hex), as its answer has it
_OWN: dict[str, Any] = {
    "type": "reasoning",
    "id": "rs_0a1b2c",
    "summary": [{"type": "summary_text", "text": "Look it up first."}],
    "encrypted_content": "gAAAA-sealed",
}
# the Guard's own item of a chat route's reasoning text: rs_ and the Guard's response id
_GUARDS: dict[str, Any] = {
    "type": "reasoning",
    "id": "rs_resp-llmguard-17",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "Hmm."}],
}


def _call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": "{}"}


def _output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": f"found {call_id}"}


# two turns of a reasoning model's calls sent back, each turn's reasoning before it
_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "find both"},
    _OWN,
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "On it."}],
    },
    _call("call_1"),
    _call("call_2"),
    _output("call_1"),
    _output("call_2"),
    _GUARDS,
    _call("call_3"),
    _output("call_3"),
]


def _sent(fake: FakeProvider, route: str, history: list[dict[str, Any]]) -> list[Any]:
    items: Any = copy.deepcopy(history)
    with guard_over(fake, route) as guard:
        guard.client().responses.create(model="fake-model", input=items)
    body = fake.requests[-1].body or {}
    return list(body["input" if route == "responses" else "messages"])


def test_reasoning_items_sent_back_leave_a_chat_route_s_calls_paired(fake: FakeProvider) -> None:
    """(Chat has no place for reasoning: they are left out, and each turn's calls are one
    assistant message with its tool messages right after it, as chat wants them.)"""
    messages = _sent(fake, "chat", _HISTORY)

    def calls(*ids: str) -> dict[str, Any]:
        made = [{k: v for k, v in _call(i).items() if k != "type"} for i in ids]
        return {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": c["call_id"],
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
                for c in made
            ],
        }

    def tool(call_id: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": f"found {call_id}"}

    assert messages == [
        {"role": "user", "content": "find both"},
        {"role": "assistant", "content": "On it."},
        calls("call_1", "call_2"),
        tool("call_1"),
        tool("call_2"),
        calls("call_3"),
        tool("call_3"),
    ]


def test_a_responses_route_gets_its_own_reasoning_items_back(fake: FakeProvider) -> None:
    """A Responses route was sent no reasoning item at all: a reasoning model lost its
    earlier thoughts between a call and its output. Its own go back in their places; the
    Guard's own (made of a chat route's text: OpenAI would answer 404 for its id) do not,
    nor does any reach an Anthropic route."""
    items = _sent(fake, "responses", _HISTORY)
    kinds = [item.get("type", "message") for item in items]
    assert kinds == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "function_call",
        "function_call_output",
    ]
    assert items[1] == _OWN
    claude = _sent(fake, "anthropic", _HISTORY)
    blocks = [b for m in claude if isinstance(m["content"], list) for b in m["content"]]
    assert "reasoning" not in {b.get("type") for b in blocks}


def test_reasoning_items_with_nothing_after_them_are_left_out(fake: FakeProvider) -> None:
    history = [{"role": "user", "content": "hi"}, _OWN, {"role": "user", "content": "again"}]
    items = _sent(fake, "responses", history)
    assert [item.get("type", "message") for item in items] == ["message", "message"]


# -- a Responses route's items given out ---------------------------------------------------

_CALL_ITEM = {**_call("call_9"), "id": "fc_9", "status": "completed"}
_BODY = {"id": "resp_9f", "object": "response", "created_at": 1, "model": "m"}
_USAGE = {"input_tokens": 3, "output_tokens": 9, "total_tokens": 12}


def _whole() -> bytes:
    done = {**_OWN, "status": "completed"}
    body = {**_BODY, "status": "completed", "output": [done, _CALL_ITEM], "usage": _USAGE}
    return http_response(json.dumps(body).encode())


_MESSAGE = {
    "type": "message",
    "id": "msg_9",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Found it.", "annotations": []}],
}


def _stream(*, calls: bool = True) -> bytes:
    """OpenAI's stream of a reasoning item (its summary in two pieces) and a call (or, not
    ``calls``, a message: an answer the cache keeps)."""
    opened = {"type": "reasoning", "id": "rs_0a1b2c", "summary": [], "encrypted_content": "gAA"}
    where = {"item_id": "rs_0a1b2c", "output_index": 0, "summary_index": 0}
    summary_part = {"type": "summary_text", "text": ""}
    done = {**_OWN, "status": "completed"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**_BODY, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": opened},
        {"type": "response.reasoning_summary_part.added", **where, "part": summary_part},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": "Look it "},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": "up first."},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    ]
    if calls:
        at = {"output_index": 1, "item_id": "fc_9"}
        events += [
            {"type": "response.output_item.added", "output_index": 1, "item": _CALL_ITEM},
            {"type": "response.function_call_arguments.delta", **at, "delta": "{}"},
            {"type": "response.output_item.done", "output_index": 1, "item": _CALL_ITEM},
        ]
        last = _CALL_ITEM
    else:
        at = {"output_index": 1, "item_id": "msg_9", "content_index": 0}
        events.append({"type": "response.output_text.delta", **at, "delta": "Found it."})
        last = _MESSAGE
    final = {**_BODY, "status": "completed", "output": [done, last], "usage": _USAGE}
    events.append({"type": "response.completed", "response": final})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_a_responses_route_s_reasoning_item_is_given_out_as_it_sent_it(fake: FakeProvider) -> None:
    """The Guard answered a Responses route's reasoning with an item of its own making
    (``rs_`` and the response id, the summary as text content, no ``encrypted_content``): the
    caller could not send the route's item back. Sent back, it reaches the route."""
    with RawServer(_whole()) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            raw_answer = guard.client().responses.with_raw_response.create(model="m", input="go")
            answer = Response.model_validate(raw_answer.http_response.json())
    output = answer.model_dump(mode="json", exclude_none=True)["output"]
    assert [item["type"] for item in output] == ["reasoning", "function_call"]
    assert output[0] == {**_OWN, "status": "completed"}
    follow_up: list[Any] = [
        {"role": "user", "content": "go"},
        *output,
        _output("call_9"),
    ]
    sent = _sent(fake, "responses", follow_up)
    assert sent[1] == output[0]


@pytest.mark.parametrize("helper", [False, True], ids=["events", "stream-helper"])
def test_a_streamed_reasoning_item_keeps_the_route_s_id_and_summary(helper: bool) -> None:
    """The stream opened an item of the Guard's (its summary as ``reasoning_text``) and the
    completed response had it: the route's id and ``encrypted_content`` were lost. The
    route's item opens with its id, its summary streams as summary deltas, and it closes as
    the route finished it (its whole ``encrypted_content``)."""
    with RawServer(sse_head(), (_stream(),)) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            client = guard.client()
            if helper:  # openai's own helper checks each item's id from added to done
                with client.responses.stream(model="m", input="go") as stream:
                    final = stream.get_final_response()
                output = final.model_dump(mode="json", exclude_none=True)["output"]
                assert output[0] == {**_OWN, "status": "completed"}
                return
            raw_answer = client.responses.with_raw_response.create(
                model="m", input="go", stream=True
            )
            lines = raw_answer.http_response.iter_lines()
            events = [
                _EVENTS.validate_json(line[6:]) for line in lines if line.startswith("data: ")
            ]
    opened = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type, e.item.id) for e in opened] == [
        (0, "reasoning", "rs_0a1b2c"),
        (1, "function_call", "fc_call_9"),
    ]
    assert opened[0].item.encrypted_content is None  # (the added event's may be cut short)
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert deltas == ["Look it ", "up first."]
    assert not [e for e in events if e.type.startswith("response.reasoning_text")]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert done[0].item.model_dump(mode="json", exclude_none=True) == {
        **_OWN,
        "status": "completed",
    }
    final = events[-1].response.model_dump(mode="json", exclude_none=True)
    assert final["output"][0] == {**_OWN, "status": "completed"}


def test_a_guard_stream_s_response_has_each_reasoning_item_once() -> None:
    """(A stream's chunks carry the route's item each time it grows; the assembled response
    keeps the last of it, not every one.)"""
    with RawServer(sse_head(), (_stream(),)) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            stream = guard.chat([{"role": "user", "content": "go"}], stream=True)
            list(stream)
    metadata = stream.response.metadata
    assert metadata["reasoning_items"] == [{**_OWN, "status": "completed"}]
    assert metadata["reasoning"] == "Look it up first."


def test_a_cached_answer_carries_no_route_s_reasoning_item() -> None:
    """A cache hit gave the route's reasoning item of the call that filled the entry (its id
    and ``encrypted_content``): another caller sent that call's sealed thoughts back to the
    route as its own. The cache keeps the answer and its reasoning's text, not the route's
    items: a hit's reasoning is the Guard's item of that text (which reaches no route sent
    back), streamed and whole; the call that got it keeps the route's item."""
    with RawServer(sse_head(), (_stream(calls=False),)) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None, cache=True) as guard:
            create = guard.client().responses.with_raw_response.create
            first = create(model="m", input="go", stream=True)
            first_lines = list(first.http_response.iter_lines())
            answer = create(model="m", input="go", stream=True)
            lines = list(answer.http_response.iter_lines())
            plain = create(model="m", input="go")
            hit = guard.chat([{"role": "user", "content": "go"}])
    assert answer.headers["x-llmguard-route"] == plain.headers["x-llmguard-route"] == "cache"
    assert "gAAAA-sealed" in "".join(first_lines)  # the call that got it
    events = [_EVENTS.validate_json(line[6:]) for line in lines if line.startswith("data: ")]
    assert "gAAAA-sealed" not in "".join(lines)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    output = Response.model_validate(plain.http_response.json()).output
    for items in (done, output):
        reasoning = items[0].model_dump(mode="json", exclude_none=True)
        assert reasoning["type"] == "reasoning"
        assert reasoning["id"] != _OWN["id"]
        assert "encrypted_content" not in reasoning
        assert reasoning["content"] == [{"type": "reasoning_text", "text": "Look it up first."}]
    assert "reasoning_items" not in hit.metadata
    assert hit.metadata["reasoning"] == "Look it up first."
    assert hit.text == "Found it."


# -- a stream that leaves a route after its reasoning item opened ---------------------------

_OPENED = {"type": "reasoning", "id": "rs_0a1b2c", "summary": [], "encrypted_content": "gAA"}


def _broken(*, text: bool) -> bytes:
    """A Responses route's stream that opens a reasoning item and breaks: before any content,
    or (``text``) after a piece of the item's summary and of the message's text."""
    where = {"item_id": "rs_0a1b2c", "output_index": 0, "summary_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**_BODY, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": _OPENED},
    ]
    if text:
        message = {"type": "message", "id": "msg_9", "role": "assistant", "content": []}
        at = {"output_index": 1, "item_id": "msg_9", "content_index": 0}
        events += [
            {"type": "response.reasoning_summary_text.delta", **where, "delta": "Look it "},
            {"type": "response.output_item.added", "output_index": 1, "item": message},
            {"type": "response.output_text.delta", **at, "delta": "Found "},
        ]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def _moved_on(fake: FakeProvider, *, text: bool) -> tuple[list[Any], Response]:
    """The events of a stream whose Responses route broke (see :func:`_broken`) and whose
    chat route answered (continued it, after text), and openai's stream helper's response."""
    with RawServer(sse_head(), (_broken(text=text),)) as raw:
        first = OpenAIResponsesProvider(raw.base_url, model="m", name="first")
        chat = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="chat")
        options: dict[str, Any] = {"retry": None, "breaker": None}
        with Guard([first, chat], environ={}, continue_interrupted_streams=True, **options) as g:
            client = g.client()
            answer = client.responses.with_raw_response.create(model="m", input="hi", stream=True)
            lines = list(answer.http_response.iter_lines())
            with client.responses.stream(model="m", input="hi") as stream:
                final = stream.get_final_response()
    assert len(raw.received) == 2
    events = [_EVENTS.validate_json(line[6:]) for line in lines if line.startswith("data: ")]
    return events, final


def test_a_reasoning_item_of_a_route_left_before_any_content_is_not_given_out(
    fake: FakeProvider,
) -> None:
    """The route that answered had opened no reasoning item; the one it replaced had, and
    its half item (never finished, without ``encrypted_content``) opened and closed in the
    answer's events."""
    events, final = _moved_on(fake, text=False)
    assert "reasoning" not in {getattr(e, "item", e).type for e in events}
    assert [item.type for item in events[-1].response.output] == ["message"]
    assert [item.type for item in final.output] == ["message"]


def test_a_reasoning_item_a_continued_stream_never_finished_closes_incomplete(
    fake: FakeProvider,
) -> None:
    """Once its summary reached the caller the item is the caller's; the route broke before
    it finished it (no ``encrypted_content``) and the stream went on on another route: it
    closed as if the route had finished it. It closes ``incomplete``, with what came of it."""
    events, final = _moved_on(fake, text=True)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    expected = {
        "type": "reasoning",
        "id": "rs_0a1b2c",
        "summary": [{"type": "summary_text", "text": "Look it "}],
        "status": "incomplete",
    }
    assert done[0].model_dump(mode="json", exclude_none=True) == expected
    last = events[-1].response.output[0]
    assert last.model_dump(mode="json", exclude_none=True) == expected
    assert final.output[0].model_dump(mode="json", exclude_none=True) == expected
