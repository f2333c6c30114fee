"""The negation guard's scope (15 content words) counted each Han or kana character as a
word, so a Chinese or Japanese question of six or seven English words' worth was already
"too long" for it: its negation was served the question's answer ("can I get a refund ..." /
"can't I get a refund ..."). Characters now count at the rate they stand for words (a Han
character 0.4 of a word, a kana 0.2), so the same texts get the same decisions in English,
Chinese and Japanese; English is counted as before."""

# ruff: noqa: RUF001 (full-width punctuation, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache import HashingEmbedder, ResponseCache
from llmguard_sdk.cache.guards import content_words, guard_rejection
from tests.test_cache import answer, ask

# (a text, its negation) in English, Chinese and Japanese: within the scope in each language
WITHIN = [
    (
        (
            "Can I get a refund if the hotel cancels my reservation because of the storm?",
            "Can't I get a refund if the hotel cancels my reservation because of the storm?",
        ),
        (
            "如果酒店因为暴风雨取消了我的预订，我可以获得退款吗？",
            "如果酒店因为暴风雨取消了我的预订，我不能获得退款吗？",
        ),
        (
            "嵐のためにホテルが予約をキャンセルした場合、返金を受けられますか？",
            "嵐のためにホテルが予約をキャンセルした場合、返金を受けられませんか？",
        ),
    ),
    (
        (
            "Is it safe to take ibuprofen and paracetamol together during pregnancy?",
            "Is it not safe to take ibuprofen and paracetamol together during pregnancy?",
        ),
        (
            "怀孕期间同时服用布洛芬和对乙酰氨基酚安全吗？",
            "怀孕期间同时服用布洛芬和对乙酰氨基酚不安全吗？",
        ),
        (
            "妊娠中にイブプロフェンとアセトアミノフェンを一緒に飲んでも安全ですか？",
            "妊娠中にイブプロフェンとアセトアミノフェンを一緒に飲んでも安全ではありませんか？",
        ),
    ),
    (
        (
            "I have already sent the signed rental contract to the landlord by registered mail",
            "I have not sent the signed rental contract to the landlord by registered mail",
        ),
        ("我已经用挂号信把签好的租房合同寄给房东了", "我没有用挂号信把签好的租房合同寄给房东"),
        (
            "署名した賃貸契約書を書留で大家さんに送りました",
            "署名した賃貸契約書を書留で大家さんに送りませんでした",
        ),
    ),
    (
        (
            "Can my teenage son use my credit card to buy games in the online store?",
            "Can't my teenage son use my credit card to buy games in the online store?",
        ),
        (
            "我十几岁的儿子可以用我的信用卡在网上商店买游戏吗？",
            "我十几岁的儿子不能用我的信用卡在网上商店买游戏吗？",
        ),
        (
            "十代の息子は私のクレジットカードでオンラインストアのゲームを買えますか？",
            "十代の息子は私のクレジットカードでオンラインストアのゲームを買えませんか？",
        ),
    ),
]

# A paragraph, negated in one clause, and its paraphrase without the negation: past the
# scope in each language (a negation among many clauses is paraphrased freely)
BEYOND = (
    (
        "The train to the airport leaves every fifteen minutes from the central station, and "
        "tickets can be bought at the machines on the platform or in the mobile app, so there "
        "is no need to book in advance or print anything at home.",
        "The train to the airport leaves every fifteen minutes from the central station, and "
        "tickets can be bought at the machines on the platform or in the mobile app, so "
        "booking in advance or printing anything at home is optional.",
    ),
    (
        "去机场的火车每十五分钟从中央车站发车，车票可以在站台的售票机或手机应用上购买，"
        "所以不需要提前预订，也不用在家打印任何东西。",
        "去机场的火车每十五分钟从中央车站发车，车票可以在站台的售票机或手机应用上购买，"
        "所以提前预订和在家打印都是可选的。",
    ),
    (
        "空港行きの電車は中央駅から十五分ごとに出発し、切符はホームの券売機かモバイルアプリで"
        "購入できるので、事前に予約したり自宅で印刷したりする必要はありません。",
        "空港行きの電車は中央駅から十五分ごとに出発し、切符はホームの券売機かモバイルアプリで"
        "購入できるので、事前の予約や自宅での印刷は任意です。",
    ),
)
LANGUAGES = ("English", "Chinese", "Japanese")


@pytest.mark.parametrize("row", WITHIN, ids=[f"within-{i}" for i in range(len(WITHIN))])
def test_a_negation_within_the_scope_is_refused_in_every_language(
    row: tuple[tuple[str, str], ...],
) -> None:
    for language, (text, negation) in zip(LANGUAGES, row, strict=True):
        assert guard_rejection(text, negation) == "negation", language
        assert guard_rejection(negation, text) == "negation", language
        assert guard_rejection(text, negation, strict=True) == "negation", language


def test_a_negated_clause_of_a_paragraph_is_past_the_scope_in_every_language() -> None:
    for language, (text, paraphrase) in zip(LANGUAGES, BEYOND, strict=True):
        assert guard_rejection(text, paraphrase) is None, language
        assert guard_rejection(paraphrase, text) is None, language


def test_the_counts_agree_across_languages() -> None:
    """Each text's weighted count is within a factor of 1.6 of its English version's."""
    from llmguard_sdk.cache._words import word_count

    for row in [*WITHIN, BEYOND]:
        for side in (0, 1):
            english = word_count(content_words(row[0][side]))
            for language, texts in zip(LANGUAGES[1:], row[1:], strict=True):
                count = word_count(content_words(texts[side]))
                assert english / 1.6 <= count <= english * 1.6, (language, texts[side])


def test_words_of_alphabets_count_one_each() -> None:
    from llmguard_sdk.cache._words import word_count

    words = content_words("Can I cancel my order after it has already been shipped to me?")
    assert word_count(words) == len(words)
    assert word_count(content_words("Могу ли я отменить заказ после отправки?")) == 5
    assert word_count({"取", "消", "キ", "ャ"}) == pytest.approx(1.2)


def test_a_cache_refuses_the_negated_question_in_chinese_and_japanese() -> None:
    """(The hashing embedder scores these pairs 0.64 and 0.72: served before.)"""
    _, chinese, japanese = WITHIN[0]
    for text, negation in (chinese, japanese):
        cache = ResponseCache(embedder=HashingEmbedder(), threshold=0.5, strict=False)
        assert cache.store(ask(text), answer("yes"))
        assert cache.lookup(ask(negation)) is None, negation
        assert cache.stats.guard_rejections.get("negation") == 1, negation
