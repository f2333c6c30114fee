"""The drop-in OpenAI clients say how many tokens carried audio, as OpenAI's usage does.

A route's usage reports its audio tokens (``prompt_tokens_details.audio_tokens``,
``completion_tokens_details.audio_tokens``) and ``Usage`` keeps them (``audio_input_tokens``,
``audio_output_tokens``), but ``guard.client()`` answered without them: code reading them off
the completion (to bill a customer, to log a call's cost) found ``None``. Both clients, openai's
over the Guard's transport and the look-alike without openai, now give them where known, in
answers and in a stream's usage chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.client import GuardedClient
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, require_module


def _with_audio(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """The fake bills 800 of 1,000 input tokens and 400 of 500 output tokens as audio."""
    return {
        "prompt_tokens": 1000,
        "completion_tokens": 500,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 800},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 400},
    }


@pytest.fixture
def guard() -> Iterator[Guard]:
    with FakeProvider(model="gpt-audio", usage=_with_audio) as fake:
        route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="openai")
        with Guard(route, environ={}) as guard:
            yield guard


def _clients(guard: Guard) -> list[Any]:
    require_module("openai", "openai is a dev dependency")
    return [guard.client(), GuardedClient(guard)]  # openai's own, and the look-alike


def _get(details: Any, name: str) -> Any:
    return details.get(name) if isinstance(details, dict) else getattr(details, name)


def test_an_answers_usage_says_its_audio_tokens(guard: Guard) -> None:
    for client in _clients(guard):
        usage = client.chat.completions.create(model="gpt-audio", messages=USER).usage
        assert (usage.prompt_tokens, usage.completion_tokens) == (1000, 500)
        assert _get(usage.prompt_tokens_details, "audio_tokens") == 800
        assert _get(usage.completion_tokens_details, "audio_tokens") == 400
        assert _get(usage.completion_tokens_details, "reasoning_tokens") in (0, None)


def test_a_streams_usage_chunk_says_its_audio_tokens(guard: Guard) -> None:
    options: dict[str, Any] = {"stream_options": {"include_usage": True}}
    for client in _clients(guard):
        chunks = list(
            client.chat.completions.create(model="gpt-audio", messages=USER, stream=True, **options)
        )
        usage = chunks[-1].usage
        assert _get(usage.prompt_tokens_details, "audio_tokens") == 800
        assert _get(usage.completion_tokens_details, "audio_tokens") == 400


def test_a_text_answer_has_no_audio_tokens_to_say(fake: FakeProvider) -> None:
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="text")
    with Guard(route, environ={}) as text:
        for client in _clients(text):
            usage = client.chat.completions.create(model="fake-model", messages=USER).usage
            assert _get(usage.prompt_tokens_details, "audio_tokens") is None
            assert _get(usage.completion_tokens_details or {}, "audio_tokens") is None
