"""The false-hit guards in other languages and scripts: what they read without knowing the
language (digits of any numeral system, capitalised names in any cased script, words of any
script, question marks), so a question in Russian, Greek or Chinese is guarded as one in
English is, where it was served on similarity alone (or refused for want of words)."""

# ruff: noqa: RUF001, RUF002 (letters and digits of other scripts, on purpose)

from __future__ import annotations

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cache._words import names
from llmguard_sdk.cache.guards import guard_rejection, strict_agreement
from tests.test_cache import answer, ask

MOSCOW = "Какая погода будет в Москве завтра утром"
PARIS = "Какая погода будет в Париже завтра утром"


@pytest.mark.parametrize("strict", [True, False])
def test_another_city_in_cyrillic_is_not_served(strict: bool) -> None:
    """The weather in Paris was served for the weather in Moscow (similarity 0.785): the
    name guard read capitalised words in Latin letters only."""
    cache = ResponseCache(strict=strict)
    assert cache.store(ask(MOSCOW), answer("Moscow: snow"))
    assert cache.lookup(ask(PARIS)) is None
    assert cache.stats.guard_rejections.get("entity") == 1
    assert cache.lookup(ask(MOSCOW + "?")) is not None  # the same question still is


def test_names_in_any_cased_script_differ() -> None:
    athens = "Ποιος είναι ο δήμαρχος της Αθήνας σήμερα το πρωί"
    thessaloniki = "Ποιος είναι ο δήμαρχος της Θεσσαλονίκης σήμερα το πρωί"
    assert guard_rejection(athens, thessaloniki) == "entity"
    assert guard_rejection("Wie ist das Wetter in München", "Wie ist das Wetter in Köln")
    # a capitalised word opening a sentence is no name (¿ ¡ open one too)
    assert names("Москва. Какая погода? «Погода» в Москве") == {"москве"}
    assert names("¿Cómo está el tiempo hoy en Málaga?") == {"málaga"}


def test_strict_guards_read_words_of_any_script() -> None:
    """The strict guards read Latin letters only: "how do I remove Docker on Ubuntu?" and
    "how do I install Docker on Ubuntu?" in Russian were the same request (its Cyrillic words
    unseen), served 0.006 below the threshold; and a question and the same words without
    its question mark were two kinds of question, refused at similarity 1.0."""
    remove, install = "Как удалить Docker на Ubuntu?", "Как установить Docker на Ubuntu?"
    assert not strict_agreement(remove, install)
    assert guard_rejection(remove, install, strict=True) in ("key_term", "term")
    cache = ResponseCache()
    assert cache.store(ask(install), answer("apt install docker.io"))
    assert cache.lookup(ask(remove)) is None
    same = ("Как отменить мой заказ?", "как отменить мой заказ")
    assert guard_rejection(*same, strict=True) is None
    assert strict_agreement(*same)


def test_short_requests_without_spaces_compare_characters() -> None:
    """Han and kana are read a character at a time (no spaces between words): "cancel my
    order" and "cancel my subscription" differ in one character each."""
    assert guard_rejection("取消订单", "取消订阅") == "key_term"
    assert guard_rejection("取消订单", "取消订单。") is None
    assert guard_rejection("如何取消我的订单？", "如何取消我的订阅？", strict=True) is not None


def test_digits_of_any_numeral_system_are_numbers() -> None:
    """Arabic-Indic or full-width digits are the numbers they write: "١٥" is 15."""
    assert guard_rejection("iPhone ١٥ price", "iPhone 15 price") is None
    assert guard_rejection("سعر آيفون ١٥", "سعر آيفون ١٦") == "number"
    assert guard_rejection("ｉＰｈｏｎｅ １５ price", "iPhone 15 price") != "number"
