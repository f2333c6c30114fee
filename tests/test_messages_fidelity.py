"""What of an Anthropic Messages request (``anthropic_client``'s callers) each kind of route
is sent, part by part: Claude's own headers, a client tool's ``strict`` and Claude's other
tool fields, more ``stop_sequences`` than chat completions takes. An Anthropic route gets
them as the caller sent them; chat-completions and Responses routes what their APIs take."""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

import pytest

from llmguard_sdk.client import anthropic_client
from llmguard_sdk.errors import DroppedParameterWarning
from llmguard_sdk.testing import FakeProvider

from .routekinds import guard_over

_ASK: list[Any] = [{"role": "user", "content": "hi"}]
_CLAUDE_HEADERS = {
    "anthropic-beta": "context-1m-2025-08-07",
    "anthropic-user-profile-id": "profile-1",
    "anthropic-workspace-id": "wrkspc_1",
}


@pytest.mark.parametrize("route", ["anthropic", "chat", "responses"])
def test_claude_s_own_headers_reach_anthropic_routes_only(fake: FakeProvider, route: str) -> None:
    """``anthropic-beta`` (``betas=[...]``) and the workspace and user-profile headers went
    on to chat-completions and Responses routes: another provider was told which Anthropic
    workspace and user profile the caller acts for. A caller's other headers go on."""
    with guard_over(fake, route) as guard:
        anthropic_client(guard).messages.create(
            model="fake-model",
            max_tokens=20,
            messages=_ASK,
            user_profile_id="profile-1",
            workspace_id="wrkspc_1",
            extra_headers={"anthropic-beta": "context-1m-2025-08-07", "x-team": "blue"},
        )
    headers = fake.requests[-1].headers
    sent = {name: headers.get(name) for name in _CLAUDE_HEADERS}
    if route == "anthropic":
        assert sent == _CLAUDE_HEADERS
    else:
        assert sent == dict.fromkeys(_CLAUDE_HEADERS)
    assert headers.get("x-team") == "blue"


_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
_STRICT_TOOL: dict[str, Any] = {
    "name": "lookup",
    "description": "find it",
    "input_schema": _SCHEMA,
    "strict": True,
    "input_examples": [{"city": "Paris"}],
    "defer_loading": False,
    "eager_input_streaming": True,
    "cache_control": {"type": "ephemeral"},
}


@pytest.mark.parametrize("route", ["anthropic", "chat", "responses"])
def test_a_client_tool_s_strict_and_claude_s_tool_fields(fake: FakeProvider, route: str) -> None:
    """A client tool's ``strict`` and ``input_examples`` (anthropic's ``ToolParam``) were
    lost on the way to an Anthropic route; chat-completions and Responses routes get
    ``strict`` (their function tools have it) and none of Claude's other tool fields."""
    with guard_over(fake, route) as guard:
        anthropic_client(guard).messages.create(
            model="fake-model", max_tokens=20, messages=_ASK, tools=[_STRICT_TOOL]
        )
    (tool,) = (fake.requests[-1].body or {})["tools"]
    if route == "anthropic":
        assert tool == _STRICT_TOOL
    elif route == "chat":
        function = {"name": "lookup", "description": "find it", "parameters": _SCHEMA}
        assert tool == {"type": "function", "function": {**function, "strict": True}}
    else:
        assert tool == {
            "type": "function",
            "name": "lookup",
            "description": "find it",
            "parameters": _SCHEMA,
            "strict": True,
        }


_STOPS = ["one", "two", "three", "four", "five", "six"]


@pytest.mark.parametrize("route", ["anthropic", "chat", "responses"])
def test_more_stop_sequences_than_chat_completions_takes(
    fake: FakeProvider, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Claude takes any number of ``stop_sequences``, chat completions' ``stop`` 4 at most:
    six were refused on every route (the Guard's own 4-sequence rule), an Anthropic route's
    too. An Anthropic route gets all six; a chat route the first four, with a warning; a
    Responses route none (the Responses API has no stop sequences)."""
    dropped = (  # (a Responses route says once that it sends no stop sequences)
        pytest.warns(DroppedParameterWarning, match="'stop'")
        if route == "responses"
        else contextlib.nullcontext()
    )
    logged = caplog.at_level(logging.WARNING, logger="llmguard_sdk")
    with logged, guard_over(fake, route) as g, dropped:
        anthropic_client(g).messages.create(
            model="fake-model", max_tokens=20, messages=_ASK, stop_sequences=_STOPS
        )
    sent = fake.requests[-1].body or {}
    warned = [r.getMessage() for r in caplog.records if "stop sequences" in r.getMessage()]
    if route == "anthropic":
        assert sent["stop_sequences"] == _STOPS
        assert warned == []
    elif route == "chat":
        assert sent["stop"] == _STOPS[:4]
        assert "stop_sequences" not in sent
        assert len(warned) == 1
        assert "4 of 6" in warned[0]
    else:
        assert not {"stop", "stop_sequences"} & set(sent)
    # four or fewer: as before, on every route
    with guard_over(fake, route) as guard, warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedParameterWarning)  # (said above)
        anthropic_client(guard).messages.create(
            model="fake-model", max_tokens=20, messages=_ASK, stop_sequences=_STOPS[:2]
        )
    sent = fake.requests[-1].body or {}
    if route != "responses":
        assert sent["stop_sequences" if route == "anthropic" else "stop"] == _STOPS[:2]
