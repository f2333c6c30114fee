"""A canary's evidence is per stage: each call (and its feedback) counts toward the stage it was
served at, the share its arm was chosen by. Counters were sent with the stage read at flush time,
so a call served at the previous share, or a low score given once the stage moved on, counted
toward the next stage's evidence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.releases import CanaryPolicy, Release, ReleaseControl, ReleasePlan
from llmguard_sdk.testing import FakeProvider

from .test_releases_feedback_once import USER, store, users

__all__ = ["store"]  # (the fixture: memory and Redis)


def _guard(a: FakeProvider, b: FakeProvider, store: dict[str, Any]) -> Guard:
    current = Release(
        "bot", "v1", OpenAICompatibleProvider(a.base_url, model="fake-a-2025-01-01", name="a")
    )
    candidate = Release(
        "bot", "v2", OpenAICompatibleProvider(b.base_url, model="fake-b-2025-02-01", name="b")
    )
    policy = CanaryPolicy(stages=(0.5, 0.9, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    return Guard(release=plan, environ={}, **store)


@pytest.fixture
def started(store: dict[str, Any]) -> Iterator[tuple[Guard, ReleaseControl]]:
    """A Guard over two FakeProviders (its release v1 on ``a``, the canary v2 on ``b``) and
    its release controls, the canary started (share 0.5); closed after the test."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        guard = _guard(a, b, store)
        try:
            controls = guard.releases
            assert controls is not None
            controls.start_now()
            yield guard, controls
        finally:
            guard.close()


def test_feedback_for_a_call_of_the_stage_before_counts_toward_none_after_it(
    started: tuple[Guard, ReleaseControl],
) -> None:
    guard, controls = started
    answer = guard.chat(USER, user=users(True, 1)[0])
    assert answer.route == "b"  # a canary call at share 0.5
    controls.flush()
    assert controls.promote().index == 1  # share 0.9: its evidence starts afresh
    counted = controls.feedback(answer.metadata["call_id"], 0.0)
    controls.flush()
    status = controls.status()
    assert counted is False  # (was True)
    assert status["candidate"]["feedback_scores"] == 0  # (was 1)
    assert status["candidate"]["low_feedback"] == 0  # (was 1)


def test_a_call_served_at_the_stage_before_counts_toward_none_after_it(
    started: tuple[Guard, ReleaseControl],
) -> None:
    guard, controls = started
    stream = guard.chat(USER, user=users(True, 1)[0], stream=True)
    first = next(iter(stream))  # its arm chosen at share 0.5
    assert controls.promote().index == 1  # share 0.9, while the call goes on
    rest = list(stream)
    controls.flush()
    status = controls.status()
    assert first is not None
    assert rest
    assert status["candidate"]["calls"] == 0  # (was 1: the call counted at share 0.9)
