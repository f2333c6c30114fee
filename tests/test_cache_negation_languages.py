"""The negation guard in other languages than English: a question and its negation ("can I
cancel my order?" / "can't I cancel my order?") in German, French, Russian, Chinese ... were
served each other's answer, as the guard read English negation words only; the same question
reworded without a negation is still served."""

# ruff: noqa: RUF001 (letters of other scripts, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cache._words import negated
from llmguard_sdk.cache.guards import guard_rejection
from tests.test_cache import answer, ask

# (language, a question, its negation, the question reworded: no negation in either)
LANGUAGES = [
    (
        "Spanish",
        "¿Puedo cancelar mi pedido?",
        "¿Nunca puedo cancelar mi pedido?",
        "puedo cancelar mi pedido?",
    ),
    ("German", "Gibt es einen Rabatt?", "Gibt es keinen Rabatt?", "gibt es einen Rabatt"),
    (
        "German",
        "Kann ich mein Abo kündigen?",
        "Kann ich mein Abo nicht kündigen?",
        "Kann ich mein Abo kündigen",
    ),
    (
        "French",
        "Puis-je annuler ma commande ?",
        "Ne puis-je pas annuler ma commande ?",
        "puis-je annuler ma commande?",
    ),
    (
        "French",
        "Je peux annuler ma commande",
        "Je n'ai pas annulé ma commande",
        "Je peux annuler ma commande.",
    ),
    (
        "Portuguese",
        "Posso cancelar meu pedido?",
        "Não posso cancelar meu pedido?",
        "posso cancelar meu pedido",
    ),
    (
        "Italian",
        "Posso annullare il mio ordine?",
        "Non posso annullare il mio ordine?",
        "posso annullare il mio ordine",
    ),
    (
        "Italian",
        "Hai mai annullato un ordine?",
        "Non hai mai annullato un ordine?",
        "hai mai annullato un ordine",
    ),
    (
        "Dutch",
        "Kan ik mijn bestelling annuleren?",
        "Kan ik mijn bestelling niet annuleren?",
        "kan ik mijn bestelling annuleren",
    ),
    (
        "Swedish",
        "Kan jag avbryta min beställning?",
        "Kan jag inte avbryta min beställning?",
        "kan jag avbryta min beställning",
    ),
    (
        "Polish",
        "Czy mogę anulować zamówienie?",
        "Czy nie mogę anulować zamówienia?",
        "czy mogę anulować zamówienie",
    ),
    (
        "Russian",
        "Могу ли я отменить заказ?",
        "Не могу ли я отменить заказ?",
        "Могу ли я отменить мой заказ?",
    ),
    (
        "Greek",
        "Μπορώ να ακυρώσω την παραγγελία μου;",
        "Δεν μπορώ να ακυρώσω την παραγγελία μου;",
        "Μπορώ να ακυρώσω την παραγγελία;",
    ),
    (
        "Turkish",
        "Sipariş iptal edilebilir mi?",
        "Sipariş iptal edilebilir değil mi?",
        "sipariş iptal edilebilir mi",
    ),
    (
        "Indonesian",
        "Apakah saya bisa membatalkan pesanan?",
        "Apakah saya tidak bisa membatalkan pesanan?",
        "apakah saya bisa membatalkan pesanan",
    ),
    ("Arabic", "هل يمكنني إلغاء طلبي؟", "هل لا يمكنني إلغاء طلبي؟", "هل يمكنني إلغاء طلبي"),
    (
        "Hebrew",
        "אני יכול לבטל את ההזמנה?",
        "אני לא יכול לבטל את ההזמנה?",
        "אני יכול לבטל את ההזמנה שלי?",
    ),
    (
        "Hindi",
        "क्या मैं अपना ऑर्डर रद्द कर सकता हूँ?",
        "क्या मैं अपना ऑर्डर रद्द नहीं कर सकता हूँ?",
        "क्या मैं अपना ऑर्डर रद्द कर सकता हूँ",
    ),
    ("Korean", "주문을 취소할 수 있나요?", "주문을 취소할 수 없나요?", "주문을 취소할 수 있나요"),
    ("Korean", "오늘 배송되나요?", "오늘 안 배송되나요?", "오늘 배송되나요"),
    ("Chinese", "我可以取消订单吗？", "我不可以取消订单吗？", "我可以取消订单吗"),
    ("Chinese", "我已经取消了订单", "我没有取消订单", "我已经取消了订单。"),
    (
        "Japanese",
        "注文をキャンセルできますか？",
        "注文をキャンセルできませんか？",
        "すみません、注文をキャンセルできますか？",
    ),
    (
        "Japanese",
        "注文をキャンセルできますか？",
        "注文をキャンセルできないですか？",
        "注文をキャンセルできますか",
    ),
]

# The strict guards read no content word in these (Hangul words of up to three syllables and
# the pieces that Indic vowel signs cut words into pass for function words) and refuse every
# match of two different texts: a rewording is served by the standard guards only.
NO_STRICT_TERMS = {"Korean", "Hindi"}
# An opening "excuse me" is a term on one side for the strict guards (as in English: "Excuse
# me, can I cancel my order?" / "Can I cancel my order?"), since they count a kana as a fifth
# of a word (as the other guards do): before, the pair was "too long" for them as characters.
STRICT_REFUSES = {"すみません、注文をキャンセルできますか？"}


@pytest.mark.parametrize(
    ("language", "question", "negation", "reworded"),
    LANGUAGES,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(LANGUAGES)],
)
def test_a_negated_question_is_refused_and_a_rewording_served(
    language: str, question: str, negation: str, reworded: str
) -> None:
    for strict in (False, True):
        assert guard_rejection(question, negation, strict=strict) == "negation", language
        assert guard_rejection(negation, question, strict=strict) == "negation", language
    for strict in (False, True):
        cache = ResponseCache(strict=strict)
        assert cache.store(ask(question), answer("yes"))
        assert cache.lookup(ask(negation)) is None
        assert cache.store(ask(negation), answer("no"))
        if strict and (language in NO_STRICT_TERMS or reworded in STRICT_REFUSES):
            continue
        hit = cache.lookup(ask(reworded))
        assert hit is not None, language
        assert hit.response.text == "yes"


@pytest.mark.parametrize(
    "text",
    [
        "Hai mai visto Roma?",  # Italian "mai": "ever" in a question
        "我能不能取消订单？",  # "can I ... or not": a question, no negation
        "有没有折扣？",
        "这两个有什么不同？",  # "different"
        "不好意思，我可以退货吗？",  # "excuse me"
        "没错吧？",  # "right?"
        "我不得不取消订单",  # "I must cancel"
        "すみません、予約できますか？",  # "excuse me"
        "予約しなければなりませんか？",  # "must I book?"
        "写真を撮ってもかまいませんか？",  # "is it all right if"
        "안녕하세요, 주문을 취소할 수 있나요?",  # "hello" opens with 안
        "मैंने ऑर्डर किया",  # "ने" is no "न"
        "Que pensez-vous du rock'n'roll ?",
        "non-profit hosting in NE Portland",
        "Destructive vs Non Destructive editing",
    ],
)
def test_words_that_only_look_negative_negate_nothing(text: str) -> None:
    assert not negated(text)


def test_english_reads_as_before() -> None:
    """English text reads a negation only in its own words: the other languages' lists do
    not change an English decision ("NE" is no French "ne", "non-" no Italian "non")."""
    assert guard_rejection("Hotels in NE Portland", "Hotels in NE Portland?") is None
    assert guard_rejection("Is a non-profit taxed?", "Is a non-profit taxed") is None
    assert guard_rejection("I can't log in", "I can log in") == "negation"
    assert guard_rejection("Is it safe?", "Is it never safe?") == "negation"
