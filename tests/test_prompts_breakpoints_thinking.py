"""The history's breakpoint (``request(cache_history=True)``) goes on the last block of the
history that Claude lets carry one: not a ``thinking`` or ``redacted_thinking`` block, nor an
empty text block, which Claude answers with a 400 (``...thinking.cache_control: Extra inputs
are not permitted``). A history whose last assistant turn is thinking alone (an answer cut at
``max_tokens`` while Claude thought, kept in the conversation) made every later call fail."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.prompts import PromptBuilder
from llmguard_sdk.testing import FakeProvider

from .test_anthropic import STATIC, api, guard

__all__ = ["api", "guard"]  # (the fixtures, used here)

THOUGHT: dict[str, Any] = {"type": "thinking", "thinking": "Let me see.", "signature": "c2ln"}
REDACTED: dict[str, Any] = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}


def _builder() -> PromptBuilder:
    return PromptBuilder("thinking", instructions=STATIC, drift=None, min_cache_tokens=None)


def _history(thought: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "How long is the warranty?"},
        {"role": "assistant", "content": "", "thinking": [thought]},  # cut while thinking
    ]


def _marked(params: dict[str, Any]) -> list[tuple[int, int, str]]:
    """Where the messages carry a breakpoint: (message, block, the block's type)."""
    return [
        (i, j, str(block.get("type")))
        for i, message in enumerate(params["messages"])
        for j, block in enumerate(
            message["content"] if isinstance(message["content"], list) else ()
        )
        if "cache_control" in block
    ]


@pytest.mark.parametrize("thought", [THOUGHT, REDACTED], ids=["thinking", "redacted"])
def test_no_breakpoint_goes_on_a_thinking_block(thought: dict[str, Any]) -> None:
    prompt = _builder().build("And for batteries?", history=_history(thought))
    params = prompt.anthropic_params(cache_history=True)
    assert _marked(params) == [(0, 0, "text")]  # the history's last block that takes one
    assert "cache_control" in params["system"][-1]  # (the static part's, as before)


def test_an_empty_text_block_takes_none_either() -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": ""}]}
    ]
    params = _builder().build("Go on", history=history).anthropic_params(cache_history=True)
    assert _marked(params) == [(0, 0, "text")]


@pytest.mark.parametrize("thought", [THOUGHT, REDACTED], ids=["thinking", "redacted"])
def test_claude_takes_the_call(api: FakeProvider, guard: Guard, thought: dict[str, Any]) -> None:
    prompt = _builder().build("And for batteries?", history=_history(thought))
    answer = guard.chat(request=prompt.request(max_tokens=50, cache_history=True))
    assert answer.text
    sent = api.requests[-1].body
    assert _marked(sent) == [(0, 0, "text")]


def test_the_fake_refuses_what_claude_refuses(api: FakeProvider) -> None:
    """FakeProvider answers as Claude does: a breakpoint on thinking is a 400."""
    import json
    import urllib.error
    import urllib.request

    body = {
        "model": "claude-fake",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{**THOUGHT, "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "Go on"},
        ],
    }
    request = urllib.request.Request(
        f"{api.base_url}/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": "k", "anthropic-version": "1"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert "thinking.cache_control" in refused.value.read().decode()
