"""The lint takes time linear in its text, checked without a clock: a text that counts how
often its characters are read is read about twice as often when it is twice as long (a model
id's date was checked by reading back to the start of its run of id characters: a run of
40,000 such characters was read again at each of its 2,858 dates, 4.8 s)."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk.prompts import lint_text


class _Counted(str):
    """A text that counts the characters read from it one at a time (slices count once)."""

    reads = 0

    def __getitem__(self, key: Any) -> str:
        type(self).reads += 1
        return super().__getitem__(key)


def _reads(text: str) -> int:
    counted = type("Counted", (_Counted,), {"reads": 0})
    lint_text(counted(text), ignore=["random-id"])
    return int(counted.reads)


@pytest.mark.parametrize(
    "unit",
    ["a-2025-03-01.-", "gpt-4o-2024-08-06.", "2025-03-01 "],
    ids=["dates-in-one-id-run", "model-ids", "dates"],
)
def test_twice_the_text_is_read_about_twice(unit: str) -> None:
    once = _reads(unit * (20_000 // len(unit)))
    twice = _reads(unit * (40_000 // len(unit)))
    assert twice <= 2.2 * once + 100
