"""More than four ``cache_control`` breakpoints of the caller's own (Claude takes four in a
request, a top-level ``cache_control`` counted, and answers 400 to more) are refused before
anything is sent, with a :class:`RequestValidationError` that counts them and says where they
are: they were sent as given, and Claude's 400 came back after a round trip. None is dropped
on the caller's behalf (which of them the caller would keep, only the caller knows)."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import ChatRequest, Guard, Message
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.prompts import PromptBuilder
from llmguard_sdk.providers.anthropic import anthropic_params
from llmguard_sdk.testing import FakeProvider

from .test_anthropic import STATIC, api, guard

__all__ = ["api", "guard"]  # (the fixtures, used here)

FIVE: dict[str, Any] = {"type": "ephemeral"}


def _marked(count: int) -> list[dict[str, Any]]:
    """The user's content: ``count`` documents the caller marked, then the question."""
    docs = [{"type": "text", "text": f"doc {i}", "cache_control": FIVE} for i in range(count)]
    return [*docs, {"type": "text", "text": "What do they say?"}]


def _request(count: int, **fields: Any) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=_marked(count))], **fields)


def _call(guard: Guard, request: ChatRequest, streaming: bool) -> str:
    if not streaming:
        return guard.chat(request=request).text
    with guard.chat(request=request, stream=True) as stream:
        return "".join(chunk.text for chunk in stream)


@pytest.mark.parametrize("streaming", [False, True])
def test_five_of_the_caller_s_own_are_refused_before_sending(
    api: FakeProvider, guard: Guard, streaming: bool
) -> None:
    with pytest.raises(RequestValidationError, match=r"5 cache_control breakpoints") as caught:
        _call(guard, _request(5), streaming)
    assert "4 at most" in str(caught.value)
    assert "messages[0].content[4]" in str(caught.value)  # (where the last one is)
    assert api.stats.requests == 0  # (it was sent, and Claude's 400 came back)


def test_automatic_caching_counts_as_one(api: FakeProvider, guard: Guard) -> None:
    automatic = _request(4, extra_body={"cache_control": FIVE})
    with pytest.raises(RequestValidationError, match=r"5 cache_control breakpoints"):
        guard.chat(request=automatic)
    assert guard.chat(request=_request(4)).text  # (four are Claude's limit: sent)
    assert api.stats.requests == 1


def test_a_prompt_s_anthropic_params_refuse_them_too() -> None:
    """The builder's own breakpoints are never counted against the caller: they yield."""
    builder = PromptBuilder("limit", instructions=STATIC, drift=None, min_cache_tokens=None)
    with pytest.raises(RequestValidationError, match=r"5 cache_control breakpoints"):
        builder.build(_marked(5)).anthropic_params()
    params = builder.build(_marked(4)).anthropic_params()
    assert "cache_control" not in params["system"][-1]  # (no room left for the static part)
    with pytest.raises(RequestValidationError):
        anthropic_params(_request(5))
