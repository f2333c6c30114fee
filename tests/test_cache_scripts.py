"""The default cache on text beyond ASCII: the hashing embedder reads words in every script,
so two questions that share only their Latin letters and digits are not one question."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import HashingEmbedder, ResponseCache
from tests.test_cache import answer, ask

DIFFERENT = [
    ("Как сбросить пароль на iPhone 12?", "Как купить iPhone 12?"),  # reset password / buy
    ("如何重置我的iPhone 12密码\uff1f", "在哪里购买iPhone 12\uff1f"),  # the same, in Chinese
    ("Как отменить мой заказ?", "Как отменить мою подписку?"),  # cancel order / subscription
]


@pytest.mark.parametrize(("stored", "asked"), DIFFERENT)
def test_questions_that_share_only_their_ascii_are_no_match(stored: str, asked: str) -> None:
    """The embedder read ``[a-z0-9]`` only: "How do I reset the password on my iPhone 12?"
    in Russian or Chinese embedded as "iphone 12" alone, and "Where do I buy an iPhone 12?"
    was served its answer at similarity 1.0."""
    cache = ResponseCache()
    assert cache.store(ask(stored), answer("Settings > Face ID & Passcode."))
    assert cache.lookup(ask(asked)) is None
    first, second = HashingEmbedder().embed([stored, asked])
    assert float(first @ second) < 0.6


def test_a_paraphrase_in_another_script_is_still_served() -> None:
    cache = ResponseCache()
    assert cache.store(ask("Как сбросить пароль на iPhone 12?"), answer("Настройки."))
    hit = cache.lookup(ask("Как мне сбросить пароль на iPhone 12?"))  # "how do I" / "how"
    assert hit is not None
    assert hit.kind == "semantic"


def test_the_embedders_name_says_its_vectors_changed() -> None:
    """Only text beyond ASCII embeds otherwise (test_cache pins ASCII vectors' bits), but
    the name moves on (v2: every script's words; v3: Chinese and Japanese as character
    bigrams): no process mixes two versions' vectors in one partition."""
    assert HashingEmbedder().name.startswith("hashing-v3-")


# Chinese and Japanese run without spaces: the embedder read a whole clause as one word, so
# two questions one character apart shared nothing but a few character n-grams (similarity
# 0.1 to 0.2), and no paraphrase was ever served.
NEAR = [
    ("如何重置我的密码", "如何重置我的密码呢"),  # how do I reset my password (+ a particle)
    ("北京今天天气怎么样", "北京今天的天气怎么样"),  # the weather in Beijing today ("'s")
    ("パスワードを忘れました", "パスワードを忘れてしまいました"),  # I forgot my password
    ("注文をキャンセルしたい", "注文をキャンセルしたいです"),  # I want to cancel my order (polite)
]
FAR = [
    ("如何重置我的密码\uff1f", "如何取消我的订单\uff1f"),  # reset my password / cancel my order
    ("我想取消订单", "我想修改订单"),  # cancel / change my order
    ("北京今天天气", "上海今天天气"),  # Beijing / Shanghai
    ("パスワードをリセットする方法を教えてください", "注文をキャンセルする方法を教えてください"),
    ("Pythonをインストールする方法", "Pythonをアンインストールする方法"),  # install / uninstall
    ("東京の天気を教えて", "大阪の天気を教えて"),  # Tokyo / Osaka
]


@pytest.mark.parametrize(("stored", "asked"), NEAR)
def test_chinese_and_japanese_near_duplicates_are_close_and_served(stored: str, asked: str) -> None:
    first, second = HashingEmbedder().embed([stored, asked])
    assert float(first @ second) > 0.8
    cache = ResponseCache()
    assert cache.store(ask(stored), answer("A."))
    hit = cache.lookup(ask(asked))
    assert hit is not None
    assert hit.kind == "semantic"


@pytest.mark.parametrize(("stored", "asked"), FAR)
def test_chinese_and_japanese_questions_one_word_apart_are_no_match(
    stored: str, asked: str
) -> None:
    """Each differs in a word or two of a few characters: below the threshold, or refused
    by the guards (which count a Han character as 0.4 of a word, a kana 0.2)."""
    cache = ResponseCache()
    assert cache.store(ask(stored), answer("A."))
    assert cache.lookup(ask(asked)) is None
    first, second = HashingEmbedder().embed([stored, asked])
    assert float(first @ second) < 0.8


def test_a_run_of_han_reads_as_its_bigrams_and_latin_inside_it_as_a_word() -> None:
    embedder = HashingEmbedder()
    (mixed,) = embedder.embed(["如何安装python"])
    (spaced,) = embedder.embed(["如何安装 python"])
    assert (mixed == spaced).all()  # "python" is a word of its own, with or without a space
    (one,) = embedder.embed(["东京"])
    (other,) = embedder.embed(["京东"])
    assert float(one @ other) < 0.1  # a bigram is read in its order
