"""What the false-hit guards read in any language: words of any script (Han and kana a
character at a time, as they run without spaces), digits of any numeral system, and
capitalised names in any cased script (Cyrillic, Greek, accented Latin ...).

For pure ASCII text these read exactly what the English guards read before them.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["WORD", "CASED_WORD", "ascii_digits", "minor", "names", "squashed"]

# Hiragana, katakana and Han (CJK ideographs and their extension A and compatibility blocks)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+(?:'[^\W\d_{_CJK}]+)?")
"""A word of lower-cased text (ASCII: ``[a-z0-9]+(?:'[a-z]+)?``)."""
CASED_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+(?:['\u2019][^\W\d_{_CJK}]+)?")
"""A word as written, its contraction kept (ASCII: ``[A-Za-z0-9]+(?:['\u2019][A-Za-z]+)?``)."""
_LETTERS = re.compile(rf"[^\W\d_{_CJK}]+")
_ONE_CJK = re.compile(rf"[{_CJK}]")
_DIGIT = re.compile(r"\d")
# what may stand between a sentence's end (or the text's start) and its first word
_BEFORE_WORD = " \t\n\r\"'«»„“”\u2018\u2019([{-\u2013\u2014"
_SENTENCE_END = ".!?:;¿¡。\uff01\uff1f؟"


def ascii_digits(text: str) -> str:
    """``text`` with every decimal digit (Arabic-Indic, Devanagari, full-width ...) as the
    ASCII digit of the same value."""
    if text.isascii():
        return text
    return _DIGIT.sub(lambda found: str(unicodedata.decimal(found[0])), text)


def minor(word: str) -> bool:
    """Whether the guards take ``word`` for a function word without knowing its language:
    a word beyond ASCII of three letters or fewer ("мне", "на", "où", "的" aside: a Han or
    kana character is read as a word of its own). ASCII words are the English lists'."""
    return len(word) <= 3 and not word.isascii() and _ONE_CJK.match(word) is None


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
