"""A 429's pause (its Retry-After) is no open wait a background probe can end: the permit an
open breaker refuses with says so (``Permit.paused``), in memory and in a real Redis, and the
Guard starts no probe of a paused route (each probe was a request the provider had asked not
to get, outside the route's rate limit)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmguard_sdk.breaker import BreakerPolicy, Breakers, MemoryBreakerBackend
from llmguard_sdk.testing import FakeProvider, Fault
from tests.conftest import USER, RedisTarget
from tests.test_breaker import POLICY, Driven, drive
from tests.test_guard_breaker import Clock, MakeGuard


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from drive(request.param, redis_target, POLICY)


def test_a_refusal_during_a_429_pause_says_it_is_paused(driven: Driven) -> None:
    b = driven.backend
    assert b.record("r", "rate_limited", 30.0) == "open"
    refused = b.acquire("r")
    assert (refused.allowed, refused.state, refused.paused) == (False, "open", True)
    driven.advance(30.5)
    permit = b.acquire("r")  # the pause is over: the call itself is the probe
    assert (permit.allowed, permit.state, permit.paused) == (True, "half_open", False)
    assert b.record("r", "fail", probe=True) == "open"  # tripped by a failure: no pause
    tripped = b.acquire("r")
    assert (tripped.allowed, tripped.state, tripped.paused) == (False, "open", False)


def test_no_background_probe_of_a_route_paused_by_a_429(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()
    breakers = Breakers(MemoryBreakerBackend(BreakerPolicy(probe_every=0.001), clock=clock))
    guard = make_guard(fake, fake2, retry=None, breaker=breakers)
    fake.script(Fault(status=429, retry_after=30))
    assert guard.chat(USER).route == "backup"  # the 429 pauses the primary for 30 s
    prober = guard._stages.prober
    assert prober is not None
    for _ in range(5):
        clock.now += 5  # within the pause
        assert guard.chat(USER).route == "backup"
        for probe in list(prober._running):
            probe.join(10)
    assert fake.stats.requests == 1  # the 429 itself: no probe went to the paused route
    clock.now += 6  # the pause is over: the next call half-opens the breaker
    assert guard.chat(USER).route == "primary"
    assert fake.stats.requests == 2
