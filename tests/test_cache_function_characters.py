"""Chinese function characters are no content words for the false-hit guards, as English
function words ("my", "the", "do") are not: the guards read every Han character as a
content word, so "如何重置我的密码？" and "如何重置我的密码呢？" (how do I reset my password,
with a sentence-final particle) were two requests ("term"), refused at a similarity the
cache serves. The list is short on purpose (a wrong answer is worse than a miss): characters
that are also common content characters stay content words ("吧" of "酒吧" a bar, "过" of
"你去过北京吗" have you been to Beijing, "地" of "地图" a map), and so do the pronouns ("你叫
什么名字" / "我叫什么名字": your name / my name)."""

# ruff: noqa: RUF001, RUF002 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cache._words import minor
from llmguard_sdk.cache.guards import content_words, guard_rejection, strict_agreement, term_of
from tests.test_cache import answer, ask

# (a request, the same with a function character more, less or swapped)
SAME = [
    ("如何重置我的密码？", "如何重置我的密码呢？"),  # how do I reset my password (+ 呢)
    ("北京今天天气怎么样？", "北京今天的天气怎么样？"),  # today's weather in Beijing (+ 的)
    ("怎么修改密码？", "怎么修改密码啊？"),  # how do I change the password (+ 啊)
    ("可以退款吗？", "可以退款嗎？"),  # can I get a refund (simplified / traditional 吗)
    ("我的订单怎么还没发货？", "我的订单怎么还没发货呢？"),  # why hasn't my order shipped
    ("怎么又出错？", "怎么又出错了？"),  # why is there an error again (+ 了)
]
# (a request, the same with a content character swapped, added or removed)
DIFFERENT = [
    ("如何取消我的订单呢？", "如何取消我的订阅？"),  # cancel my order / subscription
    ("如何取消订单？", "如何修改订单呢？"),  # cancel / change the order
    ("附近有酒吧吗？", "附近有酒吗？"),  # is there a bar / alcohol nearby
    ("你去过北京吗？", "你去北京吗？"),  # have you been / are you going to Beijing
    ("如何下载地图？", "如何下载图？"),  # download a map / a picture
    ("你叫什么名字？", "我叫什么名字？"),  # what is your / my name
    ("如何重置密码？", "如何重置我的密码？"),  # (a pronoun is a content word: as above)
]


@pytest.mark.parametrize(("query", "cached"), SAME)
def test_requests_differing_in_function_characters_only_are_the_same(
    query: str, cached: str
) -> None:
    assert guard_rejection(query, cached, strict=True) is None
    assert guard_rejection(cached, query, strict=True) is None
    assert guard_rejection(query, cached) is None
    assert strict_agreement(query, cached)


@pytest.mark.parametrize(("query", "cached"), DIFFERENT)
def test_requests_differing_in_a_content_character_are_still_refused(
    query: str, cached: str
) -> None:
    assert guard_rejection(query, cached, strict=True) in ("key_term", "term")
    assert guard_rejection(cached, query, strict=True) in ("key_term", "term")
    assert not strict_agreement(query, cached)


def test_the_default_cache_serves_a_question_with_a_particle_more() -> None:
    cache = ResponseCache()  # (strict guards, no verifier)
    assert cache.store(ask("如何重置我的密码？"), answer("设置 > 账户 > 重置密码。"))
    hit = cache.lookup(ask("如何重置我的密码呢？"))
    assert hit is not None
    assert hit.kind == "semantic"
    assert cache.lookup(ask("如何取消我的订阅呢？")) is None


def test_function_characters_are_listed_han_characters_only() -> None:
    assert [c for c in "的了吗嗎呢啊呀嘛哦啦" if not minor(c)] == []
    assert [c for c in "吧过着地得是和我你他订单密码" if minor(c)] == []
    assert term_of("呢") is None
    assert term_of("订") == "订"
    assert content_words("我的订单呢") == {"我", "订", "单"}
    # ASCII words are the English lists' alone; a kana is still a word of its own
    assert [w for w in ("le", "ma", "の") if minor(w)] == []
