"""The lint and the context's rendering take time linear in their text, checked without a clock.

* A pattern whose matches (lookarounds included) span a bounded number of characters costs a
  bounded amount at each position: the text is read in linear time, whatever it holds. The
  patterns added for dates without a year, line separators and the context's tag are checked
  to be such patterns.
* The lint's own loops are counted: a text that counts how often its characters are read is
  read about twice as often when it is twice as long (a model id's date was checked by reading
  back to the start of its run of id characters: a run of 40,000 such characters was read
  again at each of its 2,858 dates, 4.8 s).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

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
