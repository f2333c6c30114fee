"""The lint's gaps: a date without its year (``March 3``, ``3 March``, ``Mon 12/05``), text not
in Unicode NFC form (the same words, other bytes) and U+2028/U+2029 line separators passed as
clean static text; each breaks a prefix cache the way the rules' other findings do."""

from __future__ import annotations

import unicodedata

import pytest

from llmguard_sdk import PromptLintError
from llmguard_sdk.prompts import RULES, PromptBuilder, lint_text


def found(text: str, rule: str) -> list[str]:
    return [w.text for w in lint_text(text) if w.rule == rule]


@pytest.mark.parametrize(
    ("text", "offender"),
    [
        ("Today is March 3.", "March 3"),
        ("Offer ends Dec 24th, so hurry.", "Dec 24th"),
        ("Sale until Sept. 30 only.", "Sept. 30"),
        ("Today is 3 March.", "3 March"),
        ("Due on the 21st of June.", "21st of June"),
        ("Today is Mon 12/05.", "Mon 12/05"),
        ("Open Friday, 3/7 from noon.", "Friday, 3/7"),
        ("Deliveries resume Monday, Jan 6.", "Jan 6"),
    ],
)
def test_a_date_without_its_year_is_a_timestamp(text: str, offender: str) -> None:
    assert found(text, "timestamp") == [offender]


@pytest.mark.parametrize(
    "text",
    [
        "Read Chapter 3 before answering.",
        "See Chapter 3 May be skipped by experts.",
        "Follow Section 2 March orders.",
        "May I help you? You may 3D-print parts.",
        "Scored 12/20 on the quiz; mix 1/2 cup of flour.",
        "Open Monday to Friday, 9 to 5.",
        "Marching 3 times is enough; the mar 3 typo stays.",
        "Use version 3 June-style headings.",
        "March 32 is no day; Mon 13/45 is none either.",
    ],
)
def test_no_false_positive(text: str) -> None:
    assert found(text, "timestamp") == []


def test_a_date_with_its_year_is_still_one_finding() -> None:
    assert found("As of March 3, 2025 and 3 March 2025 and Mon 12/05/2025.", "timestamp") == [
        "March 3, 2025",
        "3 March 2025",
        "12/05/2025",
    ]


def test_text_not_in_nfc_is_found_where_it_is() -> None:
    composed = "Café crème, Ångström, 한국"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed  # (other bytes, the same words)
    assert "unicode" in RULES
    assert found(composed, "unicode") == []
    hits = [w for w in lint_text(f"Say {decomposed}.") if w.rule == "unicode"]
    assert [w.text for w in hits] == [
        unicodedata.normalize("NFD", part) for part in ("é", "è", "Å", "ö", "한", "국")
    ]
    assert all(hit.message.startswith("text not in Unicode NFC form") for hit in hits)
    assert lint_text(f"Say {decomposed}.", ignore=["unicode"]) == []


@pytest.mark.parametrize(
    ("text", "offender"),
    [
        ("Use the \u212b unit.", "\u212b"),  # the angstrom sign: NFC makes it Å
        ("e\u0301 here", "e\u0301"),
        ("a\u0307\u0323 twice marked", "a\u0307\u0323"),  # marks out of their canonical order
        ("\u1100\u1161 jamo", "\u1100\u1161"),  # two starters NFC joins
    ],
)
def test_each_form_nfc_changes_is_found(text: str, offender: str) -> None:
    assert found(text, "unicode") == [offender]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_are_whitespace_findings(separator: str) -> None:
    assert found(f"One rule.{separator}Another rule.", "whitespace") == [separator]


def test_a_strict_builder_refuses_them() -> None:
    builder = PromptBuilder(
        "forms", instructions="Since March 3, say cafe\u0301.\u2028Bye.", strict=True, drift=None
    )
    with pytest.raises(PromptLintError) as refused:
        builder.build("hi")
    rules = sorted(w.rule for w in refused.value.warnings)
    assert rules == ["timestamp", "unicode", "whitespace"]


@pytest.mark.parametrize(
    ("text", "rule", "count"),
    [
        ("March " * 8_000, "timestamp", 0),
        ("March 3 " * 5_000, "timestamp", 5_000),
        ("Mon " + "1/" * 19_998, "timestamp", 0),
        ("e" + "\u0301\u0323" * 20_000, "unicode", 1),  # (NFC itself: quadratic on this run)
        ("e\u0301" * 20_000, "unicode", 20_000),
        ("a" + "\u2028a" * 20_000, "whitespace", 20_000),
    ],
    ids=["months", "dates", "slashes", "marks", "accents", "separators"],
)
def test_40000_characters_are_read_once(text: str, rule: str, count: int) -> None:
    """The new patterns match at most a few dozen characters each (tests/test_prompts_linear.py
    checks their bound), and the NFC check normalises no run of marks as a whole: the work is
    linear in the text, whatever it holds."""
    assert len(found(text, rule)) == count
