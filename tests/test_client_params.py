"""What the drop-in clients' parameters become on each kind of route (real SDKs, FakeProvider)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from llmguard_sdk import AnthropicProvider, Guard, OpenAICompatibleProvider
from llmguard_sdk.client import _openai_client, anthropic_client
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
ANTHROPIC_TOOL = {"name": "lookup", "input_schema": {"type": "object"}}


@pytest.fixture
def claude() -> Iterator[FakeProvider]:
    with FakeProvider(model="claude-fake") as server:
        yield server


def anthropic_guard(server: FakeProvider) -> Guard:
    return Guard(AnthropicProvider(server.base_url, api_key="k"), retry=None, environ={})


def test_openai_parameters_reach_an_anthropic_route_as_anthropic_ones(
    claude: FakeProvider,
) -> None:
    # the openai client's `user`, `parallel_tool_calls`, `frequency_penalty`, `logprobs` and
    # `metadata` were sent to Anthropic as they were: it answers 400 "Extra inputs are not
    # permitted" (a fallback to Claude failed for any app passing `user=`)
    options: dict[str, Any] = {
        "user": "u-1",
        "parallel_tool_calls": False,
        "frequency_penalty": 0.2,
        "logprobs": True,
        "metadata": {"run": "7"},
    }
    with anthropic_guard(claude) as guard:
        client = _openai_client(guard)
        client.chat.completions.create(model="m", messages=USER, tools=[TOOL], **options)
    body = claude.requests[-1].body
    assert not {"user", "parallel_tool_calls", "frequency_penalty", "logprobs"} & set(body)
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_anthropic_parameters_reach_either_kind_of_route(
    claude: FakeProvider, fake: FakeProvider
) -> None:
    # metadata.user_id went to Anthropic as `user` (400 there), and
    # tool_choice.disable_parallel_tool_use was dropped on every route
    options: dict[str, Any] = {
        "metadata": {"user_id": "u-2"},
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "tools": [ANTHROPIC_TOOL],
    }
    with anthropic_guard(claude) as guard:
        anthropic_client(guard).messages.create(model="m", max_tokens=20, messages=USER, **options)
    body = claude.requests[-1].body
    assert "user" not in body
    assert body["metadata"] == {"user_id": "u-2"}
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    chat = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with Guard(chat, retry=None, environ={}) as guard:
        anthropic_client(guard).messages.create(model="m", max_tokens=20, messages=USER, **options)
    body = fake.requests[-1].body
    assert body["user"] == "u-2"
    assert body["parallel_tool_calls"] is False
    assert body["tool_choice"] == "auto"


STATIC = " ".join(f"Rule {i}: answer from the handbook and cite the rule." for i in range(40))
EPHEMERAL = {"type": "ephemeral"}


def cached_request() -> dict[str, Any]:
    """A Messages request with breakpoints on its system prompt, a tool and a message."""
    return {
        "model": "m",
        "max_tokens": 20,
        "system": [{"type": "text", "text": STATIC, "cache_control": EPHEMERAL}],
        "tools": [{**ANTHROPIC_TOOL, "cache_control": EPHEMERAL}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": STATIC, "cache_control": EPHEMERAL}],
            },
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "What is rule 3?"},
        ],
    }


def test_the_anthropic_clients_cache_breakpoints_reach_an_anthropic_route() -> None:
    # the breakpoints were dropped on the way (system and text blocks joined into strings,
    # tools rebuilt without them): Claude cached nothing for the anthropic client's callers
    with (
        FakeProvider(model="claude-fake", prefix_cache=True) as server,
        anthropic_guard(server) as guard,
    ):
        client = anthropic_client(guard)
        client.messages.create(**cached_request())
        body = server.requests[-1].body
        assert body["system"][-1]["cache_control"] == EPHEMERAL
        assert body["tools"][-1]["cache_control"] == EPHEMERAL
        assert body["messages"][0]["content"][-1]["cache_control"] == EPHEMERAL
        again = client.messages.create(**cached_request())
    assert again.usage.cache_read_input_tokens > 0


def test_cache_breakpoints_are_not_sent_to_a_chat_route(fake: FakeProvider) -> None:
    chat = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with Guard(chat, retry=None, environ={}) as guard:
        anthropic_client(guard).messages.create(**cached_request())
    body = fake.requests[-1].body
    assert "cache_control" not in json.dumps(body)
    assert body["messages"][0] == {"role": "system", "content": STATIC}  # as before
    assert body["messages"][1] == {"role": "user", "content": STATIC}


def test_an_endpoint_the_seam_does_not_serve_answers_in_anthropics_shape(
    fake: FakeProvider,
) -> None:
    # an Anthropic endpoint the seam does not serve (POST /v1/messages/count_tokens, before
    # the seam served it) was refused with OpenAI's error body, which anthropic's SDK does not
    # read as its own (no "type": "error")
    chat = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with Guard(chat, retry=None, environ={}) as guard:
        client = anthropic_client(guard)
        with pytest.raises(anthropic.NotFoundError) as refused:
            client.messages.batches.list()
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "not_found_error"
    assert "batches" in refused.value.body["error"]["message"]
