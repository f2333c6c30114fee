"""A conversation whose assistant called a tool, sent to the local model: the model reads
which tool ran, with which arguments, and what it returned (it read an empty assistant turn
and a result of nothing it knew of)."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.providers._local_messages import local_messages


def _conversation(city: str, *, named: bool = False, failed: bool = False) -> list[Any]:
    result: dict[str, Any] = {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}
    if named:
        result["name"] = "lookup"
    if failed:
        result["is_error"] = True
    return [
        {"role": "user", "content": "How warm is it where I am?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'},
                }
            ],
        },
        result,
    ]


def test_tool_calls_and_results_are_written_into_the_texts() -> None:
    request = ChatRequest.model_validate({"messages": _conversation("Paris")})
    assert local_messages(request) == [
        {"role": "user", "content": "How warm is it where I am?"},
        {"role": "assistant", "content": 'get_weather({"city": "Paris"})'},
        {"role": "tool", "content": "get_weather returned: 18 C"},
    ]
    named = ChatRequest.model_validate({"messages": _conversation("Paris", named=True)})
    assert local_messages(named)[-1]["content"] == "lookup returned: 18 C"
    failed = ChatRequest.model_validate({"messages": _conversation("Paris", failed=True)})
    assert local_messages(failed)[-1]["content"] == "get_weather failed: 18 C"


def test_an_assistant_text_beside_its_tool_calls_is_kept() -> None:
    messages = _conversation("Oslo")
    messages[1]["content"] = "Let me look."
    request = ChatRequest.model_validate({"messages": messages})
    assert local_messages(request)[1]["content"] == 'Let me look.\nget_weather({"city": "Oslo"})'


@pytest.mark.local_model
def test_the_local_model_reads_the_tool_call_and_its_result() -> None:
    from tests.localmodel import loaded_model

    # the bundled model's chat template has no tool role: the result is a user's message
    by_hand = [
        {"role": "user", "content": "How warm is it where I am?"},
        {"role": "assistant", "content": 'get_weather({"city": "Paris"})'},
        {"role": "user", "content": "get_weather returned: 18 C"},
    ]
    with loaded_model(n_ctx=512) as provider:
        guard = Guard(provider, timeout=240, environ={})
        counts = [
            provider.count_tokens(ChatRequest.model_validate({"messages": messages}))
            for messages in (_conversation("Paris"), _conversation("Reykjavik"), by_hand)
        ]
        answer = guard.chat(_conversation("Paris"), temperature=0, max_tokens=16)
    paris, reykjavik, written = counts
    assert paris is not None
    assert reykjavik is not None
    assert reykjavik > paris  # the call's arguments are in the prompt
    assert paris == written
    assert answer.text.strip()
