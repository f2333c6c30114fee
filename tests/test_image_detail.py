"""An image's ``detail`` across the chat and Responses shapes: chat's ``image_url.detail``
reaches a Responses route as the ``input_image``'s (``"auto"``, both APIs' default, when it
has none: openai's ``ResponseInputImageParam`` requires it, as servers that check against it
do), and a value neither API has is a clear error before any route is called, never sent
(or dropped) as it is."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.responses import ResponseInputImageParam
from pydantic import TypeAdapter

from llmguard_sdk import Guard, OpenAICompatibleProvider, RequestValidationError
from llmguard_sdk.testing import FakeProvider

from .routekinds import KINDS, guard_over

_URL = "data:image/png;base64,iVBORw0KGgo="
_INPUT_IMAGE: TypeAdapter[Any] = TypeAdapter(ResponseInputImageParam)


def _image(detail: str | None) -> dict[str, Any]:
    image: dict[str, Any] = {"url": _URL}
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def _asking(*parts: dict[str, Any]) -> list[Any]:
    return [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, *parts]}]


def test_a_chat_image_s_detail_reaches_a_responses_route(fake: FakeProvider) -> None:
    """An image without a detail went as an ``input_image`` without one: a 400 "Field
    required" from a server that checks input with openai's types (vLLM)."""
    details = (None, "low", "high", "auto")
    with guard_over(fake, "responses") as guard:
        guard.chat(_asking(*(_image(d) for d in details)))
    (message,) = (fake.requests[-1].body or {})["input"]
    images = [part for part in message["content"] if part["type"] == "input_image"]
    assert [part["detail"] for part in images] == ["auto", "low", "high", "auto"]
    for part in images:
        _INPUT_IMAGE.validate_python(part)  # each one a part openai's types take
        assert part["image_url"] == _URL


@pytest.mark.parametrize("route", sorted(KINDS))
def test_a_detail_no_api_has_is_refused_before_any_route(fake: FakeProvider, route: str) -> None:
    """``detail: "hgih"`` went to the route as it was (a 400 there; a Claude route dropped it,
    and the typo failed only when the chain fell back to an OpenAI route)."""
    with guard_over(fake, route) as guard, pytest.raises(RequestValidationError) as info:
        guard.chat(_asking(_image("low"), _image("hgih")))
    assert "content part 2 is an image_url part" in str(info.value)
    assert "'hgih'" in str(info.value)
    assert fake.requests == []


def _responses_input(detail: object) -> list[Any]:
    image = {"type": "input_image", "image_url": _URL, "detail": detail}
    return [{"role": "user", "content": [{"type": "input_text", "text": "what?"}, image]}]


@pytest.mark.parametrize(
    ("detail", "said"),
    [
        ("hgih", "detail must be one of 'low', 'high', 'auto', 'original', got 'hgih'"),
        ("original", "detail 'original' cannot be sent: the Guard's requests are chat's"),
        (5, "got 5"),
    ],
)
def test_a_responses_caller_s_bad_detail_is_a_400_naming_it(
    fake: FakeProvider, detail: object, said: str
) -> None:
    """Through ``guard.client().responses``, an ``input_image`` detail other than chat's was
    dropped: the image went at ``"auto"`` (``"original"``: maybe at a low resolution)."""
    with Guard(OpenAICompatibleProvider(fake.base_url, name="chat"), environ={}) as guard:
        with pytest.raises(openai.BadRequestError) as info:
            guard.client().responses.create(model="fake-model", input=_responses_input(detail))
        guard.client().responses.create(model="fake-model", input=_responses_input("high"))
    body = info.value.body
    assert isinstance(body, dict)
    assert said in str(body.get("message"))
    assert len(fake.requests) == 1  # the good one only
    sent = (fake.requests[0].body or {})["messages"][0]["content"][1]
    assert sent == {"type": "image_url", "image_url": {"url": _URL, "detail": "high"}}
