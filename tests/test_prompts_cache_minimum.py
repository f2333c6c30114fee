"""A static part shorter than the least prefix a provider caches (OpenAI: 1,024 tokens; Claude:
1,024 to 4,096 by model) is never read from a cache, and nothing said so: the builder now
logs it once per static part, and ``min_cache_tokens`` sets the floor (``None``: no check)."""

from __future__ import annotations

import logging

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.prompts import Document, PromptBuilder

SHORT = "You are the support assistant of a bicycle shop. Answer briefly."
# about 4,000 tokens of distinct words (no repetition a tokenizer could fold)
MANUAL = " ".join(f"Rule {n}: wheel size {n} fits frame {n * 7 % 101}." for n in range(400))


def _said(caplog: pytest.LogCaptureFixture) -> int:
    return sum("caches at the least" in r.getMessage() for r in caplog.records)


def test_a_short_static_part_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    builder = PromptBuilder("short", instructions=SHORT, drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        for _ in range(3):
            builder.build("hi")
    assert _said(caplog) == 1
    message = next(
        r.getMessage() for r in caplog.records if "caches at the least" in r.getMessage()
    )
    assert "'short'" in message
    assert "1024" in message
    assert f"about {builder.static_tokens} tokens" in message
    assert 0 < builder.static_tokens < 1024


def test_a_long_static_part_is_not(caplog: pytest.LogCaptureFixture) -> None:
    builder = PromptBuilder("long", instructions=SHORT, documents=[Document(MANUAL)], drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        builder.build("hi")
    assert builder.static_tokens >= 1024
    assert _said(caplog) == 0


def test_the_floor_is_the_callers(caplog: pytest.LogCaptureFixture) -> None:
    docs = [Document(MANUAL[:3000])]  # about 1,000 tokens: enough for none of 4,096
    haiku = PromptBuilder("haiku", documents=docs, min_cache_tokens=4096, drift=None)
    quiet = PromptBuilder("quiet", instructions=SHORT, min_cache_tokens=None, drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        haiku.build("hi")
        quiet.build("hi")
    assert _said(caplog) == 1
    assert "4096" in caplog.text


def test_a_changed_static_part_is_measured_again(caplog: pytest.LogCaptureFixture) -> None:
    builder = PromptBuilder("grows", instructions=SHORT, drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        builder.build("hi")
        builder.set_documents([MANUAL]).build("hi")  # long enough now
        builder.set_documents([]).set_instructions(SHORT + " Be kind.").build("hi")
    assert _said(caplog) == 2


def test_no_static_part_and_strict_builders(caplog: pytest.LogCaptureFixture) -> None:
    strict = PromptBuilder("strict-short", instructions=SHORT, strict=True, drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        strict.build("hi")  # a short prompt is no error, and is said
        PromptBuilder("bare", drift=None).build("hi")  # nothing static: nothing to cache
    assert _said(caplog) == 1


@pytest.mark.parametrize("bad", [0, -5, True, 10.5, "1024"])
def test_a_bad_floor_is_a_configuration_error(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="min_cache_tokens"):
        PromptBuilder("bad", min_cache_tokens=bad, drift=None)  # type: ignore[arg-type]
