"""A streamed hedge loser is charged the input its provider reported in the chunks it had
streamed when it was stopped (Anthropic's ``message_start`` usage: its prompt as the provider
counted it, cache reads and writes apart), not the Guard's own count of the prompt; a loser
whose first content came too, its output at least as counted."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import AnthropicProvider, ChatResponse, Guard, OpenAIResponsesProvider
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens, count_text_tokens

from .conftest import USER
from .test_budget_unserved import BUDGETS, _spent  # (fake-model: $100/$200 a million)
from .test_hedge_spend import _achat, _both_answer

# a Responses web search tool; fake-model's price has no fee: the default $0.01 a search
SEARCH: list[dict[str, Any]] = [{"type": "web_search"}]


def _route(server: FakeProvider) -> AnthropicProvider:
    return AnthropicProvider(server.base_url, api_key="k", model=server.model, name=server.name)


def _input(response: ChatResponse) -> int:
    """The winner's input tokens: the same prompt as the loser's, as the same fake counts it."""
    assert response.usage is not None
    return response.usage.input_tokens


def _backup_usd(response: ChatResponse) -> float:
    assert response.route == "backup"
    assert response.usage is not None
    return (_input(response) * 10 + response.usage.output_tokens * 20) / 1e6


def _streamed(guard: Guard, mode: str) -> ChatResponse:
    if mode == "async":
        return _achat(guard, lambda: None, stream=True)
    with guard.chat(USER, stream=True, max_tokens=100) as stream:
        list(stream)
    return stream.response


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_silent_streamed_loser_is_charged_the_input_its_provider_reported(
    fake: FakeProvider, fake2: FakeProvider, mode: str
) -> None:
    """The primary's stream had sent ``message_start`` (its usage: the prompt's input
    tokens as the provider counts them) and no content when the backup's first content won."""
    primary, backup = fake, fake2
    primary.always(Fault(first_token_delay=1.0))
    guard = Guard(
        [_route(primary), _route(backup)],
        budgets=BUDGETS,
        hedge_after=0.05,
        timeout=10,
        retry=None,
        environ={},
    )
    with guard:
        response = _streamed(guard, mode)
        loser_usd = _input(response) * 100 / 1e6  # its prompt, as its provider counted it
        assert response.cost_usd == pytest.approx(_backup_usd(response) + loser_usd)
        assert _spent(guard) == pytest.approx(response.cost_usd)


def test_a_streamed_loser_that_answered_too_is_charged_its_providers_input(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """Both streams reached their first content (the primary's waits for the backup's); the
    primary, which lost, is charged its provider's count of its prompt and its text counted
    (it was charged the Guard's count of its prompt)."""
    routes, loser, made = _both_answer(fake, fake2)
    for route, server in zip(routes, (fake, fake2), strict=True):
        route.inner = _route(server)  # (Anthropic's stream: message_start says the input)
    guard = Guard(routes, budgets=BUDGETS, hedge_after=0.05, timeout=10, retry=None, environ={})
    with guard:
        response = _achat(guard, made, stream=True)
        (first,) = [chunk for chunk in loser.first if chunk.text]
        output = count_text_tokens(first.text, "fake-model").tokens
        loser_usd = (_input(response) * 100 + output * 200) / 1e6
        assert response.cost_usd == pytest.approx(_backup_usd(response) + loser_usd)
        assert _spent(guard) == pytest.approx(response.cost_usd)


def _searching_prompt() -> int:
    """The input tokens of :data:`USER` with the :data:`SEARCH` tool, as the Guard counts."""
    request = ChatRequest.model_validate({"messages": USER, "tools": SEARCH})
    return count_request_tokens(request).tokens


def test_a_silent_streamed_loser_is_charged_its_prompt_and_the_searches_it_ran(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """The primary, a Responses route, had streamed its ``web_search_call`` item (no usage
    yet, no content) when the backup's first content won: charged its prompt as the Guard
    counted it and its search ($0.01); its prompt alone before."""
    primary, backup = fake, fake2
    primary.always(Fault(first_token_delay=2.0))
    routes = [
        OpenAIResponsesProvider(s.base_url, api_key="k", model=s.model, name=s.name)
        for s in (primary, backup)
    ]
    guard = Guard(routes, budgets=BUDGETS, hedge_after=0.3, timeout=10, retry=None, environ={})
    with guard, guard.chat(USER, stream=True, max_tokens=100, tools=SEARCH) as stream:
        list(stream)
    response = stream.response
    assert response.usage is not None
    assert response.usage.web_search_requests == 1  # the backup's own search
    assert response.cost_usd is not None
    loser_usd = response.cost_usd - (_backup_usd(response) + 0.01)
    assert loser_usd == pytest.approx(0.01 + _searching_prompt() * 100 / 1e6)
