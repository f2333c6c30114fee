"""The local fallback honours ``response_format``: JSON as asked, through the drop-in client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import product
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam

from llmguard_sdk import Guard
from tests.localmodel import loaded_model

pytestmark = pytest.mark.local_model

CUT_SHORT = '{"a": [1, -2.5e3, true, false, null], "b\\u00e9\\"": {"c": "d"}, "e": []}'

COUNT: ChatCompletionMessageParam = {"role": "user", "content": "Count from 1 to 5."}
QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You answer with one short JSON object."},
    COUNT,
]  # (asked for JSON, as OpenAI's JSON mode wants: the model then closes its object)
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
    completion = _create(guard, QUESTION, response_format=response_format)
    answer = json.loads(completion.choices[0].message.content or "")
    assert isinstance(answer, dict)
    if response_format["type"] == "json_schema":
        assert isinstance(answer["numbers"], list)
    assert completion.choices[0].finish_reason == "stop"


def test_the_same_question_without_a_format_is_not_answered_in_json(guard: Guard) -> None:
    """The control of the test above: the JSON is the grammar's doing, not the prompt's."""
    text = _create(guard, QUESTION).choices[0].message.content or ""
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_an_answer_cut_at_max_tokens_is_the_start_of_json(guard: Guard) -> None:
    """Not asked for JSON in words, the tiny model writes one string of JSON on and on (as
    OpenAI warns of JSON mode): the answer ends at ``max_tokens``, ``finish_reason`` says
    ``length``, and what was written is JSON cut short, held by the grammar all along."""
    completion = _create(guard, [COUNT], response_format={"type": "json_object"})
    text = completion.choices[0].message.content or ""
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 80
    assert text.startswith("{")
    assert starts_json(text)


def _create(guard: Guard, messages: list[ChatCompletionMessageParam], **options: Any) -> Any:
    return guard.client().chat.completions.create(
        model="local", messages=messages, temperature=0, max_tokens=80, **options
    )


def starts_json(text: str) -> bool:
    """Whether ``text`` is the start of a JSON text: whether an end of its open string,
    literal or number, and the closing of its open brackets, make it parse."""
    closing: list[str] = []
    in_string = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif in_string:
            escaped = char == "\\"
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char in "{[":
            closing.append("}" if char == "{" else "]")
        elif char in "}]" and (not closing or closing.pop() != char):
            return False
    strings = ('"', 'n"', '0"', '00"', '000"', '0000"') if in_string else ("",)
    values = ("", "0", ":0", '"":0', "e", "ue", "rue", "se", "lse", "alse", "l", "ll", "ull")
    brackets = "".join(reversed(closing))
    for string, value in product(strings, values):
        try:
            json.loads(text + string + value + brackets)
        except ValueError:
            continue
        return True
    return False


@pytest.mark.parametrize("cut", range(len(CUT_SHORT) + 1))
def test_every_start_of_json_is_said_so(cut: int) -> None:
    assert starts_json(CUT_SHORT[:cut])


@pytest.mark.parametrize("text", ["1. 1\n2. 2", "{}}", '{"a": 1]', '{"a": tx', "[1, 2] 3"])
def test_what_starts_no_json_is_said_so(text: str) -> None:
    assert not starts_json(text)
