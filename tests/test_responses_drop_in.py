"""``client.responses.create(...)`` answered by the Guard (``guard.client()``): the Response
echoes the request's parameters as OpenAI's does, the request's items and parts become chat
messages (or a clear 400), and streamed output items are numbered in the order they came.
Every body and event is checked with openai's own types."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, chat_chunk_event, http_response, sse_head

MakeGuard = Callable[..., Guard]
_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TOOL: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
ECHOED: dict[str, Any] = {
    "instructions": "be brief",
    "metadata": {"ticket": "42"},
    "temperature": 0.25,
    "top_p": 0.5,
    "max_output_tokens": 50,
    "parallel_tool_calls": False,
    "tools": [TOOL],
    "tool_choice": "auto",
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "reasoning": {"effort": "low"},
    "user": "u-1",
    "store": False,
    "top_logprobs": 2,
    "truncation": "disabled",
}


def _guard(fake: FakeProvider, route: str) -> Guard:
    kind = OpenAIResponsesProvider if route == "responses" else OpenAICompatibleProvider
    return Guard(kind(fake.base_url, model=fake.model, name=fake.name), environ={}, retry=None)


def _plain(client: openai.OpenAI, **request: Any) -> Response:
    """The answer's raw body, validated with openai's ``Response``."""
    raw = client.responses.with_raw_response.create(**request)
    return Response.model_validate(raw.http_response.json())


def _events(client: openai.OpenAI, **request: Any) -> list[Any]:
    """The stream's raw events, each validated with openai's ``ResponseStreamEvent``."""
    raw = client.responses.with_raw_response.create(stream=True, **request)
    lines = raw.http_response.iter_lines()
    return [_EVENTS.validate_json(line[6:]) for line in lines if line.startswith("data: ")]


def _bad_request(client: openai.OpenAI, **request: Any) -> str:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(**request)
    assert info.value.status_code == 400
    body = info.value.body
    assert isinstance(body, dict)
    assert body.get("type") == "invalid_request_error"
    return str(body.get("message"))


# -- the Response echoes the request ---------------------------------------------------------


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_a_response_echoes_the_request_s_parameters(
    fake: FakeProvider, route: str, streaming: bool
) -> None:
    """The Response said ``metadata: {}``, ``temperature: null``, ``tools: []``,
    ``tool_choice: "auto"``, ``parallel_tool_calls: true``, ``instructions: null`` whatever
    the request asked; OpenAI's echoes them (and ``max_output_tokens``, ``text``,
    ``reasoning``, ``user``, ``store``...)."""
    with _guard(fake, route) as guard:
        client = guard.client()
        request = {"model": "fake-model", "input": "hello there", **ECHOED}
        if streaming:
            events = _events(client, **request)
            bodies = [events[0].response, events[-1].response]  # created, completed
            assert [events[0].type, events[-1].type] == ["response.created", "response.completed"]
        else:
            bodies = [_plain(client, **request)]
    for body in bodies:
        assert body.instructions == "be brief"
        assert body.metadata == {"ticket": "42"}
        assert (body.temperature, body.top_p, body.max_output_tokens) == (0.25, 0.5, 50)
        assert (body.parallel_tool_calls, body.tool_choice) == (False, "auto")
        assert [(t.type, getattr(t, "name", None)) for t in body.tools] == [("function", "lookup")]
        assert body.text is not None
        assert body.text.verbosity == "low"
        assert body.reasoning is not None
        assert body.reasoning.effort == "low"
        assert (body.user, body.top_logprobs, body.truncation) == ("u-1", 2, "disabled")
        assert (body.model_extra or {}).get("store") is False


def test_a_response_without_those_parameters_says_openai_s_defaults(fake: FakeProvider) -> None:
    with _guard(fake, "chat") as guard:
        body = _plain(guard.client(), model="fake-model", input="hello there")
    assert (body.instructions, body.metadata, body.tools, body.tool_choice) == (
        None,
        {},
        [],
        "auto",
    )
    assert body.parallel_tool_calls is True
    assert body.text is not None
    assert body.text.format is not None
    assert body.text.format.type == "text"


# -- the request as chat messages and parameters ----------------------------------------------


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_text_verbosity_reaches_the_route(fake: FakeProvider, route: str) -> None:
    """``text.verbosity`` was dropped without a word: a chat route gets chat's ``verbosity``,
    the Responses route ``text.verbosity`` (an Anthropic route drops it: Claude has none)."""
    with _guard(fake, route) as guard:
        text: Any = {"verbosity": "high"}
        guard.client().responses.create(model="fake-model", input="hello there", text=text)
    sent = fake.requests[-1].body or {}
    if route == "chat":
        assert sent.get("verbosity") == "high"
    else:
        assert sent.get("text") == {"verbosity": "high"}
        assert "verbosity" not in sent


def test_an_input_image_by_file_id_is_a_clear_400(fake: FakeProvider) -> None:
    """An ``input_image`` naming an uploaded file (``file_id``, no URL) went to a chat route as
    an image with the URL ``""``: no route can fetch the file."""
    image: Any = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "file_id": "file-abc", "detail": "auto"},
            ],
        }
    ]
    with _guard(fake, "chat") as guard:
        message = _bad_request(guard.client(), model="fake-model", input=image)
        url: Any = [{**image[0], "content": [{"type": "input_image", "image_url": "data:x"}]}]
        url[0]["content"][0]["detail"] = "low"
        guard.client().responses.create(model="fake-model", input=url)
    assert "file_id" in message
    assert len(fake.requests) == 1  # the image with a URL (and its detail) went on
    sent = (fake.requests[0].body or {})["messages"][0]["content"]
    assert sent == [{"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}}]


def test_a_function_call_output_of_content_parts_is_the_tool_message_s_text(
    fake: FakeProvider,
) -> None:
    """A ``function_call_output`` whose ``output`` is a list of parts reached the chat route as
    the JSON text of the list; its text parts are the tool's answer. Its images and files no
    chat route can carry in a tool message: a clear 400."""
    parts: Any = [{"type": "input_text", "text": "found "}, {"type": "input_text", "text": "it"}]
    items: Any = [
        {"role": "user", "content": "find it"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": parts},
    ]
    with _guard(fake, "chat") as guard:
        client = guard.client()
        client.responses.create(model="fake-model", input=items)
        image = {"type": "input_image", "image_url": "data:x"}
        items[2] = {**items[2], "output": [*parts, image]}
        message = _bad_request(client, model="fake-model", input=items)
    assert (fake.requests[-1].body or {})["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "found it",
    }
    assert len(fake.requests) == 1
    assert "input_image" in message


def test_an_assistant_refusal_in_the_input_is_its_message_s_text(fake: FakeProvider) -> None:
    """An earlier answer's refusal sent back (as the openai SDK replays ``output`` items) was a
    400 (``content part type 'refusal' is not supported``)."""
    items: Any = [
        {"role": "user", "content": "do the bad thing"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}],
        },
        {"role": "user", "content": "hello there"},
    ]
    with _guard(fake, "chat") as guard:
        answer = guard.client().responses.create(model="fake-model", input=items)
    assert answer.output_text == "Echo: hello there"
    sent = (fake.requests[-1].body or {})["messages"]
    assert sent[1] == {"role": "assistant", "content": "I can't help with that."}


def test_a_conversation_is_a_clear_400(fake: FakeProvider) -> None:
    """``conversation`` went on to the chat route as an unknown body field (OpenAI's chat API
    refuses it; others ignored it, answering without the conversation's items)."""
    with _guard(fake, "chat") as guard:
        message = _bad_request(
            guard.client(), model="fake-model", input="hello there", conversation="conv_1"
        )
    assert "conversation" in message
    assert fake.requests == []


# -- output items in order ----------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None, **choice: Any) -> bytes:
    event = chat_chunk_event(delta, finish)
    if not choice:
        return event
    data = json.loads(event[6:])
    data["choices"][0].update(choice)
    return b"data: " + json.dumps(data).encode() + b"\n\n"


_CALL = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "a"}}
_ARGS = {"index": 0, "function": {"arguments": "{}"}}
_THOUGHTS = _chunk({"role": "assistant", "reasoning_content": "Let me "}) + _chunk(
    {"reasoning_content": "look."}
)
# a chat stream that calls a tool, then says something
_CALL_THEN_TEXT = (
    _chunk({"tool_calls": [_CALL]})
    + _chunk({"tool_calls": [_ARGS]})
    + _chunk({"content": "Looking it up."})
    + _chunk({}, "tool_calls")
    + b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("thinks", [False, True], ids=["call-text", "reasoning-call-text"])
def test_streamed_output_items_are_numbered_in_the_order_they_came(thinks: bool) -> None:
    """A call before the text put the call and the message both at ``output_index`` 0 (the
    message was always 0), and the completed output listed the message first; the route's
    reasoning was dropped. Each item now has the next index, the completed output lists them
    in that order, and the reasoning is a ``reasoning`` item."""
    stream = (_THOUGHTS if thinks else b"") + _CALL_THEN_TEXT
    with RawServer(sse_head(), (stream,)) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            events = _events(guard.client(), model="m", input="look it up")
    expected = ["reasoning"] * thinks + ["function_call", "message"]
    added = [
        (e.output_index, e.item.type) for e in events if e.type == "response.output_item.added"
    ]
    done = [(e.output_index, e.item.type) for e in events if e.type == "response.output_item.done"]
    assert added == list(enumerate(expected))
    assert done == added  # each closed in order
    ids = {e.output_index: e.item.id for e in events if e.type == "response.output_item.added"}
    for event in events:
        if hasattr(event, "item_id"):
            assert ids[event.output_index] == event.item_id, event.type
    final = events[-1].response
    output = final.model_dump(mode="json")["output"]
    assert [item["type"] for item in output] == expected
    assert [item["id"] for item in output] == [ids[n] for n in range(len(expected))]
    if thinks:
        assert output[0]["content"] == [{"type": "reasoning_text", "text": "Let me look."}]
    assert (output[-2]["name"], output[-2]["arguments"]) == ("a", "{}")
    assert final.output_text == "Looking it up."


def test_a_plain_answer_s_reasoning_is_a_reasoning_item() -> None:
    """A plain answer's reasoning (``reasoning_content``) was dropped: it is the first output
    item, before the message."""
    message = {"role": "assistant", "content": "Hi.", "reasoning_content": "Say hi."}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "c1", "model": "m", "choices": [choice]}
    with RawServer(http_response(json.dumps(body).encode())) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            answer = _plain(guard.client(), model="m", input="hi")
    output = answer.model_dump(mode="json")["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[0]["content"] == [{"type": "reasoning_text", "text": "Say hi."}]
    assert answer.output_text == "Hi."


# -- logprobs in Responses' shape ----------------------------------------------------------

_TOKENS = [
    {
        "token": "Hi",
        "logprob": -0.25,
        "bytes": [72, 105],
        "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]}],
    },
    {"token": "!", "logprob": -0.5, "bytes": None, "top_logprobs": []},  # chat's bytes: nullable
]
_EXPECTED = [
    _TOKENS[0],
    {"token": "!", "logprob": -0.5, "bytes": [33], "top_logprobs": []},
]
_ASK: Any = {"model": "m", "input": "hi", "include": ["message.output_text.logprobs"]}


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_a_chat_route_s_logprobs_are_in_responses_shape(streaming: bool) -> None:
    """A chat route's logprobs went into ``output_text.logprobs`` as chat sent them: a token's
    ``bytes`` may be null in chat's shape, never in Responses' (a list of ints), so openai's
    ``Response`` refused the body."""
    if streaming:
        logprobs = [{"content": [token], "refusal": None} for token in _TOKENS]
        answer = (
            _chunk({"role": "assistant", "content": "Hi"}, logprobs=logprobs[0])
            + _chunk({"content": "!"}, logprobs=logprobs[1])
            + _chunk({}, "stop")
            + b"data: [DONE]\n\n"
        )
        head, parts = sse_head(), [answer]
    else:
        message = {"role": "assistant", "content": "Hi!"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        choice["logprobs"] = {"content": _TOKENS, "refusal": None}
        body = {"id": "c1", "model": "m", "choices": [choice]}
        head, parts = http_response(json.dumps(body).encode()), []
    with RawServer(head, tuple(parts)) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            client = guard.client()
            if streaming:
                events = _events(client, **_ASK)
                final = events[-1].response
                deltas = [e.logprobs for e in events if e.type == "response.output_text.delta"]
                assert [[t.token for t in d] for d in deltas] == [["Hi"], ["!"]]
            else:
                final = _plain(client, **_ASK)
    text = final.output[0].content[0]
    assert text.model_dump(mode="json")["logprobs"] == _EXPECTED
