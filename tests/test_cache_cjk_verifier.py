"""Chinese and Japanese with a verifier (the recommended configuration): MiniLM is an English
model, which reads most Han characters as one unknown token, so it cannot judge a swapped
Chinese or Japanese word ("订单" order / "订阅" subscription scored 1.0). A swapped word in
a script written without spaces (Han, kana) is judged by the key-term guard with a verifier
too, and the verifier scores it 0. Japanese "…方法" (how to ...) and "…を教えて" (tell me
..., its framing, as English "tell me") and Chinese 如何 / 怎么 (how) and "…呢" (what about
...) are requests without a question mark. A katakana word that extends another
("アンインストール" uninstall / "インストール" install) is another name to the entity guard,
unless the rest is a word the other text names too ("パスワードリセット" / "パスワード" +
"リセット"). Each pair refused here was served by the recommended configuration (and some
by the default too)."""

# ruff: noqa: RUF001 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache import HybridEmbedder, ParaphraseVerifier, ResponseCache
from llmguard_sdk.cache._cjk import asks
from llmguard_sdk.cache.embedders.bert import BertEmbedder
from llmguard_sdk.cache.guards import guard_rejection
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

from .conftest import require_minilm
from .test_cache import looked_up

# (a request, another request or statement: a word swapped, added or extended)
SWAPPED = [
    ("如何取消我的订单？", "如何取消我的订阅？"),  # cancel my order / my subscription
    ("如何修改密码", "如何修改订单"),  # change my password / my order
    ("如何重置我的密码", "我想取消我的订单"),  # reset my password / I want to cancel my order
    ("我已经取消了订单", "我想取消订单"),  # I have cancelled / I want to cancel my order
    ("注文をキャンセルしたい", "予約をキャンセルしたい"),  # cancel my order / my booking
    ("東京の天気を教えて", "大阪の天気を教えて"),  # the weather in Tokyo / in Osaka
]
ADDED = [
    ("今天天气怎么样", "上海今天天气怎么样"),  # how is the weather (in Shanghai) today
    ("我的订单呢", "我想取消我的订单"),  # what about my order / I want to cancel it
    ("Pythonをアンインストールする方法", "Pythonをインストールする方法"),  # uninstall / install
    ("メールアドレスを変更する方法", "アドレスを変更する方法"),  # email address / address
]
# (a request, the same request reworded)
SAME = [
    ("如何取消我的订单？", "如何取消我的订单"),  # (with or without its question mark)
    ("怎么重置密码", "怎么重置密码？"),
    ("Pythonをインストールする方法", "Pythonのインストール方法"),
    ("Pythonをインストールする方法", "Pythonをインストールする方法を教えて"),
    ("コンピューターの使い方を教えて", "コンピュータの使い方を教えてください"),
    ("東京の人口は？", "東京の人口を教えて"),  # Tokyo's population? / tell me it
]


@pytest.fixture(scope="module")
def hybrid() -> HybridEmbedder:
    require_minilm()
    return HybridEmbedder.minilm()


@pytest.fixture(scope="module")
def encoder(hybrid: HybridEmbedder) -> BertEmbedder:
    found = hybrid.parts[0][0]  # (one model in memory)
    assert isinstance(found, BertEmbedder)
    return found


def _recommended(hybrid: HybridEmbedder, encoder: BertEmbedder) -> ResponseCache:
    return ResponseCache(embedder=hybrid, verifier=ParaphraseVerifier(encoder))


def _served(cache: ResponseCache, stored: str, asked: str) -> bool:
    cache.store(
        ChatRequest(messages=[Message(role="user", content=stored)]),
        ChatResponse(text="A.", finish_reason="stop"),
    )
    return cache.lookup(ChatRequest(messages=[Message(role="user", content=asked)])) is not None


@pytest.mark.parametrize(("query", "cached"), SWAPPED)
def test_a_swapped_chinese_or_japanese_word_is_the_key_term_guards_with_a_verifier_too(
    query: str, cached: str
) -> None:
    for one, other in ((query, cached), (cached, query)):
        assert guard_rejection(one, other, key_terms=False) == "key_term"  # (a verifier's)
        assert guard_rejection(one, other) == "key_term"


@pytest.mark.parametrize(("query", "cached"), SWAPPED + ADDED)
def test_the_default_and_the_recommended_configuration_refuse_them(
    query: str, cached: str, hybrid: HybridEmbedder, encoder: BertEmbedder
) -> None:
    for one, other in ((query, cached), (cached, query)):
        assert looked_up(other, one) is None
        assert not _served(_recommended(hybrid, encoder), other, one)


@pytest.mark.parametrize(("query", "cached"), SAME)
def test_chinese_and_japanese_paraphrases_are_still_served(
    query: str, cached: str, hybrid: HybridEmbedder, encoder: BertEmbedder
) -> None:
    for one, other in ((query, cached), (cached, query)):
        assert looked_up(other, one) is not None
        assert _served(_recommended(hybrid, encoder), other, one)


def test_a_katakana_compound_of_the_other_texts_words_is_served_by_the_verifier(
    hybrid: HybridEmbedder, encoder: BertEmbedder
) -> None:
    """The compound "パスワードリセット" (password reset) is "パスワード" + "リセット", both
    named by the other text: no entity difference ("アンインストール" extends "インストール"
    by "アン", which the other text does not name)."""
    query, cached = "パスワードリセットの方法", "パスワードをリセットする方法"
    for one, other in ((query, cached), (cached, query)):
        assert guard_rejection(one, other, key_terms=False) is None
        assert _served(_recommended(hybrid, encoder), other, one)
    for one, other in ADDED[2:]:
        assert guard_rejection(one, other, key_terms=False) == "entity"
        assert guard_rejection(other, one, key_terms=False) == "entity"


def test_the_verifier_scores_a_swapped_chinese_word_zero(encoder: BertEmbedder) -> None:
    """Past the key-term guard's 6 words (a Han character is 0.4 of one), the verifier alone
    judges a request: MiniLM reads "单" and "阅" as one unknown token."""
    verifier = ParaphraseVerifier(encoder)
    query = "如何在我的苹果手机上取消我的会员订单？"
    cached = "如何在我的苹果手机上取消我的会员订阅？"
    assert guard_rejection(query, cached, key_terms=False) is None
    assert verifier.score([(query, cached), (cached, query)]) == [0.0, 0.0]
    # English is judged as before
    assert verifier("How can I learn Python quickly?", "How can I learn Python fast?")


def test_how_to_phrases_are_requests_without_a_question_mark() -> None:
    assert asks("Pythonをインストールする方法")
    assert asks("サーバーを再起動する方法は")
    assert asks("東京の天気を教えて")
    assert asks("如何取消我的订单")
    assert asks("今天天气怎么样")
    assert asks("怎麼重置密碼")
    assert asks("我的订单呢")  # (what about my order)
    assert not asks("注文をキャンセルしたい")  # (I want to ...: a statement, as in English)
    assert not asks("我想取消我的订单")
    assert not asks("方法論について")  # (方法 not at the end)
