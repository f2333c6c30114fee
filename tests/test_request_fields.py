"""A request's typed fields: numbers are numbers (not bools or strings coerced), tools have
the shape the chat API requires; either mistake is a typed error before any network call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
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


def test_a_top_p_of_zero_is_sent_as_the_chat_apis_take_it(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """OpenAI's and Anthropic's top_p ranges from 0 to 1: a request with top_p=0 (near-greedy
    sampling) was refused before sending, where the provider takes it."""
    guard = make_guard(fake, retry=None)
    guard.chat(USER, top_p=0)
    assert [request.body["top_p"] for request in fake.requests] == [0]


def test_a_guard_refuses_a_string_number_before_sending(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, retry=None)
    with pytest.raises(RequestValidationError, match="temperature"):
        guard.chat(USER, temperature="0.5")  # type: ignore[call-overload]
    assert fake.requests == []


_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
_GOOD_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": _SCHEMA}}


@pytest.mark.parametrize(
    ("tool", "problem"),
    [
        ({"type": "function"}, "function"),
        ({"type": "function", "function": "get_weather"}, "function"),
        ({"type": "function", "function": {"parameters": _SCHEMA}}, "name"),
        ({"type": "function", "function": {"name": ""}}, "name"),
        ({"type": "function", "function": {"name": "get weather"}}, "name"),
        ({"type": "function", "function": {"name": "f" * 65}}, "name"),
        ({"type": "function", "function": {"name": "f", "parameters": "city: str"}}, "parameters"),
        ({"type": "function", "function": {"name": "f", "parameters": [_SCHEMA]}}, "parameters"),
        (
            {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}},
            "object",
        ),
        ({"type": "function", "function": {"name": "f", "description": 3}}, "description"),
        ({"type": "function", "function": {"name": "f", "strict": "yes"}}, "strict"),
        ({"function": {"name": "f"}}, "name"),  # no type: Anthropic's shape, which names it
        ({"name": "lookup", "input_schema": "x"}, "input_schema"),
    ],
)
def test_a_malformed_tool_is_a_request_validation_error(tool: dict[str, Any], problem: str) -> None:
    """Such a tool went to the provider, which refused it with a 400 on every route."""
    with pytest.raises(RequestValidationError, match=problem) as info:
        validate_request(_request(tools=[_GOOD_TOOL, tool]))
    assert "tools.1" in str(info.value)  # which tool


@pytest.mark.parametrize(
    "tool",
    [
        _GOOD_TOOL,
        {"type": "function", "function": {"name": "f"}},  # parameters may be left out
        {"type": "function", "function": {"name": "f-2", "description": "d", "strict": True}},
        {"name": "lookup", "input_schema": {"type": "object"}},  # Anthropic's shape
        {"name": "lookup", "input_schema": {"type": "object"}, "cache_control": {"type": "x"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},  # a server tool
    ],
)
def test_well_formed_tools_are_taken_as_they_are(tool: dict[str, Any]) -> None:
    assert validate_request(_request(tools=[tool])).tools == [tool]


def test_an_empty_tool_list_is_not_sent() -> None:
    """OpenAI refuses ``"tools": []`` (a 400 on every route); no tools is what it means."""
    assert validate_request(_request(tools=[])).tools is None


@pytest.mark.parametrize(
    ("choice", "problem"),
    [
        ({"type": "function", "function": {}}, "name"),
        ({"type": "function"}, "function"),
        ({"type": "function", "function": {"name": "other"}}, "other"),
    ],
)
def test_a_tool_choice_names_one_of_the_tools(choice: dict[str, Any], problem: str) -> None:
    with pytest.raises(RequestValidationError, match=problem):
        validate_request(_request(tools=[_GOOD_TOOL], tool_choice=choice))


def test_a_guard_refuses_a_malformed_tool_before_sending(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, retry=None)
    with pytest.raises(RequestValidationError, match="tools"):
        guard.chat(USER, tools=[{"type": "function", "function": {"parameters": _SCHEMA}}])
    assert fake.requests == []
    answer = guard.chat(USER, tools=[_GOOD_TOOL], tool_choice="auto")
    assert answer.route == "primary"


def test_a_tool_choice_may_name_an_anthropic_shaped_tool() -> None:
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    choice = {"type": "function", "function": {"name": "lookup"}}
    assert validate_request(_request(tools=tools, tool_choice=choice)).tool_choice == choice


_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": _SCHEMA}}


@pytest.mark.parametrize(
    ("response_format", "problem"),
    [
        ({}, "type"),
        ({"type": 1}, "type"),
        ({"type": "json_schema"}, "json_schema"),
        ({"type": "json_schema", "json_schema": {"schema": _SCHEMA}}, "name"),
        ({"type": "json_schema", "json_schema": {"name": "a b", "schema": _SCHEMA}}, "name"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": "{}"}}, "schema"),
        ({"type": "json_schema", "json_schema": {"name": "a", "strict": "yes"}}, "strict"),
    ],
)
def test_a_malformed_response_format_is_a_request_validation_error(
    response_format: dict[str, Any], problem: str
) -> None:
    """It went to every route, each answering 400 (a local route: free text, not JSON)."""
    with pytest.raises(RequestValidationError, match=problem) as info:
        validate_request(_request(response_format=response_format))
    assert "response_format" in str(info.value)


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "text"},
        {"type": "json_object"},
        _SCHEMA_FORMAT,
        {"type": "json_schema", "json_schema": {"name": "a", "schema": _SCHEMA, "strict": True}},
        {"type": "structural_tag", "structures": []},  # another server's own: as it is
    ],
)
def test_well_formed_response_formats_are_taken(response_format: dict[str, Any]) -> None:
    checked = validate_request(_request(response_format=response_format))
    assert checked.response_format == response_format


@pytest.mark.parametrize("stream", ["false", "no", 1])
def test_the_look_alike_client_takes_stream_as_a_bool_only(
    fake: FakeProvider, make_guard: MakeGuard, stream: object
) -> None:
    """``stream="false"`` was true: a stream where the caller wanted a completion (Guard.chat
    refuses it; the look-alike client read it as a truth value first)."""
    from llmguard_sdk import AsyncGuardedClient, GuardedClient

    guard = make_guard(fake)
    with pytest.raises(RequestValidationError, match="stream"):
        GuardedClient(guard).chat.completions.create(model="m", messages=USER, stream=stream)  # type: ignore[call-overload]

    async def run() -> None:
        await AsyncGuardedClient(guard).chat.completions.create(  # type: ignore[call-overload]
            model="m",
            messages=USER,
            stream=stream,
        )

    with pytest.raises(RequestValidationError, match="stream"):
        anyio.run(run)
    assert fake.requests == []


@pytest.mark.parametrize("choice", ["requried", "Auto", "function", ""])
def test_a_tool_choice_word_is_one_the_providers_know(choice: str) -> None:
    """A misspelt one went to every route, each answering 400."""
    with pytest.raises(RequestValidationError, match="tool_choice"):
        validate_request(_request(tools=[_GOOD_TOOL], tool_choice=choice))


@pytest.mark.parametrize("choice", ["none", "auto", "required", "any"])
def test_the_tool_choice_words_are_taken(choice: str) -> None:
    assert validate_request(_request(tools=[_GOOD_TOOL], tool_choice=choice)).tool_choice == choice


@pytest.mark.parametrize(
    ("parts", "problem"),
    [
        ([{"type": "text", "text": 5}], "text"),  # the seam answered 200, OpenAI refuses it
        ([{"type": "text"}], "text"),
        ([{"text": "hi"}], "type"),
        ([{"type": 3, "text": "hi"}], "type"),
    ],
)
def test_a_malformed_content_part_is_a_request_validation_error(
    parts: list[dict[str, Any]], problem: str
) -> None:
    content = [{"type": "text", "text": "Describe this:"}, *parts]
    with pytest.raises(RequestValidationError, match=problem) as info:
        validate_request({"messages": [{"role": "user", "content": content}]})
    assert "content part 1" in str(info.value)  # which part


def test_well_formed_content_parts_are_taken_as_they_are() -> None:
    parts = [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    ]
    request = validate_request({"messages": [{"role": "user", "content": parts}]})
    assert request.messages[0].content == parts
    assert request.messages[0].text == "What is in this image?"
