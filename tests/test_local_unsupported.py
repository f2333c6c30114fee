"""Requests the local model cannot serve (a tool call it must make, an image it must read) are
refused by the local route with a typed error, and the chain moves on: never a text answer
that silently ignores the tool or the image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    ConfigurationError,
    Guard,
    LocalProvider,
    OpenAICompatibleProvider,
    UnsupportedRequestError,
)
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


@pytest.mark.parametrize("content", [b"not a gguf file", b""])
def test_a_file_that_is_not_gguf_is_refused_when_the_provider_is_made(
    tmp_path: Path, content: bytes
) -> None:
    # It was accepted, then every call failed with a retryable ProviderUnavailableError
    # ("failed to load"): retried, a breaker failure, and the mistake found only in an outage.
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError, match="not a GGUF file"):
        LocalProvider(path)


def test_a_missing_model_file_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="bundled model"):
        LocalProvider(tmp_path / "missing.gguf")


def test_async_calls_are_refused_alike(local: LocalProvider) -> None:
    guard = Guard(local, retry=None, timeout=60, environ={})

    async def call() -> None:
        await guard.achat(IMAGE, max_tokens=4)

    with pytest.raises(UnsupportedRequestError, match="image_url"):
        anyio.run(call)
