"""False-hit guards: reasons to refuse a semantic match that the similarity alone would accept.

Embeddings place "cancel my order" next to "cancel my subscription", "is it safe?" next to
"is it not safe?", and "version 2.9" next to "version 2.10". Each guard compares the query
with the cached entry's query and names what differs; any named difference refuses the hit.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["Verifier", "content_words", "guard_rejection"]

Verifier = Callable[[str, str], bool]
"""Decides a borderline match: gets (query, cached query) and returns True to accept it."""

_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
# Sentence negation only: "without" or "none of" are too often paraphrases of positive text.
_NEGATION = re.compile(r"\b(?:not|no(?!-)|never|neither|nor|cannot)\b|n['\u2019]t\b", re.IGNORECASE)
# Identifier-like tokens: `code`, CamelCase / ALLCAPS / snake_case / digits-inside words.
_CODE = re.compile(r"`([^`]+)`")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]*(?:[a-z][A-Z]|[A-Z]{2}|_|[A-Za-z]\d|\d[A-Za-z])[\w.]*\b")
# Capitalised words that do not start a sentence: names of people, places, products.
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)(?<![.!?:])\b[A-Z][a-z]{2,}\b")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# In a short query every content word carries the meaning: "cancel my order" / "cancel my
# subscription", "reset my password on the mobile app" / "... on the web site". There, any
# word of one side replaced by another word is a different question; in longer text such
# swaps are usually synonyms.
_SHORT_QUERY_WORDS = 6
# Negation flips a question or a short statement; in a paragraph it sits in one clause among
# many and is paraphrased freely ("without waiting" / "you don't have to wait").
_NEGATION_SCOPE_WORDS = 15
_STOP = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "into",
        "about",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "how",
        "why",
        "when",
        "where",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "please",
        "tell",
        "show",
        "give",
        "get",
        "make",
        "let",
        "there",
        "here",
        "so",
        "than",
        "then",
        "also",
        "just",
        "any",
        "some",
        "all",
        "each",
        "more",
        "most",
        "other",
        "such",
        "only",
        "own",
        "same",
        "too",
        "very",
        "s",
        "t",
    }
)


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def _negated(text: str) -> bool:
    return _NEGATION.search(text) is not None


def _entities(text: str) -> set[str]:
    found = {m.lower() for m in _CODE.findall(text)}
    found |= {m.lower() for m in _IDENTIFIER.findall(text)}
    found |= {m.lower() for m in _NAME.findall(text)}
    return {e for e in found if not e.isdigit()}


def _stem(word: str) -> str:
    """A light suffix stripper: "preprocessed", "preprocesses", "preprocess" agree."""
    if len(word) > 5 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _squashed(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _foreign(entities: set[str], other_text: str) -> set[str]:
    """The entities that do not occur in ``other_text`` (ignoring case, spaces, punctuation)."""
    squashed = _squashed(other_text)
    return {e for e in entities if _squashed(e) not in squashed}


def content_words(text: str) -> set[str]:
    """Lower-cased, lightly stemmed words of ``text`` without function words."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP}


def guard_rejection(query: str, cached: str) -> str | None:
    """Why a semantic match of ``query`` to ``cached`` must be refused, or ``None``.

    The reasons: ``"number"`` (the numbers differ), ``"negation"`` (one is negated, the other
    not; for texts of up to 15 content words), ``"entity"`` (each names something that does
    not occur in the other: identifiers, code, proper names), ``"key_term"`` (short queries,
    up to 6 content words, where each side has a content word the other lacks, as in
    "cancel my order" / "cancel my subscription").
    """
    if _numbers(query) != _numbers(cached):
        return "number"
    words, cached_words = content_words(query), content_words(cached)
    short = len(words | cached_words) <= _NEGATION_SCOPE_WORDS
    if short and _negated(query) != _negated(cached):
        return "negation"
    if _foreign(_entities(query), cached) and _foreign(_entities(cached), query):
        return "entity"
    substituted = bool(words - cached_words) and bool(cached_words - words)
    if substituted and len(words | cached_words) <= _SHORT_QUERY_WORDS:
        return "key_term"
    return None
