"""Releases: how far a canary's stage is from its decision. ``status()`` (and ``llmguard release
status``) says the stage's ``min_calls`` and how many calls each arm still needs before the
stage can be promoted: at a few calls a minute a healthy candidate took weeks to promote
(1 % -> 5 % -> 25 %, 500 calls an arm each: 62,000 calls) and nothing said how far it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.cli import main
from llmguard_sdk.releases import CanaryPolicy, MemoryReleaseBackend, ReleaseControl
from llmguard_sdk.releases.stored import status_of
from llmguard_sdk.testing import FakeProvider

from .test_releases import _canary_guard, _traffic


@pytest.fixture
def pair() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        yield a, b


def _needed(status: dict[str, Any]) -> tuple[Any, Any]:
    return status["control"]["calls_needed"], status["candidate"]["calls_needed"]


def _part_way(guard: Guard, min_calls: int) -> tuple[ReleaseControl, dict[str, Any]]:
    """``guard``'s releases, and their status after 30 calls: each arm's ``calls_needed``
    is ``min_calls`` less the calls it served in the stage."""
    controls = guard.releases
    assert controls is not None
    controls.start_now()
    _traffic(guard, 30)
    controls.flush()
    status = controls.status()
    assert status["canary"]["min_calls"] == min_calls
    control, candidate = status["control"]["calls"], status["candidate"]["calls"]
    assert 0 < control < min_calls
    assert 0 < candidate < min_calls
    assert _needed(status) == (min_calls - control, min_calls - candidate)
    return controls, status


def test_status_says_how_many_calls_each_arm_still_needs(pair: Any) -> None:
    a, b = pair
    guard = _canary_guard(a, b, min_calls=40)  # stages 50 % -> 100 %, in memory
    try:
        controls, _ = _part_way(guard, 40)
        _traffic(guard, 90, start=100)  # both arms past 40: promoted
        assert controls.flush().status == "promoted"  # type: ignore[union-attr]
        status = controls.status()
        assert status["canary"]["status"] == "promoted"
        assert _needed(status) == (None, None)  # no stage to decide any more
    finally:
        guard.close()


def test_a_stage_whose_arms_served_min_calls_needs_none() -> None:
    """An arm past ``min_calls`` needs 0 (not a negative count), while the other waits."""
    backend = MemoryReleaseBackend()
    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=10)
    backend.exchange("bot", "bot@v2", 0, {}, {}, policy.stages, min_calls=10)
    backend.exchange("bot", "bot@v2", 1, {"calls": 25.0}, {"calls": 4.0}, min_calls=10)
    status = status_of(backend, "bot", CanaryPolicy())  # a reader that knows no min_calls
    assert status["canary"]["min_calls"] == 10  # the Guards' own, stored with the canary
    assert _needed(status) == (0, 6)


def test_the_cli_reports_the_calls_needed_by_the_guards_min_calls(
    pair: Any, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI knows no ``min_calls`` but the one its Guards stored with the canary (not its
    own default, 500): the same figures as ``guard.releases.status()``."""
    a, b = pair
    guard: Guard = _canary_guard(a, b, min_calls=40, store=redis_url, key_prefix=redis_prefix)
    where = ["bot", "--store", redis_url, "--prefix", redis_prefix]
    try:
        _, status = _part_way(guard, 40)
        capsys.readouterr()
        assert main(["release", "status", *where, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {**status, "release": None}
        assert main(["release", "status", *where]) == 0
        text = capsys.readouterr().out
        control, candidate = _needed(status)
        assert "calls needed" in text
        assert f"control    {status['control']['calls']:>8} {control:>8}" in text
        assert f"candidate  {status['candidate']['calls']:>8} {candidate:>8}" in text
    finally:
        guard.close()
