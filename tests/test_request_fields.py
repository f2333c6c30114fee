"""A request's typed fields: numbers are numbers (not bools or strings coerced), tools have
the shape the chat API requires; either mistake is a typed error before any network call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import Guard, RequestValidationError
from llmguard_sdk.models import validate_request
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

MakeGuard = Callable[..., Guard]


def _request(**changes: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], **changes}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", True),  # was 1
        ("max_tokens", "10"),  # was 10
        ("max_tokens", 10.0),
        ("max_completion_tokens", False),
        ("max_completion_tokens", "256"),
        ("temperature", "0.5"),  # was 0.5
        ("temperature", True),  # was 1.0
        ("top_p", "0.9"),
        ("top_p", True),
        ("seed", True),
        ("seed", "7"),
    ],
)
def test_a_bool_or_a_string_is_not_a_number(field: str, value: object) -> None:
    with pytest.raises(RequestValidationError) as info:
        validate_request(_request(**{field: value}))
    assert field in str(info.value)
    assert [problem["loc"][0] for problem in info.value.details] == [field]


def test_a_tool_message_is_error_is_a_bool() -> None:
    message = {"role": "tool", "content": "x", "tool_call_id": "c1", "is_error": "no"}
    with pytest.raises(RequestValidationError, match="is_error"):
        validate_request({"messages": [message]})


def test_numbers_of_either_kind_are_still_taken() -> None:
    checked = validate_request(
        _request(max_tokens=10, max_completion_tokens=20, temperature=1, top_p=1, seed=-3)
    )
    assert (checked.max_tokens, checked.max_completion_tokens, checked.seed) == (10, 20, -3)
    assert (checked.temperature, checked.top_p) == (1.0, 1.0)
    assert validate_request(_request(temperature=0.7, top_p=0.25)).temperature == 0.7


def test_a_guard_refuses_a_string_number_before_sending(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, retry=None)
    with pytest.raises(RequestValidationError, match="temperature"):
        guard.chat(USER, temperature="0.5")  # type: ignore[typeddict-item]
    assert fake.requests == []
