"""The lint's false positives: a scripture reference taken for a time of day, a model id for
a date or a random id, and an ISO timestamp's offset (or its time) reported a second time;
the true positives beside them are still found."""

from __future__ import annotations

import pytest

from llmguard_sdk.prompts import PromptBuilder, lint_text


def found(text: str) -> list[tuple[str, str]]:
    return [(w.rule, w.text) for w in lint_text(text, ignore=["whitespace"])]


@pytest.mark.parametrize(
    "text",
    [
        "Quote John 3:16 when asked about hope.",
        "Cite 1 Corinthians 13:4-7 and Psalm 23:1 and Genesis 12:10.",
        "The verse is Romans 8:28; see also Matt. 5:14 and Quran 2:255.",
        "Use claude-3-5-sonnet-20241022 for drafts.",
        "Route to claude-3-haiku-20240307, then claude-sonnet-4-20250514.",
        "Answer with gpt-4o-2024-08-06 or o1-2024-12-17 or gpt-4o-mini-2024-07-18.",
        "Fall back to meta-llama-3.1-70b-instruct or deepseek-r1-distill-llama-70b.",
    ],
)
def test_no_false_positive(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Generated 2025-03-01T14:05:00+00:00 for you.",
            [("timestamp", "2025-03-01T14:05:00+00:00")],
        ),
        ("Since 2025-03-01 14:05:00-05:30 only.", [("timestamp", "2025-03-01 14:05:00-05:30")]),
        ("Generated 2025-03-01T14:05:00Z.", [("timestamp", "2025-03-01T14:05:00Z")]),
    ],
)
def test_an_iso_timestamp_is_one_finding(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    ("text", "offender"),
    [
        ("Meet John at 3:16 pm.", "3:16 pm."),
        ("It is Monday 9:30 in Paris.", "9:30"),
        ("Open from 14:05 today.", "14:05"),
        ("John 9:30 pm is the slot.", "9:30 pm"),
        ("Offset +05:30 here.", "05:30"),
        ("Today is 2024-08-06.", "2024-08-06"),
        ("Read report-2025-03-01 first.", "2025-03-01"),
        ("Read log-2025-03-01.txt first.", "2025-03-01"),
        ("Job a8f3kd9x02lqmz7w3n5p is running.", "a8f3kd9x02lqmz7w3n5p"),
        ("Key 4f9a-12bc-88de-ff01-a9c3 today.", "4f9a-12bc-88de-ff01-a9c3"),
        ("Run claude-3-5-sonnet-k3j4h5g6f7d8s9 now.", "claude-3-5-sonnet-k3j4h5g6f7d8s9"),
        ("Session sess-18f3a9c2d7e4b6a1-x.", "sess-18f3a9c2d7e4b6a1-x"),
        ("Token tok-kQxZpLmN71-wErTyUiO42-abc.", "tok-kQxZpLmN71-wErTyUiO42-abc"),
    ],
)
def test_true_positives_are_kept(text: str, offender: str) -> None:
    assert offender in [t for _, t in found(text)]


def test_a_builder_with_a_model_id_and_a_verse_is_clean() -> None:
    b = PromptBuilder(
        "bible", instructions="Answer with claude-3-5-sonnet-20241022; cite John 3:16.", drift=None
    )
    assert b.lint() == []


@pytest.mark.parametrize("run", ["a-" * 100_000, " " * 200_000], ids=["hyphens", "spaces"])
def test_a_long_run_is_read_once(run: str) -> None:
    """A long run the e-mail or trailing-space pattern could start at anywhere (a hyphenated
    key, a space-padded block) was scanned again from each position: 4.5 s of CPU for 40,000
    characters, about two minutes for these 200,000."""
    found = lint_text(f"{run}x write to bob@example.com", section="system")
    assert "per-user" in [warning.rule for warning in found]  # (the address after the run)
