"""What the false-hit guards read in any language: words of any script (Han and kana a
character at a time, as they run without spaces), digits of any numeral system, and
capitalised names in any cased script (Cyrillic, Greek, accented Latin ...), and the words
that negate a sentence in the common languages besides English.

For pure ASCII text these read exactly what the English guards read before them.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from ._chinese import A_NOT_A

__all__ = [
    "ASCII_WORD",
    "CASED_WORD",
    "CHINESE_FUNCTION",
    "CJK",
    "WORD",
    "ascii_digits",
    "minor",
    "names",
    "negated",
    "squashed",
    "unspaced",
    "word_count",
    "words_of",
]

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""The scripts written without spaces between words, as a character class's ranges:
hiragana, katakana and Han (CJK ideographs and their extension A and compatibility blocks)."""
WORD = re.compile(rf"[{CJK}]|[^\W_{CJK}]+(?:'[^\W\d_{CJK}]+)?")
"""A word of lower-cased text (ASCII: ``[a-z0-9]+(?:'[a-z]+)?``)."""
ASCII_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
""":data:`WORD` on lower-cased ASCII text (the same words, found in about two-thirds of the
time: no Unicode classes)."""
CASED_WORD = re.compile(rf"[{CJK}]|[^\W_{CJK}]+(?:['\u2019][^\W\d_{CJK}]+)?")
"""A word as written, its contraction kept (ASCII: ``[A-Za-z0-9]+(?:['\u2019][A-Za-z]+)?``)."""
_LETTERS = re.compile(rf"[^\W\d_{CJK}]+")
_ONE_CJK = re.compile(rf"[{CJK}]")
_ONE_KANA = re.compile("[\u3040-\u30ff]")
# What a Han or kana character is worth in words, for the rules that count words (a Chinese
# or Japanese text is read a character at a time): on 21 English questions and statements
# with their Chinese and Japanese translations, a text's distinct Han characters number
# about 2.5 per English content word, and a Japanese text's kana (particles, endings,
# katakana loanwords) about 5; weighted so, the counts average 1.08 (Chinese) and 0.99
# (Japanese) times the English ones (since Japanese particles and auxiliaries are function
# words, no longer counted, about 0.83 times on 15 such pairs from the tests: a Japanese
# text is in each scope as an English one a little longer is). Counted in fifths of a word,
# whole numbers: a sum of 0.4s and 0.2s depended on the order a set gave its words in, which
# changes with each process's hash seed (four words and five Han characters were 6.0 words
# in one process, 6.000000000000001 in another).
_HAN_FIFTHS = 2
_KANA_FIFTHS = 1
_DIGIT = re.compile(r"\d")
# what may stand between a sentence's end (or the text's start) and its first word
_BEFORE_WORD = " \t\n\r\"'«»„“”\u2018\u2019([{-\u2013\u2014"
_SENTENCE_END = ".!?:;¿¡。\uff01\uff1f؟"


def words_of(text: str) -> list[str]:
    """The words (:data:`WORD`) of lower-cased ``text``."""
    return (ASCII_WORD if text.isascii() else WORD).findall(text)


def ascii_digits(text: str) -> str:
    """``text`` with every decimal digit (Arabic-Indic, Devanagari, full-width ...) as the
    ASCII digit of the same value."""
    if text.isascii():
        return text
    return _DIGIT.sub(lambda found: str(unicodedata.decimal(found[0])), text)


# Chinese function characters, as the English lists name function words: the particles
# that end a sentence (吗 / 嗎, 呢, 啊, 呀, 嘛, 哦, 啦: a question's or a tone's, as "?" is),
# "的" ("'s", "of") and "了" (done: as "did" / "has" are). Only characters seldom part of a
# content word, whose absence changes no request: not "吧" ("酒吧" a bar: "附近有酒吧吗" /
# "附近有酒吗"), "过" ("你去过北京吗" has been / "你去北京吗" goes), "着", "地" ("地图" a
# map), "得" ("得到" get), "是", "和" ("和平" peace), nor the pronouns ("你叫什么名字" /
# "我叫什么名字": your name / my name).
CHINESE_FUNCTION = frozenset("吗嗎呢啊呀嘛哦啦的了")
"""Han characters the guards read as function words: Chinese particles."""


def minor(word: str) -> bool:
    """Whether the guards take ``word`` for a function word without knowing its language:
    a word beyond ASCII of three letters or fewer ("мне", "на", "où"), but for a Han or
    kana character, read as a word of its own and a function word only if listed in
    :data:`CHINESE_FUNCTION` ("的", "吗", "呢"). ASCII words are the English lists'."""
    if word in CHINESE_FUNCTION:
        return True
    return len(word) <= 3 and not word.isascii() and _ONE_CJK.match(word) is None


def unspaced(words: Iterable[str]) -> bool:
    """Whether one of ``words`` is written in a script without spaces (holds a Han or kana
    character: :data:`CJK`), which an English sentence encoder cannot judge (MiniLM reads
    most Han characters as one unknown token: "订单" order / "订阅" subscription)."""
    return any(_ONE_CJK.search(word) is not None for word in words)


def word_count(words: set[str]) -> float:
    """How many words ``words`` (as :data:`WORD` reads them) are worth, language-fairly: a
    word of an alphabet counts one, a Han character 0.4 and a kana 0.2 (one English content
    word is about 2.5 distinct Han characters in Chinese, 5 kana in Japanese). For words of
    other scripts than Han and kana this is ``len(words)``."""
    fifths = 0
    for word in words:
        if _ONE_CJK.match(word) is None:
            fifths += 5
        else:
            fifths += _KANA_FIFTHS if _ONE_KANA.match(word) else _HAN_FIFTHS
    return fifths / 5


def squashed(text: str) -> str:
    """``text`` lower-cased, letters and digits only (of any script)."""
    return re.sub(r"[\W_]", "", text.lower())


def names(text: str) -> set[str]:
    """Capitalised words of three letters or more with a letter beyond ASCII ("Москве",
    "München", "Αθήνας"), lower-cased, where no sentence starts (ASCII names are the English
    guards')."""
    found = set()
    for match in _LETTERS.finditer(text):
        word = match[0]
        if word.isascii() or len(word) < 3 or not (word[0].isupper() and word[1:].islower()):
            continue
        at = match.start() - 1
        while at >= 0 and text[at] in _BEFORE_WORD:
            at -= 1
        if at >= 0 and text[at] not in _SENTENCE_END:
            found.add(word.lower())
    return found


# Words that negate a sentence, by language (English's are the guards' own; Spanish and
# Italian "no" is English's). Left out: words that also mean something else in a question
# (Italian "mai" and Greek "ποτέ" are "ever" there, Vietnamese "không" ends a yes/no question,
# French "personne" is "a person", Polish "tak" is "yes"), and negation written as a verb's
# ending only (Turkish "-me", Finnish) or as a prefix ("не-" in "незаконный").
_NEGATIONS = {
    "French": "ne pas jamais aucun aucune rien",  # and "n'", "non" (below)
    "Spanish": "nunca jamás tampoco ni nadie ningún ninguno ninguna",
    "Portuguese": "não nunca jamais nem ninguém nenhum nenhuma",
    "Italian": "nessuno nessuna niente nulla",  # and "non" (below)
    "German": "nicht nichts nie niemals niemand kein keine keinen keinem keiner keines",
    "Dutch": "niet niets geen nooit niemand",
    "Swedish, Danish, Norwegian": "inte ikke aldrig aldri",
    "Polish, Czech, Slovak": "nie nigdy nikdy",
    "Russian, Ukrainian, Bulgarian": "не нет нельзя никогда ні ніколи немає никога",
    "Greek": "δεν μην όχι",
    "Turkish": "değil yok asla",
    "Indonesian, Malay": "tidak bukan belum jangan",
    "Arabic": "لا ولا فلا ليس ليست لست لم ولم لن ولن",
    "Hebrew": "לא אין אינו אינה אינם אינן",
    "Hindi, Urdu": "नहीं نہیں",
    "Korean": "안 못",  # and words opening with 않 / 없 / 아니 / 아닌 / 아닙 (below)
}
_LISTED = frozenset(w for words in _NEGATIONS.values() for w in words.split()) | {"non"}
# a word with its Indic vowel signs (Python reads those of "नहीं" as no word characters)
_LETTERS_AND_SIGNS = re.compile(r"[\w\u0900-\u0dff]+")
_CAPITAL_NEXT = re.compile(" [A-Z]")
# French "n'" before a word ("n'est"); Korean words opening with a negative stem ("하지
# 않아요", "없어요", "아닙니다"). Each a whole word's start: not "rock'n'roll", "안녕하세요".
_OPENING = re.compile(r"[Nn]['\u2019](?=[^\W\d_])|[않없]|아[니닌닙]")
_KANA = re.compile("[\u3040-\u30ff]")
# Chinese: 不 / 没 / 沒 before a word, "无法" (cannot); not in "A不A" questions ("能不能",
# "有没有": "can ... or not"), nor in words where they negate nothing ("不过" is "but", "不同"
# "different", "不好意思" "excuse me", "没错" "right", "不得不" "must").
_CHINESE_NEGATION = re.compile("[不没沒]|[无無]法")
_CHINESE_SIGN = re.compile("[不没沒无無]")
_CHINESE_NOT_NEGATING = re.compile(
    rf"{A_NOT_A.pattern}|不得不|不好意思|差不多|不[过過仅僅断斷管少久同错錯]"
    r"|[没沒](?:错|錯|关系|關係)"
)
# Japanese (text with kana): a verb's negative ending ("できない", "できません", "なかった")
# and "不可" ("不可能"); not "すみません" ("excuse me"), "かまいません" ("I don't mind": it
# is all right) or "なければならない" ("must").
_JAPANESE_NEGATION = re.compile("ない|なかった|ません|不可")
_JAPANESE_NOT_NEGATING = re.compile(
    "すみません|かまいません|構いません|なければな(?:らない|りません)"
)


def negated(text: str) -> bool:
    """Whether ``text`` holds a word that negates a sentence in a language besides English:
    French "ne ... pas" / "n'", German "nicht" / "kein", Spanish "nunca", Portuguese "não",
    Italian "non", Dutch "niet", Russian "не", Polish "nie", Greek "δεν", Turkish "değil",
    Indonesian "tidak", Arabic "لا", Hebrew "לא", Hindi "नहीं", Korean "안" / "않-", Chinese
    "不" / "没" and Japanese "-ない" / "-ません" (``_NEGATIONS`` lists them). Pure ASCII text
    reads as negated only by a listed word of another language ("nicht", "pas")."""
    if any(_word_start(text, found.start()) for found in _OPENING.finditer(text)):
        return True
    if not _LISTED.isdisjoint(_LETTERS_AND_SIGNS.findall(text.lower())) and any(
        map(_negating, _LETTERS_AND_SIGNS.finditer(text))
    ):
        return True
    if _KANA.search(text) is not None:
        return _JAPANESE_NEGATION.search(_JAPANESE_NOT_NEGATING.sub("", text)) is not None
    if _CHINESE_SIGN.search(text) is None:
        return False
    return _CHINESE_NEGATION.search(_CHINESE_NOT_NEGATING.sub("", text)) is not None


def _word_start(text: str, at: int) -> bool:
    return at == 0 or not (text[at - 1].isalnum() or text[at - 1] in "'\u2019")


def _negating(found: re.Match[str]) -> bool:
    """A listed word, lower-case or capitalised ("NE" is a compass point), no hyphen after
    it ("non-profit", as English "no" in "no-code"), "non" not before a capital (English's
    prefix in "Non Destructive")."""
    word = found[0]
    low = word.lower()
    if low not in _LISTED or word not in (low, low[0].upper() + low[1:]):
        return False
    end = found.end()
    if found.string[end : end + 1] == "-":
        return False
    return low != "non" or _CAPITAL_NEXT.match(found.string, end) is None
