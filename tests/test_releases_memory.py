"""Releases: a canary kept in a process's memory is forgotten when the process ends, and each
process runs its own. A restart started a canary again at its first stage (a candidate already
promoted back at 1 % of the calls) without a word: a Guard that keeps its canary in memory
says so as it is built; one with a Redis store does not."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan, ShadowPolicy
from llmguard_sdk.testing import FakeProvider


def _plan(fake: FakeProvider, **policies: Any) -> ReleasePlan:
    current = OpenAICompatibleProvider(fake.base_url, model="m-2025-01-01", name="a")
    candidate = OpenAICompatibleProvider(fake.base_url, model="m-2025-02-01", name="b")
    return ReleasePlan(
        Release("bot", "v1", current), candidate=Release("bot", "v2", candidate), **policies
    )


def _said(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "memory" in r.getMessage() and "canary" in r.getMessage()]


def test_a_canary_kept_in_memory_is_said_to_be_forgotten_at_a_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeProvider(name="a") as fake, caplog.at_level(logging.INFO, logger="llmguard_sdk"):
        Guard(release=_plan(fake, canary=CanaryPolicy()), environ={}, telemetry=False).close()
    (record,) = _said(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "'bot'" in message
    assert "restart" in message
    assert "redis" in message.lower()


def test_no_word_of_memory_with_a_redis_store_or_without_a_canary(
    caplog: pytest.LogCaptureFixture, redis_url: str, redis_prefix: str
) -> None:
    with FakeProvider(name="a") as fake, caplog.at_level(logging.INFO, logger="llmguard_sdk"):
        plan = _plan(fake, canary=CanaryPolicy())
        Guard(release=plan, store=redis_url, key_prefix=redis_prefix, environ={}).close()
        shadowed = _plan(fake, shadow=ShadowPolicy())  # its shadow's Guard: memory, no canary
        Guard(release=shadowed, environ={}, telemetry=False).close()
    assert _said(caplog) == []
