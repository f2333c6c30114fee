"""A canary counts one feedback score a call: the first. Every score counted as a trial of its
own, so one user pressing thumbs-down again and again on one canary answer (or a grader
retried) made as many low scores as presses, and rolled a healthy candidate back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan
from llmguard_sdk.releases.policy import in_canary
from llmguard_sdk.testing import FakeProvider

from .test_telemetry import Exported, otel

__all__ = ["otel"]  # (the fixture, used here)

USER = [{"role": "user", "content": "How long is the warranty?"}]


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "memory":
        yield {}
    else:
        yield {
            "store": request.getfixturevalue("redis_url"),
            "key_prefix": request.getfixturevalue("redis_prefix"),
        }


def _guard(a: FakeProvider, b: FakeProvider, store: dict[str, Any], otel: Exported) -> Guard:
    return Guard(release=plan(a, b), environ={}, telemetry=otel.telemetry, **store)


def plan(a: FakeProvider, b: FakeProvider) -> ReleasePlan:
    """v1 on ``a``, its candidate v2 on ``b`` in a canary of half the users (by ``users``)."""
    current = Release(
        "bot", "v1", OpenAICompatibleProvider(a.base_url, model="fake-a-2025-01-01", name="a")
    )
    candidate = Release(
        "bot", "v2", OpenAICompatibleProvider(b.base_url, model="fake-b-2025-02-01", name="b")
    )
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    return ReleasePlan(current, candidate=candidate, canary=policy)


def users(inside: bool, count: int) -> list[str]:
    users = (f"u{i}" for i in range(10_000))
    return [u for u in users if in_canary(f"bot:{u}", 0.5) == inside][:count]


def test_one_user_pressing_thumbs_down_again_and_again_rolls_nothing_back(
    store: dict[str, Any], otel: Exported
) -> None:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        guard = _guard(a, b, store, otel)
        try:
            controls = guard.releases
            assert controls is not None
            controls.start_now()
            for user in users(False, 40):  # forty content users of the current release
                answer = guard.chat(USER, user=user)
                assert controls.feedback(answer.metadata["call_id"], 1.0)
            answer = guard.chat(USER, user=users(True, 1)[0])
            assert answer.route == "b"  # a canary call
            counted = [controls.feedback(answer.metadata["call_id"], 0.0) for _ in range(20)]
            stage = controls.flush()
            status = controls.status()
        finally:
            guard.close()
    assert stage is not None
    assert stage.status == "canary"  # (it was rolled back: low_feedback breached, log LR 8.11)
    assert counted == [True] + [False] * 19  # the first score counts, the presses after not
    assert status["candidate"]["feedback_scores"] == 1
    assert status["candidate"]["low_feedback"] == 1
    assert status["control"]["feedback_scores"] == 40
