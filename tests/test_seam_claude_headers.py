"""Claude's own headers (``anthropic-beta``, the workspace and user profile) that a caller
sets on openai's SDK through the seam's chat-completions and Responses paths: an Anthropic
route gets them, a chat-completions or Responses route (OpenAI) does not, as through the
seam's ``/messages``. A caller's other headers go on to every route."""

from __future__ import annotations

import openai
import pytest

from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.transport import http_client

from .conftest import USER
from .routekinds import guard_over

_CLAUDE_HEADERS = {
    "anthropic-beta": "context-1m-2025-08-07",
    "anthropic-user-profile-id": "profile-1",
    "anthropic-workspace-id": "wrkspc_1",
}


@pytest.mark.parametrize("path", ["chat", "responses"])
@pytest.mark.parametrize("route", ["anthropic", "chat", "responses"])
def test_claude_s_own_headers_reach_anthropic_routes_only(
    fake: FakeProvider, route: str, path: str
) -> None:
    """They went on to every route: an OpenAI route was told which Anthropic workspace and
    user profile the caller acts for, and Anthropic's beta flags."""
    headers = {**_CLAUDE_HEADERS, "anthropic-version": "2001-01-01", "x-team": "blue"}
    with guard_over(fake, route) as guard, http_client(guard) as client:
        sdk = openai.OpenAI(api_key="sk-x", base_url="http://guard.test/v1", http_client=client)
        if path == "chat":
            sdk.chat.completions.create(model="fake-model", messages=USER, extra_headers=headers)
        else:
            sdk.responses.create(model="fake-model", input="hello there", extra_headers=headers)
    sent = fake.requests[-1].headers
    got = {name: sent.get(name) for name in _CLAUDE_HEADERS}
    if route == "anthropic":
        assert got == _CLAUDE_HEADERS
        assert sent.get("anthropic-version") == "2023-06-01"  # the route's own
    else:
        assert got == dict.fromkeys(_CLAUDE_HEADERS)
        assert sent.get("anthropic-version") is None
    assert sent.get("x-team") == "blue"
