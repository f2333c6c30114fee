"""What each kind of route is sent of an Anthropic Messages request (``anthropic_client``'s
callers): every field of anthropic's ``MessageCreateParams`` at once. An Anthropic route
gets every one; a chat-completions route only fields openai's ``CompletionCreateParams``
names (its counterparts of Claude's where it has them), a Responses route only fields
``ResponseCreateParams`` names: OpenAI's API answers 400 to a field it does not know."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsBase
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from llmguard_sdk import DroppedParameterWarning
from llmguard_sdk.client import anthropic_client
from llmguard_sdk.testing import FakeProvider

from .routekinds import guard_over

_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
_TOOL = {"name": "lookup", "description": "find it", "input_schema": {"type": "object"}}
# a value for every parameter of anthropic's messages.create(), but messages, model and
# max_tokens (user_profile_id and workspace_id: the SDK sends them as headers)
_EVERY_MESSAGES: dict[str, Any] = {
    "cache_control": {"type": "ephemeral"},
    "container": "container_1",
    "diagnostics": {"previous_message_id": "msg_1"},
    "inference_geo": "us",
    "metadata": {"user_id": "user-1"},
    "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": _SCHEMA}},
    "service_tier": "standard_only",
    "speed": "fast",
    "stop_sequences": ["END"],
    "system": "be brief",
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "tools": [_TOOL],
    "user_profile_id": "profile-1",
    "workspace_id": "wrkspc_1",
}
_AS_HEADERS = {
    "user_profile_id": "anthropic-user-profile-id",
    "workspace_id": "anthropic-workspace-id",
}
# fields Claude's models take that anthropic's SDK passes in extra_body: the sampling
# parameters (its types dropped them), the beta API's mcp_servers and context_management
_EXTRA: dict[str, Any] = {
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "docs"}],
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
}
_OPENAI_FIELDS = {
    "chat": frozenset(CompletionCreateParamsBase.__annotations__) | {"stream"},
    "responses": frozenset(ResponseCreateParamsBase.__annotations__) | {"stream"},
}


def test_the_list_names_every_parameter_of_anthropic_s_types() -> None:
    """(A parameter anthropic adds fails this test: decide what other routes get of it.)"""
    named = set(_EVERY_MESSAGES) | {"messages", "model", "max_tokens"}
    assert named == set(MessageCreateParamsBase.__annotations__)


def _create(fake: FakeProvider, route: str, streaming: bool) -> dict[str, Any]:
    with guard_over(fake, route) as guard:
        answer = anthropic_client(guard).messages.create(
            model="fake-model",
            max_tokens=50,
            messages=[{"role": "user", "content": "hi"}],
            stream=streaming,
            extra_body=_EXTRA,
            **_EVERY_MESSAGES,
        )
        if streaming:
            list(answer)
    body: dict[str, Any] = fake.requests[-1].body or {}
    return body


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("route", ["chat", "responses"])
def test_every_messages_field_reaches_an_openai_route_only_as_its_api_takes_it(
    fake: FakeProvider, route: str, streaming: bool
) -> None:
    """``service_tier: "standard_only"``, ``container``, ``output_config``,
    ``inference_geo``, ``speed``, ``diagnostics``, the top-level ``cache_control`` (and the
    beta API's ``mcp_servers`` and ``context_management``) went on to chat-completions and
    Responses routes, which answer 400 to each. (A Responses route sends no ``stop``, and
    says so.)"""
    if route == "chat":
        sent = _create(fake, route, streaming)
    else:
        with pytest.warns(DroppedParameterWarning, match="'stop'"):
            sent = _create(fake, route, streaming)
    assert set(sent) <= _OPENAI_FIELDS[route], set(sent) - _OPENAI_FIELDS[route]
    assert "standard_only" not in str(sent.get("service_tier"))
    if route == "chat":  # the counterparts chat completions has
        assert sent["user"] == "user-1"
        assert sent["stop"] == ["END"]
        assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("auto", False)
        assert (sent["temperature"], sent["top_p"]) == (0.5, 0.9)
        assert sent["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": _SCHEMA},
        }
    else:
        assert sent["text"]["format"] == {
            "type": "json_schema",
            "name": "output",
            "schema": _SCHEMA,
        }


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_every_messages_field_reaches_an_anthropic_route(
    fake: FakeProvider, streaming: bool
) -> None:
    sent = _create(fake, "anthropic", streaming)
    headers = fake.requests[-1].headers
    same = {**_EVERY_MESSAGES, **_EXTRA, "system": [{"type": "text", "text": "be brief"}]}
    for key, value in same.items():
        if key in _AS_HEADERS:
            assert headers.get(_AS_HEADERS[key]) == value, key
        else:
            assert sent.get(key) == value, key
    assert not {"user", "stop", "response_format", "parallel_tool_calls"} & set(sent)


_SERVER_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools") or ()]


@pytest.mark.parametrize("route", ["anthropic", "chat", "responses"])
def test_a_server_tool_reaches_anthropic_routes_only(fake: FakeProvider, route: str) -> None:
    """Claude's server tools (web search, code execution ...: a ``type`` of their own) were
    made function tools with no schema: Claude was sent a client tool of that name, which
    it asks the caller to run, and OpenAI a function the caller does not have."""
    with guard_over(fake, route) as guard:
        anthropic_client(guard).messages.create(
            model="fake-model",
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            tools=[_TOOL, _SERVER_TOOL],
            tool_choice={"type": "auto"},
        )
        sent: dict[str, Any] = fake.requests[-1].body or {}
        if route == "anthropic":
            assert sent["tools"] == [_TOOL, _SERVER_TOOL]
        else:
            assert _tool_names(sent) == ["lookup"]
            assert sent["tool_choice"] == "auto"
        # a request with server tools alone: no tools (nor a tool choice) on other routes
        anthropic_client(guard).messages.create(
            model="fake-model",
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            tools=[_SERVER_TOOL],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        )
        sent = fake.requests[-1].body or {}
        if route == "anthropic":
            assert sent["tools"] == [_SERVER_TOOL]
        else:
            assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(sent)
        # a tool choice naming a server tool: none on other routes (OpenAI 400s it)
        anthropic_client(guard).messages.create(
            model="fake-model",
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            tools=[_TOOL, _SERVER_TOOL],
            tool_choice={"type": "tool", "name": "web_search"},
        )
    sent = fake.requests[-1].body or {}
    if route == "anthropic":
        assert sent["tool_choice"] == {"type": "tool", "name": "web_search"}
    else:
        assert _tool_names(sent) == ["lookup"]
        assert "tool_choice" not in sent
