"""False-hit guards: reasons to refuse a semantic match that the similarity alone would accept.

Embeddings place "cancel my order" next to "cancel my subscription", "is it safe?" next to
"is it not safe?", and "version 2.9" next to "version 2.10". Each guard compares the query
with the cached entry's query and names what differs; any named difference refuses the hit.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "Verifier",
    "content_words",
    "guard_rejection",
    "request_terms",
    "strict_rejection",
    "term_of",
]

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


# The strict guards (the zero-configuration default, without a verifier): a short request,
# a question or an instruction, asks for exactly what its content words name, so any content
# word on one side only, content words in another order ("Celsius to Fahrenheit") or another
# kind of question ("why" / "when", "how" / "can I") makes it another request.
_STRICT_WORDS = 12
# Quantifiers and degree words change what is asked ("the best" / "the most", "only"):
# function words for the standard guards, content words for the strict ones.
_STRICT_STOP = _STOP - {"more", "most", "only", "all", "any", "some", "other", "same", "too"}
_WH = {"what": "general", "which": "general", "how": "general", "why": "why", "when": "when"}
_WH |= {"where": "where", "who": "who", "whom": "who", "whose": "whose"}
_HOW_QUANTITY = frozenset({"much", "many", "long", "old", "far", "often", "big", "tall", "fast"})
_AUX = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "am",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "have",
        "has",
        "had",
    ]
)
_REQUEST_VERBS = frozenset(
    [
        "explain",
        "write",
        "tell",
        "give",
        "show",
        "list",
        "describe",
        "summarize",
        "summarise",
        "translate",
        "define",
        "compare",
        "find",
        "make",
        "create",
        "generate",
        "help",
        "suggest",
        "recommend",
        "calculate",
        "convert",
        "name",
        "draft",
        "rewrite",
        "fix",
    ]
)


_CASED_WORD = re.compile(r"[A-Za-z0-9]+(?:['\u2019][A-Za-z]+)?")


def _tokens(text: str) -> list[str]:
    """Words with contractions cut ("what's" -> "what", "can't" -> "can"), lower-cased but
    for acronyms, which keep their case (and so their last letter: "HTTP" / "HTTPS")."""
    words = (re.split("['\u2019]", w)[0] for w in _CASED_WORD.findall(text))
    return [w if len(w) > 1 and w.isupper() else w.lower() for w in words]


def _question_kind(words: list[str]) -> str:
    """``why``, ``when``, ``where``, ``who``, ``whose``, ``how much`` (and other ``how``
    + quantity), ``general`` (what / which / how), ``yes/no`` (opens with an auxiliary verb)
    or ``other`` (an instruction or a statement)."""
    for i, word in enumerate(words):
        kind = _WH.get(word)
        if kind is None:
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        return f"how {following}" if word == "how" and following in _HOW_QUANTITY else kind
    return "yes/no" if words and words[0] in _AUX else "other"


def _compatible(first: str, second: str) -> bool:
    return first == second or {first, second} == {"general", "other"}


def _is_request(text: str, words: list[str]) -> bool:
    if text.rstrip().endswith("?"):
        return True
    return bool(words) and (words[0] in _REQUEST_VERBS or words[0] in _WH or words[0] in _AUX)


def _strict_terms(words: list[str]) -> list[str]:
    """Content words in order of first use (stemmed), for the strict guards."""
    kept = (term_of(w) for w in words)
    return list(dict.fromkeys(t for t in kept if t is not None))


def term_of(word: str) -> str | None:
    """A word as the strict guards compare it (stemmed; acronyms as written), or ``None``
    for a function word."""
    if len(word) > 1 and word.isupper():
        return word
    word = word.lower()
    return None if word in _STRICT_STOP else _stem(word)


def request_terms(query: str, cached: str) -> tuple[list[str], list[str]] | None:
    """The content words (in order of first use) of two short requests, as the strict guards
    compare them; ``None`` where the strict guards do not judge the pair (statements, or
    more than 12 content words in all); ``([], [])`` for two kinds of question."""
    words, cached_words = _tokens(query), _tokens(cached)
    if not (_is_request(query, words) or _is_request(cached, cached_words)):
        return None
    terms, cached_terms = _strict_terms(words), _strict_terms(cached_words)
    if len(set(terms) | set(cached_terms)) > _STRICT_WORDS:
        return None
    if not _compatible(_question_kind(words), _question_kind(cached_words)):
        return [], []
    return terms, cached_terms


def strict_rejection(query: str, cached: str) -> str | None:
    """The strict guards' reason to refuse a match of two short requests, or ``None``.

    They judge requests (a question or an instruction) of up to 12 content words in all:
    ``"question_kind"`` (why / when / where / who / how much / yes-no / what-how differ),
    ``"term"`` (a content word, quantifiers such as "most" or "only" included, on one side
    only: "learn Python" / "learn Python fast") and ``"order"`` (the same words in another
    order: "Celsius to Fahrenheit" / "Fahrenheit to Celsius"). Longer texts and statements
    are left to :func:`guard_rejection`.
    """
    found = request_terms(query, cached)
    if found is None:
        return None
    terms, cached_terms = found
    if not terms and not cached_terms:
        return "question_kind"
    if set(terms) != set(cached_terms):
        return "term"
    return "order" if terms != cached_terms else None


def guard_rejection(
    query: str, cached: str, *, strict: bool = False, key_terms: bool = True
) -> str | None:
    """Why a semantic match of ``query`` to ``cached`` must be refused, or ``None``.

    The reasons: ``"number"`` (the numbers differ), ``"negation"`` (one is negated, the other
    not; for texts of up to 15 content words), ``"entity"`` (each names something that does
    not occur in the other: identifiers, code, proper names), ``"key_term"`` (short queries,
    up to 6 content words, where each side has a content word the other lacks, as in
    "cancel my order" / "cancel my subscription"; not with ``key_terms=False``, where a
    verifier judges substitutions); with ``strict``, those of :func:`strict_rejection` too.
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
    if key_terms and substituted and len(words | cached_words) <= _SHORT_QUERY_WORDS:
        return "key_term"
    return strict_rejection(query, cached) if strict else None
