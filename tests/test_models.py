"""Request validation: bad input gets a clear, typed error before any network call."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from llmguard_sdk import (
    CallEvent,
    ChatRequest,
    ChatResponse,
    Guard,
    Message,
    RequestValidationError,
    Usage,
)
from llmguard_sdk._copies import frozen, updated
from llmguard_sdk.models import validate_request
from llmguard_sdk.testing import FakeProvider


def request(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user"}]}, "messages.0"),
        ({"messages": [{"role": "tool", "content": "42"}]}, "tool_call_id"),
        ({"messages": [{"role": "user", "content": "x", "colour": "red"}]}, "colour"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": -0.1}, "top_p"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4"),
        ({"model": ""}, "model"),
        ({"frequency_penalty": 1}, "frequency_penalty"),
        ({"messages": "hello"}, "messages"),
    ],
)
def test_invalid_requests_raise_request_validation_error(
    changes: dict[str, Any], where: str
) -> None:
    with pytest.raises(RequestValidationError) as info:
        validate_request(request(**changes))
    assert where in str(info.value)
    assert info.value.details, "the individual problems are attached"


def test_valid_request_keeps_every_field() -> None:
    checked = validate_request(
        request(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
            ],
            max_tokens=5,
            temperature=0,
            stop="\n",
            tools=[{"type": "function", "function": {"name": "f"}}],
            response_format={"type": "json_object"},
            metadata={"ticket": "7"},
        )
    )
    assert isinstance(checked, ChatRequest)
    assert checked.messages[1].text == "hi"
    assert checked.last_user_text() == "hi"
    assert checked.metadata == {"ticket": "7"}


def test_message_text_joins_text_parts_only() -> None:
    message = Message(
        role="user",
        content=[
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "data:"}},
            {"type": "text", "text": "b"},
        ],
    )
    assert message.text == "ab"


def test_usage_total() -> None:
    assert Usage(input_tokens=3, output_tokens=4).total_tokens == 7


@pytest.mark.parametrize(
    ("model", "update"),
    [
        (
            ChatResponse(text="hi", model="m", metadata={"a": 1}),
            {"route": "r", "attempts": 2, "usage": Usage(input_tokens=3), "cost_usd": 0.5},
        ),
        (
            ChatRequest.model_validate({"messages": [{"role": "user", "content": "q"}]}),
            {"extra_headers": {"Idempotency-Key": "k"}, "model": "m"},
        ),
        (Usage(input_tokens=1), {"output_tokens": 7}),
    ],
)
def test_updated_copies_as_pydantic_does(model: BaseModel, update: dict[str, Any]) -> None:
    """The call path's quick copy gives what ``model_copy(update=...)`` gives: equal models,
    the same fields set, nothing shared that an update could change, still frozen."""
    before = model.model_dump()
    quick, slow = updated(model, update), model.model_copy(update=update)
    assert quick == slow
    assert type(quick) is type(slow)
    assert quick.model_fields_set == slow.model_fields_set
    assert quick.model_dump() == slow.model_dump()
    assert model.model_dump() == before  # the original is untouched
    assert quick.__dict__ is not model.__dict__
    with pytest.raises(ValidationError):
        quick.__setattr__(next(iter(update)), None)  # frozen like the original


def test_frozen_makes_what_the_constructor_makes(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    """A hook's event (made without the dataclass's ``__init__``) has every field of
    :class:`CallEvent`, equals one the constructor makes, and stays frozen."""
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    guard.chat([{"role": "user", "content": "hi"}], tenant="acme")
    (event,) = events
    assert set(vars(event)) == {field.name for field in dataclasses.fields(CallEvent)}
    assert event == CallEvent(**vars(event))
    assert event.route == fake.name
    assert event.outcome == "ok"
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.route = "other"  # type: ignore[misc]
    made = frozen(CallEvent, dict(vars(event)))
    assert made == event
