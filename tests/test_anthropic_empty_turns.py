"""An assistant turn with no text (``content=""``: an answer a content filter stopped, one cut
at ``max_tokens`` before any text) and no thinking or tool calls went to Claude as
``content: []``: Claude answers 400 (``all messages must have non-empty content except for
the optional final assistant message``) to every later call of that conversation. Such a turn
is left out: Claude combines the user turns on either side into one, as it does any
consecutive turns of one role; nothing of the conversation's text is lost."""

from __future__ import annotations

from typing import Any

import httpx

from llmguard_sdk import AnthropicProvider, ChatRequest, Guard
from llmguard_sdk.providers.anthropic import anthropic_params
from llmguard_sdk.testing import FakeProvider

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Tell me a secret."},
    {"role": "assistant", "content": ""},  # (the filter stopped it)
    {"role": "user", "content": "Then tell me a joke."},
]


def test_a_conversation_with_an_empty_assistant_turn_is_answered() -> None:
    with FakeProvider(model="claude-fake") as api:
        provider = AnthropicProvider(api.base_url, api_key="k", model="claude-fake")
        with Guard(provider, environ={}, retry=None) as guard:
            answer = guard.chat(HISTORY, max_tokens=20)
        sent = api.requests[-1].body["messages"]
    assert answer.text
    assert all(m["content"] for m in sent)
    assert [m["role"] for m in sent] == ["user", "user"]  # (Claude joins them)


def test_only_empty_turns_are_left_out() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    thinking = [{"type": "thinking", "thinking": "hm", "signature": "s"}]
    request = ChatRequest.model_validate(
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
                {"role": "assistant", "content": "", "thinking": thinking},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": ""},  # a final one: a prefill of nothing
            ]
        }
    )
    roles = [(m["role"], bool(m["content"])) for m in anthropic_params(request)["messages"]]
    assert roles == [("user", True), ("assistant", True), ("user", True), ("assistant", True),
                     ("user", True)]  # fmt: skip


def test_the_fake_refuses_an_empty_turn_as_claude_does() -> None:
    with FakeProvider(model="claude-fake") as api:
        body = {"model": "claude-fake", "max_tokens": 5, "messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": []},
            {"role": "user", "content": "b"}]}  # fmt: skip
        answer = httpx.post(
            api.base_url + "/messages", json=body, headers={"anthropic-version": "2023-06-01"}
        )
    assert answer.status_code == 400
    assert "non-empty content" in answer.json()["error"]["message"]
