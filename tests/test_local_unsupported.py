"""Requests the local model cannot serve (a tool call it must make, an image it must read) are
refused by the local route with a typed error, and the chain moves on: never a text answer
that silently ignores the tool or the image."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    Guard,
    LocalProvider,
    OpenAICompatibleProvider,
    UnsupportedRequestError,
)
from llmguard_sdk.models import ChatRequest, Message
from llmguard_sdk.testing import FakeProvider, Fault

pytestmark = pytest.mark.local_model

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
IMAGE = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ],
    }
]


@pytest.mark.parametrize(
    ("messages", "options", "said"),
    [
        (WEATHER, {"tools": TOOLS, "tool_choice": "required"}, "call a tool"),
        (
            WEATHER,
            {
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
            "call a tool",
        ),
        (WEATHER, {"tools": TOOLS, "tool_choice": {"type": "any"}}, "call a tool"),
        (IMAGE, {}, "image_url"),
    ],
)
def test_the_local_route_refuses_what_it_cannot_serve_and_the_chain_moves_on(
    local: LocalProvider, messages: list[dict[str, Any]], options: dict[str, Any], said: str
) -> None:
    with FakeProvider(name="primary") as primary:
        primary.always(Fault(status=503))
        remote = OpenAICompatibleProvider(primary.base_url, model="gpt-x", name="primary")
        guard = Guard([remote, local], retry=None, timeout=60, environ={})
        with pytest.raises(AllRoutesFailedError) as failed:
            guard.chat(messages, max_tokens=8, temperature=0, **options)
        refused = failed.value.errors["local"]
        assert isinstance(refused, UnsupportedRequestError)
        assert said in str(refused)
        assert refused.route == "local"
        remote.close()


def test_a_route_after_the_local_one_serves_what_it_refused(local: LocalProvider) -> None:
    with FakeProvider(name="backup") as backup:
        remote = OpenAICompatibleProvider(backup.base_url, model="gpt-x", name="backup")
        guard = Guard([local, remote], retry=None, timeout=60, environ={})
        answer = guard.chat(WEATHER, tools=TOOLS, tool_choice="required", max_tokens=8)
        assert answer.route == "backup"
        assert isinstance(answer.attempts, int)
        remote.close()


@pytest.mark.parametrize("choice", ["auto", {"type": "auto"}, {"type": "none"}, None])
def test_tools_the_model_may_leave_unused_are_still_served(
    local: LocalProvider, choice: str | dict[str, str] | None
) -> None:
    guard = Guard(local, retry=None, timeout=60, environ={})
    answer = guard.chat(WEATHER, tools=TOOLS, tool_choice=choice, max_tokens=4, temperature=0)
    assert answer.route == "local"
    assert answer.text


def test_a_long_system_prompt_is_cut_before_the_question(local: LocalProvider) -> None:
    # A system message of documents (RAG) longer than the context, and a short question: the
    # question was cut first, to nothing (its content[overflow + 1:] was empty), and the model
    # answered no question. The system message gives way first now. (What the call would
    # read, without reading it: a 1,000-token prompt takes tens of seconds on a busy CPU.)
    question = "What is the capital of France?"
    documents = "Background document, line of filler text. " * 300
    engine = local._worker.engine
    assert engine is not None
    request = ChatRequest(
        messages=[
            Message(role="system", content=documents),
            Message(role="user", content=question),
        ],
        max_tokens=4,
    )
    tokens, trimmed = engine.fit(local, request)
    assert trimmed is not None
    assert trimmed["truncated"]
    prompt = engine.llm.detokenize(tokens).decode("utf-8", "replace")
    assert question in prompt
    assert prompt.count("Background document") > 10  # the start of the documents is kept


def test_a_long_prompt_of_system_messages_alone_is_cut(local: LocalProvider) -> None:
    # Without a turn, the trimming read turns[-1] of an empty list: an IndexError, which the
    # worker turned into a retryable ProviderUnavailableError ("local model failed").
    engine = local._worker.engine
    assert engine is not None
    request = ChatRequest(
        messages=[Message(role="system", content="Summarise this text. " * 400)], max_tokens=4
    )
    tokens, trimmed = engine.fit(local, request)
    assert trimmed is not None
    assert trimmed["truncated"]
    assert len(tokens) <= local.n_ctx - 16
