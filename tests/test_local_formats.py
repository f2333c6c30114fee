"""The local fallback honours ``response_format``: JSON as asked, through the drop-in client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam

from llmguard_sdk import Guard
from tests.localmodel import loaded_model

pytestmark = pytest.mark.local_model

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Count from 1 to 5."}]
SCHEMA = {
    "type": "object",
    "properties": {"numbers": {"type": "array", "items": {"type": "integer"}, "maxItems": 5}},
    "required": ["numbers"],
}


@pytest.fixture(scope="module")
def guard() -> Iterator[Guard]:
    with (
        loaded_model(n_ctx=512, wait=60) as provider,
        Guard(provider, timeout=60, environ={}) as guard,
    ):
        yield guard


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "count", "schema": SCHEMA}},
    ],
)
def test_json_is_answered_when_asked_for(guard: Guard, response_format: Any) -> None:
    # response_format was dropped: the local model answered prose ("1. 1\n...") to a caller
    # that parses JSON
    completion = guard.client().chat.completions.create(
        model="local",
        messages=QUESTION,
        temperature=0,
        max_tokens=80,
        response_format=response_format,
    )
    answer = json.loads(completion.choices[0].message.content or "")
    assert isinstance(answer, dict)
    if response_format["type"] == "json_schema":
        assert isinstance(answer["numbers"], list)
    assert completion.choices[0].finish_reason == "stop"
