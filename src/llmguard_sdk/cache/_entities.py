"""What the entity guard reads as names: code in backticks, identifiers, capitalised words
that open no sentence (in any cased script) and katakana words, the loanwords and foreign
names of Japanese ("ロンドン", "パリ", "コンピューター"). A match whose texts each name
something the other does not is refused (``"entity"``): "the weather in London" / "in
Paris", "ロンドンの天気は？" / "パリの天気は？".

.. versionadded:: 0.2.0
"""

# ruff: noqa: RUF002 (full-width punctuation, on purpose)

from __future__ import annotations

import re

from ._japanese import holds_loanword, loanwords
from ._words import names, squashed

__all__ = ["entities", "names_missing"]

# Identifier-like tokens: `code`, CamelCase / ALLCAPS / snake_case / digits-inside words.
_CODE = re.compile(r"`([^`]+)`")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]*(?:[a-z][A-Z]|[A-Z]{2}|_|[A-Za-z]\d|\d[A-Za-z])[\w.]*\b")
# Capitalised words that do not start a sentence: names of people, places, products.
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)(?<![.!?:])\b[A-Z][a-z]{2,}\b")


def entities(text: str) -> set[str]:
    """``text``'s code, identifiers and capitalised names, lower-cased (not katakana)."""
    found = {m.lower() for m in _CODE.findall(text)}
    found |= {m.lower() for m in _IDENTIFIER.findall(text)}
    found |= {m.lower() for m in _NAME.findall(text)} | names(text)
    return {e for e in found if not e.isdigit()}


def _foreign(found: set[str], other_text: str) -> set[str]:
    """The entities that do not occur in ``other_text`` (ignoring case, spaces, punctuation)."""
    other = squashed(other_text)
    return {e for e in found if squashed(e) not in other}


def names_missing(text: str, other_text: str) -> bool:
    """Whether ``text`` names something that ``other_text`` does not: one of its
    :func:`entities`, or a katakana word (:func:`._japanese.loanwords`; a final "ー" aside,
    and in a compound of ``text``'s own words too: "リセット" is in "パスワードリセット" where
    ``text`` names "パスワード"; "インストール" is not in "アンインストール")."""
    if _foreign(entities(text), other_text):
        return True
    words = loanwords(text)
    return any(not holds_loanword(other_text, word, words) for word in words)
