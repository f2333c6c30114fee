"""A linter for the static part of a prompt: what would break a provider's prefix cache.

A provider reuses the computed prefix of a prompt only when it is byte-identical to an earlier
one. The static part of a prompt (instructions, tools, examples, reference documents) should
therefore hold nothing that changes from call to call, or from deploy to deploy. The rules:

``timestamp``
    Dates and times (``2025-03-01``, ``14:05``, ``March 3, 2025``, ``03/01/2025``, Unix
    epochs, ``time.time()``'s among them), and dates without their year (``March 3``,
    ``3 March``, ``the 21st of June``, ``Mon 12/05``): they change every day, or every
    second. An ISO timestamp is one finding (not its time and offset again); a scripture
    reference's chapter and verse (``John 3:16``, ``1 Cor. 13:4-7``), a model id's snapshot
    date (``gpt-4o-2024-08-06``), a numbered label before a month's name (``Chapter 3 May
    ...``) and a bare fraction or score (``12/20``) are none.
``random-id``
    UUIDs, long hex strings, and long tokens mixing letters and digits (request ids, nonces);
    not model ids (``claude-3-5-sonnet-20241022``: words, versions and a snapshot date).
``unsorted-json``
    A JSON object whose keys are not sorted: its key order depends on whoever serialised it.
``whitespace``
    Trailing spaces, carriage returns, tabs, runs of blank lines, unusual Unicode spaces, Unicode
    line and paragraph separators (U+2028, U+2029, U+0085) and leading or trailing whitespace:
    invisible, and the first thing to drift between editors and deploys.
``unicode``
    Text not in Unicode NFC form (``e`` and a combining accent where NFC has ``é``, the
    angstrom sign where it has ``Å``, Hangul written as its letters): the same words as other
    bytes, which an editor, a database or a pipeline that normalises text turns into the
    NFC ones, and the prefix with them.
``per-user``
    Values that differ per user or tenant: e-mail addresses, phone numbers, ``user id: ...``
    style labels, and any of the ``known_values`` given (the call's tenant and user ids).

Each finding is a :class:`LintWarning` with the offending span. The rules are heuristics that
favour precision: clean prose, code and sorted JSON pass.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigurationError

__all__ = ["RULES", "LintRule", "LintWarning", "lint_text"]

LintRule = Literal["timestamp", "random-id", "unsorted-json", "whitespace", "unicode", "per-user"]
"""The names of the lint rules."""

RULES: tuple[LintRule, ...] = (
    "timestamp",
    "random-id",
    "unsorted-json",
    "whitespace",
    "unicode",
    "per-user",
)
"""Every rule, in the order findings are reported."""


@dataclass(frozen=True)
class LintWarning:
    """One finding: ``text[start:end]`` of ``section`` breaks ``rule``."""

    rule: LintRule
    message: str
    section: str
    start: int
    end: int
    text: str

    def __str__(self) -> str:
        return (
            f"{self.section}[{self.start}:{self.end}] {self.rule}: {self.message} ({self.text!r})"
        )


_MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
# dates without their year; every repeat bounded, so that a match spans a few dozen characters
# at most and a text is read in linear time (tests/test_prompts_linear.py)
_DAY = r"(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?"
_GAP = "[ \u00a0]{1,3}"
_MONTH_DAY = re.compile(rf"\b{_MONTHS}\.?,?{_GAP}(?:the{_GAP})?{_DAY}(?!\w|[.,:/]\d)")
_DAY_MONTH = re.compile(rf"(?<![.,:/])\b{_DAY}{_GAP}(?:of{_GAP})?{_MONTHS}\b")
_WEEKDAY_DATE = re.compile(
    r"\b(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|Mon|Tues?|Wed|Thu(?:rs?)?"
    rf"|Fri|Sat|Sun)\.?,?{_GAP}(?:0?[1-9]|[12]\d|3[01])/(?:0?[1-9]|[12]\d|3[01])(?![\w/]|[.,]\d)"
)
# a numbered label's number is no day: "Chapter 3 May be skipped", "Section 2 March orders"
_LABEL_BEFORE = re.compile(
    r"\b(?:chapter|section|sect|step|part|item|rule|figure|fig|table|page|pp?|level|article|art"
    r"|phase|version|v|room|no|number|grade|verse|act|scene|stage|round|unit|lesson|module"
    rf"|question|q|exercise|appendix|clause|paragraph|para|line)\.?{_GAP}\Z",
    re.IGNORECASE,
)
_YEARLESS = (_MONTH_DAY, _DAY_MONTH, _WEEKDAY_DATE)
_TIMESTAMPS = [
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
            r"(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w-])"
        ),
        "a date",
    ),
    (
        re.compile(
            r"(?<![\w:])\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[AaPp]\.?[Mm]\.?)?(?![\w:])"
        ),
        "a time of day",
    ),
    (re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b"), "a date"),
    (re.compile(rf"\b{_MONTHS}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b"), "a date"),
    (re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS}\.?,?\s+\d{{4}}\b"), "a date"),
    # seconds or milliseconds, with time.time()'s fraction (a version's dots are no epoch)
    (re.compile(r"(?<![\w.])1\d{9}(?:\d{3})?(?:\.\d+)?(?!\w|\.\d)"), "a Unix timestamp"),
    *((pattern, "a date without its year") for pattern in _YEARLESS),
]
# a scripture reference's chapter:verse is no time of day: "John 3:16", "1 Cor. 13:4-7"
_BOOKS = (
    r"(?:Genesis|Gen|Exodus|Exod|Leviticus|Lev|Numbers|Deuteronomy|Deut|Joshua|Josh|Judges|"
    r"Judg|Ruth|Ezra|Nehemiah|Neh|Esther|Esth|Job|Psalms?|Pss?|Psa|Proverbs|Prov|Ecclesiastes|"
    r"Eccl|Song of (?:Solomon|Songs)|Isaiah|Isa|Jeremiah|Jer|Lamentations|Ezekiel|Ezek|Daniel|"
    r"Hosea|Hos|Joel|Amos|Obadiah|Obad|Jonah|Micah|Nahum|Habakkuk|Zephaniah|Zeph|Haggai|"
    r"Zechariah|Zech|Malachi|Matthew|Matt|Mt|Mark|Mk|Luke|Lk|John|Jn|Acts|Romans|Rom|"
    r"Galatians|Gal|Ephesians|Eph|Philippians|Phil|Colossians|Col|Titus|Philemon|Phlm|Hebrews|"
    r"Heb|James|Jas|Jude|Revelation|Rev|Qur'?an|Koran|Surah|Sura|"
    r"[1-3] ?(?:Samuel|Sam|Kings|Kgs|Chronicles|Chr|Corinthians|Cor|Thessalonians|Thess|"
    r"Timothy|Tim|Peter|Pet|John|Jn))"
)
_VERSE = re.compile(
    rf"(?<![\w.]){_BOOKS}\.? \d{{1,3}}:\d{{1,3}}(?:[-\u2013]\d{{1,3}})?"
    r"(?!\w|:|\s?[AaPp]\.?[Mm]\b)"
)
# a model id's segments: words, versions ("4o", "3.5", "70b", "r1", "llama3", "8x7b"), short
# numbers and a YYYYMMDD snapshot date: claude-3-5-sonnet-20241022 is no random id, and
# gpt-4o-2024-08-06's date is no date that changes
_ID_SEGMENT = re.compile(
    r"(?:[A-Z]?[a-z]+|[A-Z]+)(?:\d{1,2}(?:\.\d+)?)?|\d{1,4}(?:\.\d+)*[A-Za-z]{0,2}"
    r"|[A-Za-z]{1,2}\d{1,2}|\d{1,2}x\d{1,3}[A-Za-z]?"
    r"|(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
)
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_LONGEST_NAME = 64  # characters of a model's name before its date (gpt-4o-mini: 11)
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_HEX = re.compile(r"(?<![\w-])[0-9a-fA-F]{16,}(?![\w-])")
_TOKEN = re.compile(r"(?<![\w-])[A-Za-z0-9_-]{20,}(?![\w-])")
# (each pattern starts a match at the start of a run only: from every position inside one,
# a long run without an end was scanned again and again, 4 s for 40,000 characters)
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_PHONE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?\(?\d{3}\)?[\s.-]\d{3}[\s.-]\d{4}(?!\w)")
_LABEL = re.compile(
    r"\b(?:user|customer|tenant|account|client|session|member|order)[ _-]?"
    r"(?:id|name|number|no\.?)\s*[:=#]\s*[\w.@+-]+",
    re.IGNORECASE,
)
_SEPARATOR = re.compile("[\u2028\u2029\u0085]")
_WHITESPACE = [
    (re.compile(r"(?<![ \t])[ \t]+(?=\r?\n|\Z)"), "trailing whitespace"),
    (re.compile(r"\r"), "a carriage return (CRLF line ends)"),
    (re.compile(r"\t"), "a tab"),
    (re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+"), "more than one blank line in a row"),
    (re.compile("[\u00a0\u2000-\u200b\u202f\u205f\u3000\ufeff]"), "an unusual Unicode space"),
    (_SEPARATOR, "a Unicode line or paragraph separator (U+2028, U+2029, U+0085)"),
]


def _timestamps(text: str, section: str) -> Iterator[LintWarning]:
    # found already (marked character by character): an ISO timestamp's time and offset are
    # no second finding, a verse's chapter:verse none at all, a dated text's words without
    # their year none either
    taken = bytearray(len(text))
    for match in _VERSE.finditer(text):
        taken[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
    for pattern, what in _TIMESTAMPS:
        for match in pattern.finditer(text):
            start, end = match.span()
            if taken.find(0, start, end) < 0:  # (inside what was found)
                continue
            if pattern in _YEARLESS and (
                taken.find(1, start, end) >= 0
                or (pattern is _DAY_MONTH and _LABEL_BEFORE.search(text, max(0, start - 16), start))
            ):
                continue
            if pattern is _TIMESTAMPS[0][0] and _model_date(text, start, end):
                continue
            taken[start:end] = b"\x01" * (end - start)
            yield _found("timestamp", f"{what} changes between calls", section, match)


def _model_id(word: str) -> bool:
    """Whether ``word`` reads as a model id (``claude-3-5-sonnet-20241022``): segments that are
    words, versions or a snapshot date, one of them a word of three letters or more."""
    segments = re.split(r"[-_]", word)
    return all(_ID_SEGMENT.fullmatch(s) for s in segments) and any(
        len(s) >= 3 and s.isalpha() for s in segments
    )


def _model_date(text: str, start: int, end: int) -> bool:
    """Whether the date ``text[start:end]`` ends a model id (``gpt-4o-2024-08-06``,
    ``o1-2024-12-17``): a name with a version before it, nothing but prose after it."""
    if start < 2 or text[start - 1] != "-" or re.match(r"\.?\w", text[end : end + 2]):
        return False
    first = start - 1
    while first > 0 and text[first - 1] in _ID_CHARS:
        first -= 1
        if start - first > _LONGEST_NAME:
            return False  # (no model's name: read no further back)
    segments = re.split(r"[-_]", text[first : start - 1])
    return all(_ID_SEGMENT.fullmatch(s) for s in segments) and any(
        any(c.isdigit() for c in s) and any(c.isalpha() for c in s) for s in segments
    )


def _random_ids(text: str, section: str) -> Iterator[LintWarning]:
    # found already, marked character by character (a match is no second finding where it
    # starts inside one): each match was compared with every earlier one, 500,000 times for
    # 1,000 UUIDs; a character is marked at most once by each pattern's (disjoint) matches
    taken = bytearray(len(text))
    for match in _UUID.finditer(text):
        taken[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
        yield _found("random-id", "a UUID is usually per call or per object", section, match)
    for pattern, what in ((_HEX, "a long hex string"), (_TOKEN, "a random-looking token")):
        for match in pattern.finditer(text):
            word = match.group()
            if taken[match.start()]:
                continue
            digits = sum(c.isdigit() for c in word)
            letters = sum(c.isalpha() for c in word)
            if pattern is _TOKEN and (digits < 3 or letters < 3 or _model_id(word)):
                continue
            if pattern is _HEX and (digits == 0 or letters == 0):
                continue
            taken[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
            yield _found("random-id", f"{what} looks like an id or a nonce", section, match)


def _unsorted_json(text: str, section: str) -> Iterator[LintWarning]:
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position >= 0:
        try:
            value, end = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):
            position = text.find("{", position + 1)
            continue
        path = _unsorted_path(value)
        if path is not None:
            yield LintWarning(
                "unsorted-json",
                f"JSON object keys are not sorted (at {path or 'the top level'})",
                section,
                position,
                end,
                text[position:end],
            )
        position = text.find("{", end)


def _unsorted_path(value: Any, path: str = "") -> str | None:
    """The path of the first object whose keys are not sorted, or None when all are."""
    if isinstance(value, dict):
        keys = list(value)
        if keys != sorted(keys):
            return path
        items: Iterable[tuple[str, Any]] = value.items()
    elif isinstance(value, list):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        step = key if key.startswith("[") else (f".{key}" if path else key)
        found = _unsorted_path(item, path + step)
        if found is not None:
            return found
    return None


def _whitespace(text: str, section: str) -> Iterator[LintWarning]:
    if text != text.strip():
        lead = len(text) - len(text.lstrip())
        if lead:
            yield LintWarning("whitespace", "leading whitespace", section, 0, lead, text[:lead])
        tail = len(text.rstrip())
        if tail < len(text):
            yield LintWarning(
                "whitespace",
                "trailing whitespace at the end",
                section,
                tail,
                len(text),
                text[tail:],
            )
    for pattern, what in _WHITESPACE:
        for match in pattern.finditer(text):
            if what == "trailing whitespace" and match.end() == len(text):
                continue  # reported above
            yield _found("whitespace", what, section, match)


def _unicode(text: str, section: str) -> Iterator[LintWarning]:
    """Each letter that NFC writes otherwise: a letter with the marks after it, or letters NFC
    joins into one (Hangul's)."""
    if unicodedata.is_normalized("NFC", text):
        return
    starts = [i for i, c in enumerate(text) if not i or not unicodedata.combining(c)]
    letters = zip(starts, [*starts[1:], len(text)], strict=True)
    first, last = next(letters)  # the letters read so far that NFC may join
    for start, end in letters:
        if _joined(text[first:last], text[start:end]):
            last = end
            continue
        yield from _not_nfc(text, section, first, last)
        first, last = start, end
    yield from _not_nfc(text, section, first, last)


_SHORT_RUN = 32  # a letter and its marks, at most, that NFC is asked to write (Unicode's
# stream-safe text has 30 marks in a row at most; CPython sorts a long run in quadratic time)


def _joined(before: str, letter: str) -> bool:
    """Whether NFC joins ``letter`` to the letters ``before`` it (one that is no short run of
    marks cannot be: a mark after a letter keeps the next letter from joining it)."""
    if len(before) > _SHORT_RUN or len(letter) > _SHORT_RUN:
        return False
    written = unicodedata.normalize("NFC", before) + unicodedata.normalize("NFC", letter)
    return not unicodedata.is_normalized("NFC", written)


def _not_nfc(text: str, section: str, start: int, end: int) -> Iterator[LintWarning]:
    if not unicodedata.is_normalized("NFC", text[start:end]):
        yield LintWarning(
            "unicode",
            "text not in Unicode NFC form: the same words as other bytes, which normalising "
            "changes",
            section,
            start,
            end,
            text[start:end],
        )


def _per_user(text: str, section: str, known_values: Iterable[str]) -> Iterator[LintWarning]:
    for pattern, what in (
        (_EMAIL, "an e-mail address"),
        (_PHONE, "a phone number"),
        (_LABEL, "a per-user or per-tenant value"),
    ):
        for match in pattern.finditer(text):
            yield _found("per-user", f"{what} differs per user or tenant", section, match)
    for value in {v for v in known_values if v and len(v.strip()) >= 3}:
        for match in re.finditer(rf"(?<!\w){re.escape(value)}(?!\w)", text):
            yield _found(
                "per-user", "this call's tenant or user id is in the static part", section, match
            )


def _found(rule: LintRule, message: str, section: str, match: re.Match[str]) -> LintWarning:
    return LintWarning(rule, message, section, match.start(), match.end(), match.group())


_CHECKS: dict[LintRule, Callable[[str, str], Iterator[LintWarning]]] = {
    "timestamp": _timestamps,
    "random-id": _random_ids,
    "unsorted-json": _unsorted_json,
    "whitespace": _whitespace,
    "unicode": _unicode,
}


def lint_text(
    text: str,
    *,
    section: str = "text",
    known_values: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> list[LintWarning]:
    """The findings of every rule (but those in ``ignore``) in ``text``, ordered by rule, then
    position.

    ``known_values`` are strings that differ per user or tenant (their ids, names): any of
    them in ``text`` is a ``per-user`` finding. ``section`` names the text in the findings.
    An unknown rule name in ``ignore``, a ``text`` or a known value that is no string raise
    :class:`~llmguard_sdk.errors.ConfigurationError` (a :class:`ValueError`). A single string
    is one value (one rule), not its characters.
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"the linted text must be a string, not {text!r:.80}")
    known_values = [known_values] if isinstance(known_values, str) else list(known_values)
    if not all(isinstance(v, str) for v in known_values):
        raise ConfigurationError(f"known_values must be strings, got {known_values!r:.80}")
    skipped = {ignore} if isinstance(ignore, str) else set(ignore)
    unknown = skipped - set(RULES)
    if unknown:
        raise ConfigurationError(
            f"unknown lint rules {sorted(unknown)}; the rules are {list(RULES)}"
        )
    found: list[LintWarning] = []
    for rule in RULES:
        if rule in skipped:
            continue
        if rule == "per-user":
            hits = list(_per_user(text, section, known_values))
        else:
            hits = list(_CHECKS[rule](text, section))
        found.extend(sorted(hits, key=lambda w: (w.start, w.end)))
    return found
