"""Fields openai-python's own types let be ``null`` (a Responses function tool's
``description``, ``parameters`` and ``strict``, a ``text.format``'s ``strict``, chat's
``function.strict`` and ``json_schema.strict``) are what the API takes them for: absent, not
a 400 before any route. pydantic-ai's Responses model sends ``description: null`` for every
tool without a docstring."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.client import _openai_client
from llmguard_sdk.testing import FakeProvider

from .conftest import require_module

ASK: Any = [{"role": "user", "content": "hello there"}]
SCHEMA: Any = {"type": "object", "properties": {"city": {"type": "string"}}}


@pytest.fixture
def guard(fake: FakeProvider) -> Any:
    require_module("openai", "openai is a dev dependency")
    with Guard(OpenAICompatibleProvider(fake.base_url, model="m"), environ={}, retry=None) as g:
        yield g


def test_chat_strict_null_is_sent_as_the_sdk_sends_it(guard: Guard, fake: FakeProvider) -> None:
    client = _openai_client(guard)
    tool: Any = {"type": "function", "function": {"name": "w", "parameters": SCHEMA}}
    tool["function"]["strict"] = None
    client.chat.completions.create(model="m", messages=ASK, tools=[tool])
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
    fmt["json_schema"]["strict"] = None
    answer = client.chat.completions.create(model="m", messages=ASK, response_format=fmt)
    assert answer.choices[0].message.content == "Echo: hello there"
    sent = [r.body for r in fake.requests]  # as openai-python sends them to OpenAI
    assert sent[0]["tools"][0]["function"] == {"name": "w", "parameters": SCHEMA, "strict": None}
    assert sent[1]["response_format"]["json_schema"]["strict"] is None


def test_responses_null_tool_fields_are_absent(guard: Guard, fake: FakeProvider) -> None:
    client = _openai_client(guard)
    tool: Any = {"type": "function", "name": "w", "parameters": None, "strict": None}
    tool["description"] = None
    fmt: Any = {"type": "json_schema", "name": "p", "schema": SCHEMA, "strict": None}
    answer = client.responses.create(model="m", input="hello there", tools=[tool])
    assert answer.output_text == "Echo: hello there"
    client.responses.create(model="m", input="hello there", text={"format": fmt})
    sent_tool, sent_format = fake.requests[0].body["tools"][0], fake.requests[1].body
    assert sent_tool == {"type": "function", "function": {"name": "w"}}
    assert sent_format["response_format"]["json_schema"] == {"name": "p", "schema": SCHEMA}


def test_pydantic_ai_responses_model_with_a_tool(guard: Guard, fake: FakeProvider) -> None:
    require_module("pydantic_ai", "pydantic-ai-slim[openai] is a dev dependency")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(openai_client=guard.aclient())
    agent = Agent(OpenAIResponsesModel("m", provider=provider))

    @agent.tool_plain
    def weather(city: str) -> str:  # no docstring: its description is null
        return f"sunny in {city}"

    assert agent.run_sync("hello there").output == "Echo: hello there"
    assert fake.requests[-1].body["tools"][0]["function"]["name"] == "weather"


def test_an_answer_dumped_back_into_the_conversation(guard: Guard, fake: FakeProvider) -> None:
    # messages.append(completion.choices[0].message.model_dump()): openai's dump names every
    # field of its message, null where the answer had none (refusal, audio, function_call,
    # annotations), and OpenAI takes it back so
    client = _openai_client(guard)
    answer = client.chat.completions.create(model="m", messages=ASK)
    dumped: Any = answer.choices[0].message.model_dump()
    assert {"refusal", "audio", "function_call", "annotations"} <= set(dumped)
    again = client.chat.completions.create(model="m", messages=[*ASK, dumped, *ASK])
    assert again.choices[0].message.content == "Echo: hello there"
    assert fake.requests[-1].body["messages"][1] == {
        "role": "assistant",
        "content": "Echo: hello there",
    }


def test_a_refusal_sent_back_is_the_assistant_s_words(guard: Guard, fake: FakeProvider) -> None:
    # an answer OpenAI refused to give comes as message.refusal with content None; the chat
    # API takes it back in the history, and so does the Guard (it was a 400 before any route)
    client = _openai_client(guard)
    refused: Any = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    answer = client.chat.completions.create(model="m", messages=[*ASK, refused, *ASK])
    assert answer.choices[0].message.content == "Echo: hello there"
    assert fake.requests[-1].body["messages"][1] == {
        "role": "assistant",
        "content": "I can't help with that.",
    }
    import openai

    with pytest.raises(openai.BadRequestError, match="refusal"):  # no field of a user's
        client.chat.completions.create(model="m", messages=[{**ASK[0], "refusal": "no"}])
