"""Japanese particles and auxiliaries are no content words for the false-hit guards, and
weigh little in the hashing embedder, as English function words ("the", "of", "is") and
the Chinese particles (吗, 的, 了) do: the guards read every kana as a content word, so
"東京の人口は？" and "東京の人口は何人ですか？" (what is Tokyo's population), or "天気を教えて"
and "天気を教えてください" (tell me the weather, "please"), were two requests to the strict
guards ("term") and refused; and a particle weighed in the embedder as a content character,
so "東京の人口は何人ですか？" and "大阪の人口は何人ですか？" (Osaka) were similar beyond the
threshold on their shared particles, left to the guards alone. Questions one content word
apart (東京 / 大阪, 人口 / 面積), another kind of question (what / whether) and a negation
are still refused."""

# ruff: noqa: RUF001, RUF002 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmguard_sdk.cache import DEFAULT_THRESHOLD, HashingEmbedder, ResponseCache
from llmguard_sdk.cache._japanese import function_spans, unparticled
from llmguard_sdk.cache._words import WORD
from llmguard_sdk.cache.guards import content_words, guard_rejection, strict_agreement
from tests.test_cache import answer, ask

# (a request, the same in other particles, endings or politeness)
SAME = [
    ("東京の人口は？", "東京の人口は何人ですか？"),  # Tokyo's population? / how many people is it
    ("東京の人口は？", "東京の人口はなんですか？"),  # ... / what is it
    ("東京の天気を教えて", "東京の天気を教えてください"),  # tell me the weather (+ please)
    ("注文をキャンセルできますか？", "ご注文をキャンセルできますか？"),  # (+ honorific ご)
    ("東京は寒いですか？", "東京は寒い？"),  # is it cold in Tokyo (polite / plain)
    ("空はなぜ青いのですか？", "空はなぜ青いですか？"),  # why is the sky blue (+ explanatory の)
    ("東京の人口は何人ですか", "東京の人口は何人か"),  # (a question without a question mark)
    ("パスワードをリセットする方法を教えてください", "パスワードのリセット方法を教えて"),
]
# (a request, the same with a content word swapped, or another kind of question)
DIFFERENT = [
    ("東京の人口は何人ですか？", "大阪の人口は何人ですか？"),  # Tokyo / Osaka
    ("東京の人口は？", "東京の面積は？"),  # population / area
    ("東京の人口を教えて", "東京の面積を教えてください"),  # (a particle more, too)
    ("何を食べますか？", "食べますか？"),  # what do you eat / do you eat
    ("何か食べますか？", "何を食べますか？"),  # do you eat something / what do you eat
    ("どこか行きますか？", "どこに行きますか？"),  # are you going somewhere / where
    ("なぜ空は青いのですか？", "空は青いのですか？"),  # why is the sky blue / is it blue
    ("東京ですか？", "東京は？"),  # is it Tokyo / what about Tokyo
    ("まだ東京にいますか？", "また東京にいますか？"),  # still / again (not "ま" + past "た")
    ("あなたの名前は何ですか？", "わたしの名前は何ですか？"),  # your / my name
    ("東京だけですか？", "東京ですか？"),  # only Tokyo / Tokyo
]
# English inside Japanese: product names and code as they are written
MIXED_SAME = [
    (
        "WindowsでPythonをインストールする方法は？",
        "WindowsにPythonをインストールする方法は何ですか？",
    ),
    ("Dockerのインストール方法を教えて", "Dockerのインストール方法を教えてください"),
]
MIXED_DIFFERENT = [
    ("WindowsでPythonをインストールする方法は？", "MacでPythonをインストールする方法は？"),
    ("PythonでCSVファイルを読む方法は？", "PythonでCSVファイルを書く方法は？"),  # read / write
]


@pytest.mark.parametrize(("query", "cached"), SAME + MIXED_SAME)
def test_requests_differing_in_particles_only_are_the_same(query: str, cached: str) -> None:
    for first, second in ((query, cached), (cached, query)):
        assert guard_rejection(first, second, strict=True) is None
        assert guard_rejection(first, second) is None
    assert strict_agreement(query, cached)
    first, second = HashingEmbedder().embed([query, cached])
    assert float(first @ second) > 0.8
    cache = ResponseCache()  # (the default: strict guards, no verifier)
    assert cache.store(ask(cached), answer("A."))
    hit = cache.lookup(ask(query))
    assert hit is not None
    assert hit.kind == "semantic"


@pytest.mark.parametrize(("query", "cached"), DIFFERENT + MIXED_DIFFERENT)
def test_requests_differing_in_a_content_word_or_kind_are_still_refused(
    query: str, cached: str
) -> None:
    for first, second in ((query, cached), (cached, query)):
        found = guard_rejection(first, second, strict=True)
        assert found in ("key_term", "term", "question_kind", "entity"), found
    assert not strict_agreement(query, cached)
    cache = ResponseCache()
    assert cache.store(ask(cached), answer("A."))
    assert cache.lookup(ask(query)) is None


@pytest.mark.parametrize(
    ("query", "cached"),
    [DIFFERENT[0], DIFFERENT[1], MIXED_DIFFERENT[1], ("東京の天気を教えて", "大阪の天気を教えて")],
)
def test_questions_a_content_word_apart_are_below_the_threshold(query: str, cached: str) -> None:
    """Their shared particles lifted them over it (0.74 for 東京 / 大阪): the guards alone
    refused them."""
    first, second = HashingEmbedder().embed([query, cached])
    assert float(first @ second) < DEFAULT_THRESHOLD


def test_a_negated_question_is_still_refused() -> None:
    query, negation = "東京は寒いですか？", "東京は寒くないですか？"
    for strict in (False, True):
        assert guard_rejection(negation, query, strict=strict) == "negation"


def test_grammar_words_are_read_and_content_words_kept() -> None:
    def spans(text: str) -> list[str]:
        return [text[start:end] for start, end in function_spans(text)]

    assert spans("東京の人口は何人ですか？") == ["の", "は", "何", "です", "か"]
    assert spans("寒いのでしょうか") == ["の", "でしょう", "か"]  # (not "ので" + "しょう")
    assert spans("ご注文をキャンセルしたいです") == ["ご", "を", "した", "です"]
    # interrogatives, negation and wishes are content ("たい" keeps its "い")
    assert spans("いつどこでなぜ") == ["で"]
    assert spans("できませんか") == ["で", "か"]
    # "何" is a content word but as a question's predicate; "か" but at a sentence's end
    assert spans("何を食べますか。") == ["を", "ます", "か"]
    assert spans("何か食べますか") == ["ます", "か"]
    assert content_words("東京の人口は何人ですか？") == {"東", "京", "人", "口"}
    assert content_words("どこに行きますか？") == {"ど", "こ", "行", "き"}


def test_text_without_hiragana_reads_as_before() -> None:
    """Chinese, English and katakana-only text have no Japanese particles: the guards and
    the embedder read them as before (the embedder keeps its name, hashing-v3)."""
    for text in ("如何重置我的密码？", "How do I reset my password?", "パスワードリセット"):
        assert function_spans(text) == ()
        assert unparticled(text) is text
    assert content_words("我的订单呢") == {"我", "订", "单"}
    assert HashingEmbedder().name.startswith("hashing-v3-")


@given(
    st.text(
        alphabet="はがをにでとのもかねよだたてすまくださいんなに何人東京おご注文キャンセルab ？。",
        max_size=40,
    )
)
def test_content_words_joined_by_spaces_read_as_content_words_again(text: str) -> None:
    """The strict guards join a request's words with spaces and read them again: what was
    content stays content (a one-character particle is always read as one, and the
    particles read only after a word or before a kanji are never so in a spaced text)."""
    words = WORD.findall(unparticled(text))
    assert function_spans(" ".join(words)) == ()
