"""ParaphraseVerifier: word substitutions judged by MiniLM's contextual word vectors."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import ParaphraseVerifier, ResponseCache
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

from .conftest import require_minilm


@pytest.fixture(scope="module")
def verifier() -> ParaphraseVerifier:
    require_minilm()
    return ParaphraseVerifier.minilm()


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)])


def test_synonyms_pass_and_other_requests_fail(verifier: ParaphraseVerifier) -> None:
    same = [
        ("How can I learn Python quickly?", "How can I learn Python fast?"),
        ("What are the signs of diabetes?", "What are the symptoms of diabetes?"),
        ("How can I reset my password?", "How do I reset my password?"),
        # question framings of one intent
        ("What is the best way to learn Python?", "How do I learn Python?"),
        ("What are some good ways to reduce stress?", "How can I lower my stress?"),
        ("Is it possible to learn French in six months?", "Can I learn French in six months?"),
        ("What is the meaning of API?", "What does API mean?"),
        ("What steps should I take to start a bakery?", "How do I start a bakery?"),
        ("What is the quickest way to learn Python?", "How can I learn Python fast?"),
        # decided: "the best X" and "a good X" ask for the same recommendation
        ("What is the best laptop for programming?", "What is a good laptop for programming?"),
        # plurals, "return the X", "the highest number of X" (see test_cache_strict)
        ("Which countries have a car maker?", "Which country has car makers?"),
        ("Return the number of airports.", "How many airports are there?"),
        ("Which airline has the highest number of flights?", "Which airline has the most flights?"),
        ("List the IDs of the cars.", "List the ID of each car."),
        ("What are some good books on economics?", "What are good books on economics?"),
        ("In 1980, how many cars were made?", "How many cars were produced in 1980?"),
        # one extreme named two ways; "fewer" / "less"; "three" / "3" (see test_cache_strict)
        ("Which stadium has the largest capacity?", "Which stadium has the highest capacity?"),
        ("Which airport has the fewest flights?", "Which airport has the least flights?"),
        ("Which codes have fewer than 3 templates?", "Which codes have less than three templates?"),
    ]
    traps = [  # a framing that hides a qualifier or another intent: 0
        ("Should I eat eggs every day?", "Can I eat eggs every day?"),
        ("How do I wake up early?", "Why do I wake up early?"),
        ("What is the best way to learn Python fast?", "How do I learn Python?"),
        ("What is the easiest way to learn Python?", "How do I learn Python?"),
        ("What is the best laptop for programming?", "What is a laptop for programming?"),
        ("What is the meaning of life?", "What is life?"),
        ("Is it possible to learn Python in a month?", "How do I learn Python in a month?"),
        ("Return my order.", "What is my order?"),
    ]
    different = [
        ("How do I cancel my subscription?", "How do I cancel my order?"),
        ("How do I learn Python fast?", "How do I learn Python?"),
        ("How do I convert Fahrenheit to Celsius?", "How do I convert Celsius to Fahrenheit?"),
        ("How do I teach Python?", "How do I learn Python?"),
        ("When is the sky blue?", "Why is the sky blue?"),
        ("Which airline has the most flights?", "Which airline has the fewest flights?"),
        ("What are the countries in Europe?", "What are the counties in Europe?"),
        ("Which stadium has the highest capacity?", "Which stadium has the lowest capacity?"),
        ("What is the maximum salary?", "What is the minimum salary?"),
        ("Who is the greatest basketball player?", "Who is the biggest basketball player?"),
    ]
    scores = verifier.score(same + different + traps)
    assert all(s >= verifier.threshold for s in scores[: len(same)]), scores
    assert all(s < verifier.threshold for s in scores[len(same) :]), scores
    assert scores[len(same) + 1] == 0.0  # a word added on one side
    assert scores[-len(traps) :] == [0.0] * len(traps), scores
    # "the fastest way to V" is "V fast": "fast" / "quickly" is judged as a substitution
    assert (
        verifier.score(
            [("What is the fastest way to lose weight?", "How can I lose weight quickly?")]
        )[0]
        > 0.5
    )
    assert verifier("How can I learn Python quickly?", "How can I learn Python fast?")
    # statements and long texts are left to the similarity and the standard guards
    assert verifier.score([("The sky is blue.", "The sea is green.")]) == [1.0]
    with pytest.raises(ConfigurationError):
        ParaphraseVerifier(verifier.encoder, threshold=1.5)


def test_the_cache_serves_what_the_verifier_accepts(verifier: ParaphraseVerifier) -> None:
    cache = ResponseCache(verifier=verifier, threshold=0.3)
    assert not cache.strict
    cache.store(
        _ask("How do I cancel my order?"), ChatResponse(text="Orders.", finish_reason="stop")
    )
    cache.store(
        _ask("What are the symptoms of diabetes?"),
        ChatResponse(text="Thirst.", finish_reason="stop"),
    )
    assert cache.lookup(_ask("How do I cancel my subscription?")) is None
    assert cache.stats.guard_rejections == {"verifier": 1}
    hit = cache.lookup(_ask("What are the signs of diabetes?"))
    assert hit is not None
    assert hit.response.text == "Thirst."


@pytest.mark.timeout(600)  # encodes every bundled pair with MiniLM: minutes on a busy machine
def test_target_precision_calibrates_the_verifier(verifier: ParaphraseVerifier) -> None:
    calibrated = ParaphraseVerifier(verifier.encoder, threshold=0.0)
    cache = ResponseCache(verifier=calibrated, threshold=0.45, target_precision=0.95)
    assert cache.threshold == 0.45  # the recall threshold stays
    assert 0.5 <= calibrated.threshold <= 0.95  # chosen on the bundled development set


def test_the_fastest_way_to_v_reads_as_v_fast_for_every_manner_word(
    verifier: ParaphraseVerifier,
) -> None:
    """The manner a superlative names is kept as the term the other text's word reads as
    ("easy" is the term "easi", as the strict guards stem it)."""
    from llmguard_sdk.cache.guards import term_of

    for superlative, plain in (("easiest", "easy"), ("fastest", "fast"), ("cheapest", "cheap")):
        words = verifier._words(f"What is the {superlative} way to learn Python?")
        assert term_of(plain) in words, (superlative, sorted(words))
