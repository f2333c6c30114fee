"""Every bound on words in the false-hit guards counts Chinese and Japanese as the negation
scope does (:func:`llmguard_sdk.cache._words.word_count`: a Han character 0.4 of a word, a
kana 0.2). The key-term guard (short queries, up to 6 content words) and the strict guards
(requests of up to 12) counted each character as a word: a Chinese or Japanese request of
three or four English words' worth was already "too long" for them, so "cancel my order" /
"cancel my reservation" and "Celsius to Fahrenheit" / "Fahrenheit to Celsius" were refused
in English and served in Chinese and Japanese. English is counted as before."""

# ruff: noqa: RUF001 (full-width punctuation, on purpose)

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cache._words import word_count
from llmguard_sdk.cache.guards import content_words, guard_rejection, request_terms
from tests.test_cache import answer, ask

LANGUAGES = ("English", "Chinese", "Japanese")
# (a short request, the same with one content word swapped), in each language
SWAPPED = [
    ("I want to cancel my order", "I want to cancel my reservation"),
    ("我想取消我的订单", "我想取消我的预订"),
    ("注文をキャンセルしたい", "予約をキャンセルしたい"),
]
# (a request, the same words in another order): 17 distinct Han characters in Chinese
REORDERED = [
    (
        "How do I convert Celsius to Fahrenheit in the mobile app?",
        "How do I convert Fahrenheit to Celsius in the mobile app?",
    ),
    ("在手机应用上如何把摄氏温度转换成华氏温度？", "在手机应用上如何把华氏温度转换成摄氏温度？"),
    (
        "モバイルアプリで摂氏を華氏に変換するにはどうすればいいですか？",
        "モバイルアプリで華氏を摂氏に変換するにはどうすればいいですか？",
    ),
]


@pytest.mark.parametrize(("language", "pair"), list(zip(LANGUAGES, SWAPPED, strict=True)))
def test_a_key_term_swapped_in_a_short_request_is_refused_in_every_language(
    language: str, pair: tuple[str, str]
) -> None:
    text, swapped = pair
    assert guard_rejection(swapped, text) == "key_term"
    assert guard_rejection(text, swapped, strict=True) == "key_term"
    assert word_count(content_words(text) | content_words(swapped)) <= 6
    if language != "English":
        assert len(content_words(text) | content_words(swapped)) > 6  # (as characters)


@pytest.mark.parametrize(("language", "pair"), list(zip(LANGUAGES, REORDERED, strict=True)))
def test_the_strict_guards_judge_a_request_of_a_dozen_words_in_every_language(
    language: str, pair: tuple[str, str]
) -> None:
    text, reordered = pair
    assert guard_rejection(reordered, text, strict=True) == "order"
    assert guard_rejection(reordered, text) is None  # (the standard guards: word order aside)
    found = request_terms(reordered, text)
    assert found is not None
    assert word_count(set(found[0]) | set(found[1])) <= 12
    if language == "Chinese":
        assert len(set(found[0]) | set(found[1])) > 12  # (as characters)


@pytest.mark.parametrize("pair", SWAPPED[1:], ids=LANGUAGES[1:])
def test_a_cache_refuses_the_swapped_request_in_chinese_and_japanese(
    pair: tuple[str, str],
) -> None:
    text, swapped = pair
    cache = ResponseCache(threshold=-1.0, strict=False)  # (the guards alone decide)
    assert cache.store(ask(text), answer("yes"))
    assert cache.lookup(ask(swapped)) is None
    assert cache.stats.guard_rejections.get("key_term") == 1


class _InOrder(set[str]):
    """A set that gives its words in a chosen order (as another hash seed would)."""

    def __init__(self, order: list[str]) -> None:
        super().__init__(order)
        self.order = order

    def __iter__(self) -> Iterator[str]:
        return iter(self.order)


def test_a_count_does_not_depend_on_the_order_of_the_words() -> None:
    """The count summed 0.4s and 0.2s as floats in the order the set gave its words, which
    changes with each process's hash seed: four words and five Han characters were 6.0 words
    in one order and 6.000000000000002 in another (past the key-term guard's 6)."""
    words = ["renew", "driver", "licens", "way", "上", "海", "今", "天", "气"]
    orders = [words, words[4:] + words[:4], words[4:7] + words[:4] + words[7:]]
    assert {word_count(_InOrder(order)) for order in orders} == {6.0}
    assert word_count(_InOrder([*words, "カ", "ナ"])) == 6.4


@pytest.mark.slow
def test_two_processes_decide_a_pair_alike() -> None:
    """The same pair, refused ("key_term") or served by the guards as the process's hash
    seed had it: two processes sharing one cache decided it differently."""
    code = (
        "from llmguard_sdk.cache.guards import guard_rejection;"
        "print(guard_rejection('上海今天天气', \"What is the way to renew my driver's license?\"))"
    )
    found = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        found.add(done.stdout.strip())
    assert found == {"key_term"}
