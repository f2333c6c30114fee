"""The strict guards of the zero-configuration default: short requests that differ in a
content word, in word order or in the kind of question are different requests."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cache.guards import guard_rejection, strict_rejection
from llmguard_sdk.models import ChatRequest, ChatResponse, Message


@pytest.mark.parametrize(
    ("query", "cached", "reason"),
    [
        ("How do I learn Python fast?", "How do I learn Python?", "term"),
        ("How do I cancel my subscription?", "How do I cancel my order?", "term"),
        (
            "How do I convert Fahrenheit to Celsius?",
            "How do I convert Celsius to Fahrenheit?",
            "order",
        ),
        ("When is the sky blue?", "Why is the sky blue?", "question_kind"),
        ("Can I learn Python in a month?", "How can I learn Python in a month?", "question_kind"),
        (
            "How much does the premium plan cost?",
            "How does the premium plan cost?",
            "question_kind",
        ),
        ("What does HTTPS stand for?", "What does HTTP stand for?", "term"),
        ("What is the most popular language?", "What is the popular language?", "term"),
        ("Write a short poem about cats.", "Write a poem about cats.", "term"),
    ],
)
def test_strict_guards_refuse_other_requests(query: str, cached: str, reason: str) -> None:
    assert strict_rejection(query, cached) == reason
    assert guard_rejection(query, cached, strict=True) is not None


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("How can I reset my password?", "How do I reset my password?"),
        ("What's the capital of France?", "What is the capital of France?"),
        ("How can I improve my English?", "What can I do to improve my English?"),
        ("Explain how photosynthesis works.", "Can you explain how photosynthesis works?"),
        # statements and long texts are left to the standard guards
        ("The function iterates over file paths.", "The function cycles through file paths."),
    ],
)
def test_strict_guards_accept_rewordings(query: str, cached: str) -> None:
    assert strict_rejection(query, cached) is None


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)])


def test_the_default_cache_is_strict() -> None:
    cache = ResponseCache()
    assert cache.strict
    cache.store(
        _ask("How do I learn Python?"), ChatResponse(text="Practice.", finish_reason="stop")
    )
    assert cache.lookup(_ask("How do I learn Python fast?")) is None
    assert cache.stats.guard_rejections == {"term": 1}
    hit = cache.lookup(_ask("How can I learn Python?"))
    assert hit is not None
    assert hit.kind == "semantic"
    assert ResponseCache(verifier=lambda query, cached: True).strict  # a yes/no verifier
    assert not ResponseCache(verifier=lambda query, cached: True, strict=False).strict
