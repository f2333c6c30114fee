"""Request validation: bad input gets a clear, typed error before any network call."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import ChatRequest, Message, RequestValidationError, Usage
from llmguard_sdk.models import validate_request


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
        ({"top_p": 0}, "top_p"),
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
