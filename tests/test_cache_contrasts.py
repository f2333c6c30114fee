"""Substitutions that ask the opposite or a sibling thing (``cache/_contrasts.py``) and
instructions whose words swap places: refused though the vectors put them close."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import ParaphraseVerifier, ResponseCache
from llmguard_sdk.cache._contrasts import contrasting
from llmguard_sdk.cache.guards import strict_rejection, term_of
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

from .conftest import require_minilm


def _terms(first: str, second: str) -> tuple[str, str]:
    a, b = term_of(first), term_of(second)
    assert a is not None
    assert b is not None
    return a, b


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("unsafe", "safe"),  # a negating prefix
        ("illegal", "legal"),
        ("disagree", "agree"),
        ("nonprofit", "profit"),
        ("uninstalled", "installing"),
        ("include", "exclude"),  # opposing prefixes
        ("imports", "exports"),
        ("upload", "download"),
        ("encrypt", "decrypt"),
        ("weekdays", "weekends"),  # siblings
        ("download", "downgrade"),
        ("password", "passport"),
        ("before", "after"),  # prepositions of time, place, scope
        ("within", "after"),
        ("above", "below"),
        ("closed", "open"),  # listed opposites
        ("buy", "sell"),
        ("minimum", "maximum"),
        ("arrivals", "departures"),
    ],
)
def test_opposite_and_sibling_words_contrast(first: str, second: str) -> None:
    assert contrasting(*_terms(first, second))
    assert contrasting(*_terms(second, first))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("quickly", "fast"),
        ("signs", "symptoms"),
        ("reduce", "lower"),
        ("over", "above"),  # "over 18" / "above 18"
        ("under", "below"),
        ("until", "till"),
        ("colour", "color"),  # spellings are no siblings: endings of fewer than 3 letters
        ("organise", "organize"),
        ("theatre", "theater"),
        ("kids", "children"),
        ("paperwork", "documents"),
        ("install", "install"),
    ],
)
def test_synonyms_and_spellings_do_not(first: str, second: str) -> None:
    assert not contrasting(*_terms(first, second))


SWAPPED = [
    ("Move 3 files from the inbox to the archive", "Move 3 files from the archive to the inbox"),
    ("Send 20 dollars from Alice to Bob", "Send 20 dollars from Bob to Alice"),
    (
        "Translate this sentence from German to English",
        "Translate this sentence from English to German",
    ),
]


@pytest.mark.parametrize(("query", "cached"), SWAPPED)
def test_instructions_with_their_words_swapped_are_refused_as_order(
    query: str, cached: str
) -> None:
    assert strict_rejection(query, cached) == "order"
    assert strict_rejection(query, query) is None


def test_statements_keep_their_own_order_rule_only() -> None:
    # the same words in the same order, an "and" list either way round: not refused
    assert (
        strict_rejection("Ship the red and blue mugs today", "Ship the blue and red mugs today")
        is None
    )
    # a rewording that moves words about with words of its own is no swap
    assert (
        strict_rejection(
            "The default value of the timeout is 30 seconds",
            "The timeout has 30 seconds as its default value",
        )
        is None
    )
    # without a word that gives the words a direction (from, to, than ...), phrases move freely
    assert (
        strict_rejection(
            "Two kids are playing chess in the park", "Two kids are in the park playing chess"
        )
        is None
    )
    # a word on one side only is left to the standard guards for statements, as before
    assert strict_rejection("Ship the mugs today", "Ship the mugs") is None


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)])


def test_the_default_cache_does_not_serve_a_swapped_instruction() -> None:
    cache = ResponseCache()
    query, cached = SWAPPED[0]
    cache.store(_ask(cached), ChatResponse(text="Moved.", finish_reason="stop"))
    assert cache.lookup(_ask(query)) is None
    assert cache.stats.guard_rejections == {"order": 1}
    assert cache.lookup(_ask(cached)) is not None  # the exact text still hits


@pytest.fixture(scope="module")
def verifier() -> ParaphraseVerifier:
    require_minilm()
    return ParaphraseVerifier.minilm()


OPPOSITES = [
    ("Is the pool closed on Mondays?", "Is the pool open on Mondays?"),
    ("Is it illegal to park here overnight?", "Is it legal to park here overnight?"),
    ("Is this cream unsuitable for babies?", "Is this cream suitable for babies?"),
    ("Can I get a refund after the trip?", "Can I get a refund before the trip?"),
    ("Does the gym open earlier on weekends?", "Does the gym open earlier on weekdays?"),
    ("How do I downgrade my plan?", "How do I upgrade my plan?"),
    (
        "How do I exclude hidden files from the search?",
        "How do I include hidden files in the search?",
    ),
]


@pytest.mark.parametrize(("query", "cached"), OPPOSITES)
def test_the_verifier_refuses_opposites(
    verifier: ParaphraseVerifier, query: str, cached: str
) -> None:
    assert verifier.score([(query, cached)]) == [0.0]


@pytest.mark.parametrize(("query", "cached"), SWAPPED)
def test_the_verifier_refuses_swapped_instructions(
    verifier: ParaphraseVerifier, query: str, cached: str
) -> None:
    assert verifier.score([(query, cached), (query, query)]) == [0.0, 1.0]


def test_the_verifier_still_accepts_synonyms(verifier: ParaphraseVerifier) -> None:
    scores = verifier.score(
        [
            ("How can I learn Python quickly?", "How can I learn Python fast?"),
            ("What are the signs of diabetes?", "What are the symptoms of diabetes?"),
        ]
    )
    assert all(score >= verifier.threshold for score in scores), scores
