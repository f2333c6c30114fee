"""Two readings the guards share with the embedders and with Chinese speakers.

Half-width katakana ("ﾊﾟｽﾜｰﾄﾞ", what older Japanese systems and some keyboards type) is the
same word as its full-width spelling ("パスワード"): the embedders read text in its NFKC form,
so such a pair came out close, but the guards read the half-width characters as other words
and refused it ("key_term"), a miss that served nothing. Now they read the NFKC form too.

A Chinese "A-not-A" question ("能不能退款" can I get a refund, "是不是免费" is it free, "有没有
折扣" is there a discount) is a yes/no question, as one ending in 吗 is: "能不能退款" and "能退
款吗" are one request (served), and "能不能退款" / "退款" (refund) are a question and a bare
topic, refused by the strict guards ("question_kind") as "能退款吗" / "退款" already were;
before, the A-not-A form was of no kind and its 不 a word of its own, so the first pair was
refused and the second served."""

# ruff: noqa: RUF001 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache._chinese import question_kind, unasked
from llmguard_sdk.cache._words import negated
from llmguard_sdk.cache.guards import guard_rejection, strict_agreement
from tests.test_cache import looked_up

HALF_WIDTH = [
    ("ﾊﾟｽﾜｰﾄﾞを忘れました", "パスワードを忘れました"),  # I forgot my password
    ("ｺﾝﾋﾟｭｰﾀｰを再起動する方法は？", "コンピューターを再起動する方法は？"),  # restart a PC
    ("ﾊﾟｽﾜｰﾄﾞをリセットしたい", "パスワードをリセットしたい"),  # (one word of each width)
]
A_NOT_A_SAME = [
    ("能不能退款", "能退款吗"),  # can I get a refund
    ("有没有折扣", "有折扣吗？"),  # is there a discount
    ("可不可以退款", "可以退款吗"),  # (a two-character verb: 可以)
    ("你喜欢不喜欢猫", "你喜欢猫吗"),  # do you like cats (the whole verb again)
]
A_NOT_A_TOPIC = [("能不能退款", "退款"), ("是不是免费", "免费")]  # a question / a bare topic


@pytest.mark.parametrize(("query", "cached"), HALF_WIDTH)
def test_half_width_katakana_is_its_full_width_word(query: str, cached: str) -> None:
    for first, second in ((query, cached), (cached, query)):
        assert guard_rejection(first, second) is None
        assert guard_rejection(first, second, strict=True) is None
        hit = looked_up(second, first)  # (the default cache: strict guards, no verifier)
        assert hit is not None
        assert hit.kind == "semantic"


def test_half_width_katakana_naming_another_thing_is_still_refused() -> None:
    # ﾛﾝﾄﾞﾝ (London) / パリ (Paris): other places whatever their width
    assert guard_rejection("ﾛﾝﾄﾞﾝの天気は？", "パリの天気は？") == "entity"
    assert looked_up("パリの天気は？", "ﾛﾝﾄﾞﾝの天気は？") is None


@pytest.mark.parametrize(("query", "cached"), A_NOT_A_SAME)
def test_an_a_not_a_question_is_its_yes_no_question(query: str, cached: str) -> None:
    assert question_kind(query, "other") == "yes/no"
    assert not negated(query)  # (its 不 / 没 negates nothing)
    for first, second in ((query, cached), (cached, query)):
        assert guard_rejection(first, second, strict=True) is None
        assert strict_agreement(first, second)


@pytest.mark.parametrize(("query", "cached"), A_NOT_A_TOPIC)
def test_an_a_not_a_question_and_its_bare_topic_are_refused(query: str, cached: str) -> None:
    for first, second in ((query, cached), (cached, query)):
        assert guard_rejection(first, second, strict=True) == "question_kind"
        assert looked_up(second, first) is None


def test_negated_and_other_questions_stay_apart() -> None:
    # "I cannot get a refund" is a statement; the A-not-A question is no negation of it
    assert guard_rejection("我不能退款", "我能不能退款", strict=True) is not None
    assert guard_rejection("能不能退款", "可以退款吗？", strict=True) == "key_term"  # 能 / 可以
    assert unasked("一动不动") == "一动不动"  # (motionless: no question)
    assert unasked("日本語が話せますか") == "日本語が話せますか"  # (Japanese: as it is)
    assert question_kind("他不来", "other") == "other"  # (he is not coming)
