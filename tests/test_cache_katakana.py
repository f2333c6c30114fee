"""Katakana loanwords in Japanese: a run of katakana is one word to the hashing embedder
(not merged with the kanji beside it), a word-final prolonged sound mark "ー" is a spelling
variant (JIS Z 8301 drops it from words of three kana or more: "コンピューター" /
"コンピュータ", "サーバー" / "サーバ"; "カバー" a cover and "カバ" a hippo stay apart), and a
katakana word is a name to the entity guard, as a capitalised English word is: "ロンドンの
天気は？" (London's weather) and "パリの天気は？" (Paris's) name different places, refused
("entity") with a verifier too, at any length, as "weather in London" / "weather in Paris"
are; two loanwords for one thing ("パソコン" / "コンピューター") are two words (a miss, never a
wrong answer)."""

# ruff: noqa: RUF001, RUF002 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache import DEFAULT_THRESHOLD, HashingEmbedder
from llmguard_sdk.cache._japanese import standard_katakana
from llmguard_sdk.cache.guards import content_words, guard_rejection
from tests.test_cache import looked_up

# (a request, the same with a loanword's final "ー" dropped)
SAME = [
    ("コンピューターの使い方を教えて", "コンピュータの使い方を教えて"),
    ("サーバーを再起動する方法は？", "サーバを再起動する方法は？"),
    ("メモリーを増やす方法は？", "メモリを増やす方法は？"),
    ("ユーザーを削除するには？", "ユーザを削除するには？"),
]
# (a request, the same naming another place, product or thing in katakana)
DIFFERENT = [
    ("ロンドンの天気は？", "パリの天気は？"),  # London / Paris
    ("ロンドンの天気を教えてください", "パリの天気を教えてください"),
    ("パソコンの使い方を教えて", "コンピューターの使い方を教えて"),  # two words for a PC
    ("カバーの値段は？", "カバの値段は？"),  # a cover / a hippo (two kana: "ー" kept)
    (
        "ロンドンで一番おいしいレストランとおすすめの観光地と交通手段を詳しく教えてください",
        "パリで一番おいしいレストランとおすすめの観光地と交通手段を詳しく教えてください",
    ),  # (too long for the key-term and strict guards: the entity guard alone)
]


@pytest.mark.parametrize(("query", "cached"), SAME)
def test_a_loanword_with_or_without_its_final_long_vowel_mark_is_one_word(
    query: str, cached: str
) -> None:
    first, second = HashingEmbedder().embed([query, cached])
    assert float(first @ second) == pytest.approx(1.0)
    assert content_words(query) == content_words(cached)
    for one, other in ((query, cached), (cached, query)):
        assert guard_rejection(one, other, strict=True) is None
        assert guard_rejection(one, other, key_terms=False) is None
        hit = looked_up(other, one)
        assert hit is not None
        assert hit.kind == "semantic"


@pytest.mark.parametrize(("query", "cached"), DIFFERENT)
def test_different_loanwords_are_different_entities(query: str, cached: str) -> None:
    for one, other in ((query, cached), (cached, query)):
        assert guard_rejection(one, other, key_terms=False) == "entity"  # (a verifier's)
        assert guard_rejection(one, other, strict=True) == "entity"
        assert looked_up(other, one) is None


def test_the_same_loanword_on_both_sides_is_no_entity_difference() -> None:
    """A loanword on one side only (キャンセル / 取り消し: cancel) is left to the other
    guards, as an English name on one side only is (here the key-term guard, which judges a
    swapped Chinese or Japanese word with a verifier too: MiniLM cannot)."""
    for query, cached, reason in (
        ("パスワードをリセットする方法を教えてください", "パスワードのリセット方法を教えて", None),
        ("注文をキャンセルできますか？", "注文を取り消しできますか？", "key_term"),
    ):
        assert guard_rejection(query, cached, key_terms=False) == reason


def test_a_katakana_run_is_one_word_beside_kanji_and_particles() -> None:
    """A katakana word is read whole, parted from the kanji that follow it: "ロンドン天気" is
    "ロンドン" + "天気" as "ロンドン 天気" is, and two place names are far apart."""
    embedder = HashingEmbedder()
    joined, spaced, particled = embedder.embed(["ロンドン天気", "ロンドン 天気", "ロンドンの天気"])
    assert float(joined @ spaced) == pytest.approx(1.0)
    assert float(joined @ particled) > 0.95
    london, paris = embedder.embed(["ロンドンの天気は？", "パリの天気は？"])
    assert float(london @ paris) < DEFAULT_THRESHOLD


def test_the_final_long_vowel_mark_is_dropped_from_words_of_three_kana_or_more() -> None:
    assert standard_katakana("コンピューター") == "コンピュータ"
    assert standard_katakana("サーバーとユーザー") == "サーバとユーザ"
    assert standard_katakana("カバー・カー・キー") == "カバー・カー・キー"  # (two kana or fewer)
    assert standard_katakana("コーヒーを飲む") == "コーヒを飲む"
    assert standard_katakana("すごーい") == "すごーい"  # (in hiragana: not a loanword)
    assert standard_katakana("ｺﾝﾋﾟｭｰﾀｰ") == "ｺﾝﾋﾟｭｰﾀｰ"  # (half-width: NFKC first)
    text = "How do I reset my password?"
    assert standard_katakana(text) is text
