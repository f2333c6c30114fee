"""The lint and the context's rendering take time linear in their text, checked without a clock.

* A pattern whose matches (lookarounds included) span a bounded number of characters costs a
  bounded amount at each position: the text is read in linear time, whatever it holds. The
  patterns added for dates without a year, line separators and the context's tag are checked
  to be such patterns.
* The lint's own loops are counted: a text that counts how often its characters are read is
  read about twice as often when it is twice as long (a model id's date was checked by reading
  back to the start of its run of id characters: a run of 40,000 such characters was read
  again at each of its 2,858 dates, 4.8 s). The random-id rule's steps are counted the same
  way (each id was compared with every one found before it).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk.prompts import _tail, lint, lint_text

try:
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef, unused-ignore]

_LONGEST = 64  # characters a bounded pattern's match may span


def _widest(items: Any) -> int:
    """The most characters a match of the parsed ``items`` can span, lookarounds included; an
    AssertionError for a repeat without an upper bound."""
    total = 0
    for op, value in items:
        name = str(op)
        if name.endswith("_REPEAT"):
            _low, high, sub = value
            assert high != sre_parse.MAXREPEAT, "a repeat without an upper bound"
            total += high * _widest(sub)
        elif name == "SUBPATTERN":
            total += _widest(value[-1])
        elif name == "BRANCH":
            total += max(_widest(branch) for branch in value[1])
        elif name in ("ASSERT", "ASSERT_NOT"):
            total += _widest(value[1])
        elif name in ("GROUPREF", "GROUPREF_EXISTS", "ATOMIC_GROUP"):
            raise AssertionError(f"{name}: not measured")
        elif name != "AT":  # a position (\b, ^): no character
            total += 1
    return total


def widest(pattern: re.Pattern[str]) -> int:
    return _widest(sre_parse.parse(pattern.pattern, pattern.flags))


BOUNDED = {
    "month-day": lint._MONTH_DAY,
    "day-month": lint._DAY_MONTH,
    "weekday-date": lint._WEEKDAY_DATE,
    "label": lint._LABEL_BEFORE,
    "separator": lint._SEPARATOR,
    "context-tag": _tail._TAG,
    "context-line-break": _tail._LINE_BREAK,
}


@pytest.mark.parametrize("pattern", BOUNDED.values(), ids=BOUNDED.keys())
def test_each_new_pattern_matches_a_bounded_span(pattern: re.Pattern[str]) -> None:
    assert widest(pattern) <= _LONGEST


@pytest.mark.parametrize(("pattern", "width"), [(r"ab{2,5}", 6), (r"(?<!x)a|bc", 2)])
def test_the_measure_itself(pattern: str, width: int) -> None:
    assert widest(re.compile(pattern)) == width
    with pytest.raises(AssertionError, match="upper bound"):
        widest(re.compile(r"[\w.+-]+@"))  # (the e-mail pattern's kind: linear for other reasons)


class _Counted(str):
    """A text that counts the characters read from it one at a time (slices count once)."""

    reads = 0

    def __getitem__(self, key: Any) -> str:
        type(self).reads += 1
        return super().__getitem__(key)


def _reads(text: str) -> int:
    counted: Any = type("Counted", (_Counted,), {"reads": 0})
    lint_text(counted(text), ignore=["random-id"])
    return int(counted.reads)


@pytest.mark.parametrize(
    "unit",
    ["a-2025-03-01.-", "gpt-4o-2024-08-06.", "e\u0301", "March 3 "],
    ids=["dates-in-one-id-run", "model-ids", "accents", "year-less"],
)
def test_twice_the_text_is_read_about_twice(unit: str) -> None:
    once = _reads(unit * (20_000 // len(unit)))
    twice = _reads(unit * (40_000 // len(unit)))
    assert twice <= 2.2 * once + 100


def test_no_run_of_marks_is_normalised_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython's NFC sorts a run of marks out of their order in quadratic time (40,000 of
    them: 1.2 s): the unicode rule asks NFC to write a few dozen characters at most."""
    import unicodedata

    longest = []
    normalize = unicodedata.normalize

    def measured(form: Any, text: str) -> str:
        longest.append(len(text))
        return normalize(form, text)

    monkeypatch.setattr(unicodedata, "normalize", measured)
    text = "e" + "\u0301\u0323" * 20_000 + "x\u1100\u1161"
    found = [w for w in lint_text(text) if w.rule == "unicode"]
    assert [len(w.text) for w in found] == [40_001, 2]
    assert 0 < max(longest) <= 32


def _steps(text: str) -> int:
    """The lines the random-id rule runs in lint.py (its generator expressions' included)."""
    steps = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal steps
        steps += event == "line"
        return local

    def call(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == lint.__file__ else None

    previous = sys.gettrace()  # (a coverage tool's: put back)
    sys.settrace(call)
    try:
        found = lint_text(text, ignore=[r for r in lint.RULES if r != "random-id"])
    finally:
        sys.settrace(previous)
    assert found
    assert all(w.rule == "random-id" for w in found)
    return steps


@pytest.mark.parametrize(
    "unit",
    [
        "id 123e4567-e89b-12d3-a456-426614174000 ",
        "key 0f1e2d3c4b5a69788796a5b4 ",
        "tok Zx9Qw8Er7Ty6Ui5Op4As3D ",
    ],
    ids=["uuids", "hex", "tokens"],
)
def test_twice_the_ids_take_about_twice_the_steps(unit: str) -> None:
    """Each id was checked against every id found before it (1,000 UUIDs: about 500,000
    comparisons); now against a mark per character."""
    once = _steps(unit * 150)
    twice = _steps(unit * 300)
    assert twice <= 2.2 * once + 100


def _random_ids_before(text: str) -> list[tuple[int, int]]:
    """The random-id rule's findings as it made them, each match compared with every one
    found before it."""
    taken: list[tuple[int, int]] = [m.span() for m in lint._UUID.finditer(text)]
    found = list(taken)
    for pattern in (lint._HEX, lint._TOKEN):
        for match in pattern.finditer(text):
            word = match.group()
            if any(s <= match.start() < e for s, e in taken):
                continue
            digits = sum(c.isdigit() for c in word)
            letters = sum(c.isalpha() for c in word)
            if pattern is lint._TOKEN and (digits < 3 or letters < 3 or lint._model_id(word)):
                continue
            if pattern is lint._HEX and (digits == 0 or letters == 0):
                continue
            taken.append(match.span())
            found.append(match.span())
    return sorted(found)


_UNITS = [
    "123e4567-e89b-12d3-a456-426614174000",
    "0f1e2d3c4b5a69788796a5b4",
    "Zx9Qw8Er7Ty6Ui5Op4As3D",
    "claude-3-5-sonnet-20241022",
    "-",
    "_",
    " ",
    "x",
    "7",
    "é",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_UNITS), max_size=12).map("".join))
def test_the_random_id_findings_are_as_before(text: str) -> None:
    found = lint_text(text, ignore=[r for r in lint.RULES if r != "random-id"])
    assert [(w.start, w.end) for w in found] == _random_ids_before(text)
