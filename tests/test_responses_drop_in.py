"""``client.responses.create(...)`` answered by the Guard (``guard.client()``): the request's
items and parts become chat messages (or a clear 400). Every body is checked with openai's
own types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

MakeGuard = Callable[..., Guard]
_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


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
