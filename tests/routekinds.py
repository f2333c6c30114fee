"""A Guard over a fake provider through one kind of route: chat completions, OpenAI's
Responses API, or Anthropic's Messages API (the fake provider serves all three)."""

from __future__ import annotations

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.providers.anthropic import AnthropicProvider
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

KINDS: dict[str, type[OpenAICompatibleProvider]] = {
    "chat": OpenAICompatibleProvider,
    "responses": OpenAIResponsesProvider,
    "anthropic": AnthropicProvider,
}


def route_to(
    fake: FakeProvider, kind: str = "chat", model: str | None = None
) -> OpenAICompatibleProvider:
    """A route named as ``fake`` is, spoken to as ``kind`` (a key of :data:`KINDS`), asking
    for ``model`` (default: ``fake``'s)."""
    return KINDS[kind](fake.base_url, model=model or fake.model, name=fake.name)


def guard_over(fake: FakeProvider, route: str) -> Guard:
    """A Guard (no retries) whose one route is ``fake`` spoken to as ``route`` (a key of
    :data:`KINDS`)."""
    return Guard(route_to(fake, route), environ={}, retry=None)
