"""What ``Breakers`` remembers of the states it saw (``last_seen``, the transitions its hooks
get) is forgotten as the backend forgets an idle route: it kept an entry for every route it
last saw open or half-open for good (breakers keyed per tenant or host grew the process
without bound, and ``last_seen`` said ``open`` of a route the backend had long forgotten)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmguard_sdk.breaker import Breakers, BreakerTransition
from llmguard_sdk.breaker.memory import forget_after
from llmguard_sdk.errors import ProviderUnavailableError
from tests.conftest import RedisTarget
from tests.test_breaker import POLICY, Driven, drive

DOWN = ProviderUnavailableError("down", status_code=503)
IDLE = forget_after(POLICY)


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from drive(request.param, redis_target, POLICY)


def _trip(breakers: Breakers, route: str) -> None:
    for _ in range(POLICY.minimum_calls):
        breakers.record(route, DOWN, seconds=0.1)


def test_routes_seen_open_are_forgotten_with_the_backends_idle_routes(driven: Driven) -> None:
    transitions: list[BreakerTransition] = []
    breakers = Breakers(driven.backend, [transitions.append])
    for i in range(200):  # one breaker per tenant
        _trip(breakers, f"tenant-{i}")
    breakers.isolate("kept")
    assert breakers.last_seen("tenant-0") == "open"
    driven.advance(IDLE - 1)
    assert breakers.last_seen("tenant-0") == "open"  # not idle for long enough yet
    driven.advance(1)
    assert breakers.last_seen("tenant-0") == "closed"  # idle as long as the backend keeps it
    assert breakers.permit("other").allowed  # any call forgets what has expired
    assert len(breakers._seen) == 1  # only the isolated route: kept until reset
    assert breakers.last_seen("kept") == "isolated"
    driven.advance(3 * IDLE)
    assert breakers.permit("other").allowed
    assert breakers.last_seen("kept") == "isolated"
    del transitions[:]
    _trip(breakers, "fresh")
    assert transitions == [BreakerTransition("fresh", "closed", "open")]
    breakers.reset("kept")
    assert breakers.last_seen("kept") == "closed"
