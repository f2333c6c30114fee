"""A lint finding says what to do: per-call values go in the prompt's tail (``context=``), and
``lint_ignore`` accepts a finding that is in fact the same on every call."""

from __future__ import annotations

import logging

import pytest

from llmguard_sdk import PromptBuilder, PromptLintError

INSTRUCTIONS = "Today is 2025-03-01. You help the customers of Globex Corp."


def test_a_strict_builder_says_where_the_per_call_values_go() -> None:
    builder = PromptBuilder("remedy", instructions=INSTRUCTIONS, strict=True, drift=None)
    with pytest.raises(PromptLintError) as refused:
        builder.build("q", tenant="Globex Corp")
    message = str(refused.value)
    assert "'2025-03-01'" in message  # what, and where, as before
    assert "build(context=...)" in message
    assert "lint_ignore=['per-user', 'timestamp']" in message


def test_a_lenient_builder_logs_the_same_advice(caplog: pytest.LogCaptureFixture) -> None:
    builder = PromptBuilder("remedy-log", instructions=INSTRUCTIONS, drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        builder.build("q")
    assert "build(context=...)" in caplog.text
    assert "lint_ignore=['timestamp']" in caplog.text
