"""A Chinese yes/no question ends with the particle 吗 (嗎), with or without a question mark,
and the guards read it as a question, as English "is it ...?" or Japanese "...か": "今天下雨
吗" (is it raining today) and "今天下雨吗？" are one request, "今天下雨吗" and "今天下雨" (it is
raining today) a question and a statement, refused ("question_kind"); a question asked with
an interrogative (什么, 怎么, 哪 ...) is of another kind than a yes/no one. Without the question
mark neither side was a request, so the strict guards did not judge the pair and the default
cache served a question's answer to a statement; with a question mark both were of no kind
("other") and the pair was served too (and scored 1.0 by the verifier)."""

# ruff: noqa: RUF001, RUF002 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache._chinese import asks, question_kind
from llmguard_sdk.cache.guards import guard_rejection, request_terms, strict_agreement
from tests.test_cache import looked_up

# (a yes/no question, the same question with or without its question mark)
SAME = [
    ("你会说英语吗", "你会说英语吗？"),  # do you speak English
    ("今天下雨吗", "今天下雨吗？"),  # is it raining today
    ("可以退款吗", "可以退款嗎？"),  # can I get a refund (simplified / traditional 吗)
    ("今天下雨吗？", "今天下雨吗?"),  # (a full-width or an ASCII question mark)
    ("你会说英语吗", "你会说英语？"),  # (asked by the question mark alone)
]
# (a yes/no question, the same words as a statement)
STATEMENTS = [
    ("今天下雨吗", "今天下雨"),  # is it raining today / it is raining today
    ("今天下雨吗？", "今天下雨"),
    ("你会说英语吗", "你会说英语"),  # do you speak English / you speak English
    ("你会说英语吗", "你会说英语。"),
]
# (a yes/no question, a question asked with an interrogative)
OTHER_KINDS = [
    ("可以退款吗", "如何退款？"),  # can I get a refund / how do I get one
    ("你会说英语吗", "你会说什么语言？"),  # do you speak English / which languages
    ("今天下雨吗", "今天下雨怎么办"),  # is it raining today / what if it rains today
]


@pytest.mark.parametrize(("query", "cached"), SAME)
def test_a_yes_no_question_with_or_without_its_question_mark_is_served(
    query: str, cached: str
) -> None:
    for first, second in ((query, cached), (cached, query)):
        assert guard_rejection(first, second, strict=True) is None
        assert guard_rejection(first, second) is None
        assert strict_agreement(first, second)
        hit = looked_up(second, first)  # (the default cache: strict guards, no verifier)
        assert hit is not None
        assert hit.kind == "semantic"


@pytest.mark.parametrize(("query", "cached"), STATEMENTS + OTHER_KINDS)
def test_a_question_and_a_statement_or_another_kind_are_refused(query: str, cached: str) -> None:
    reasons = ("question_kind",) if (query, cached) in STATEMENTS else ("question_kind", "key_term")
    for first, second in ((query, cached), (cached, query)):
        assert guard_rejection(first, second, strict=True) in reasons
        assert request_terms(first, second) == ([], [])  # (the verifier scores it 0)
        assert not strict_agreement(first, second)
        assert looked_up(second, first) is None


def test_questions_a_content_word_apart_are_still_refused() -> None:
    for query, cached in (("你会说英语吗", "你会说法语吗"), ("今天下雨吗", "明天下雨吗？")):
        assert guard_rejection(query, cached, strict=True) in ("key_term", "term")
        assert looked_up(cached, query) is None


def test_kinds_of_chinese_questions() -> None:
    assert question_kind("今天下雨吗", "other") == "yes/no"
    assert question_kind("今天下雨吗？", "other") == "yes/no"
    assert question_kind("今天下雨？", "other") == "yes/no"
    assert question_kind("你想吃点什么吗？", "other") == "yes/no"  # (什么: something)
    assert question_kind("今天天气怎么样", "other") == "general"
    assert question_kind("你去哪里？", "other") == "general"
    assert question_kind("你在干吗", "other") == "general"  # (干吗: what ... doing)
    assert question_kind("我的订单呢？", "other") == "general"  # (what about my order)
    assert question_kind("今天下雨", "other") == "other"
    assert question_kind("几乎每天下雨", "other") == "other"  # (几乎: almost)
    # Japanese text and English kinds are left as they are
    assert question_kind("東京は寒いですか", "other") == "other"
    assert question_kind("今天下雨吗", "why") == "why"


def test_a_question_without_its_question_mark_is_a_request() -> None:
    assert asks("你会说英语吗")
    assert asks("可以退款嗎 。")
    assert not asks("你在干吗")  # (what are you doing: an interrogative, no particle)
    assert not asks("吗啡有什么副作用")  # (吗啡: morphine)
    assert not asks("今天下雨")
    assert not asks("東京は寒いですか")  # (Japanese: its own rules)


@pytest.mark.parametrize(
    ("query", "cached"),
    [("取消订单", "我可以取消订单吗"), ("附近有酒吗？", "附近有酒吧吗？")],
)
def test_the_standard_guards_alone_do_not_serve_a_question_for_another(
    query: str, cached: str
) -> None:
    """The hashing embedder reads 吗 as a character, in the bigram of the character before
    it: weighed as a Japanese particle, these pairs came over the threshold (0.68 and 0.84)
    and were served with the strict guards off (``strict=False``, no verifier)."""
    for one, other in ((query, cached), (cached, query)):
        assert looked_up(other, one, strict=False) is None
