"""Half-open probes: a probe permit whose outcome has not come back is presumed lost only
``open_seconds`` after the last probe permit was handed out (it was timed from when the
breaker half-opened, so a probe a second old was given a twin), and a probe that already
succeeded stays counted. Memory and a real Redis agree (time driven, never slept)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk.breaker import BreakerPolicy
from tests.conftest import RedisTarget
from tests.test_breaker import Driven, drive

POLICY = BreakerPolicy(minimum_calls=1, window=1, open_seconds=30, half_open_permits=2)


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from drive(request.param, redis_target, POLICY)


def _tripped(driven: Driven) -> Any:
    b = driven.backend
    permit = b.acquire("r")
    assert b.record("r", "fail", probe=permit.probe) == "open"  # open for 30 s
    return b


def test_a_probe_in_flight_is_not_presumed_lost_before_open_seconds(driven: Driven) -> None:
    b = _tripped(driven)
    driven.advance(31)
    first = b.acquire("r")  # half-opens: probe A
    assert (first.allowed, first.probe) == (True, True)
    driven.advance(0.5)
    assert b.record("r", "ok", probe=True) == "half_open"  # A succeeded: 1 of 2
    driven.advance(28.5)
    second = b.acquire("r")  # probe B, 29 s after half-opening
    assert (second.allowed, second.probe) == (True, True)
    driven.advance(1.1)  # 30.1 s after half-opening, B only 1.1 s old
    assert not b.acquire("r").allowed  # B's permit is still out: no third probe
    driven.advance(28)
    assert not b.acquire("r").allowed  # 29.1 s: B may still answer
    assert b.record("r", "ok", probe=True) == "closed"  # B and A: two successes close it


def test_a_lost_probe_frees_its_permit_but_keeps_the_successes(driven: Driven) -> None:
    b = _tripped(driven)
    driven.advance(31)
    assert b.acquire("r").allowed  # probe A
    assert b.record("r", "ok", probe=True) == "half_open"
    driven.advance(10)
    assert b.acquire("r").allowed  # probe B: its caller is cancelled, no outcome comes back
    driven.advance(29)
    assert not b.acquire("r").allowed
    driven.advance(1.5)  # B has gone open_seconds without an outcome: presumed lost
    third = b.acquire("r")
    assert (third.allowed, third.probe) == (True, True)
    assert not b.acquire("r").allowed  # one lost probe frees one permit, not two
    assert b.record("r", "ok", probe=True) == "closed"  # A's success still counts
