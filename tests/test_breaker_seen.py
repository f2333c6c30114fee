"""What ``Breakers`` remembers of the states it saw (``last_seen``, the transitions its hooks
get) is forgotten as the backend forgets an idle route: it kept an entry for every route it
last saw open or half-open for good (breakers keyed per tenant or host grew the process
without bound, and ``last_seen`` said ``open`` of a route the backend had long forgotten)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmguard_sdk.breaker import Breakers, BreakerTransition, MemoryBreakerBackend
from llmguard_sdk.breaker.memory import FORGET_PER_CALL, forget_after
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
    for _ in range(200 // FORGET_PER_CALL + 1):
        assert breakers.permit("other").allowed  # each call forgets a few that have expired
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


def test_a_route_forgotten_open_is_reported_closed(driven: Driven) -> None:
    """A route last seen open and then forgotten as idle (the backend closed it by forgetting
    it) is reported open -> closed to the hooks, once: they were left believing it open
    (and the transitions metric counted it open for good), though ``last_seen`` said closed."""
    transitions: list[BreakerTransition] = []
    breakers = Breakers(driven.backend, [transitions.append])
    _trip(breakers, "quiet")
    _trip(breakers, "back")
    breakers.isolate("kept")
    driven.advance(IDLE)
    del transitions[:]
    assert breakers.permit("other").allowed  # any call forgets the idle routes
    assert transitions == [
        BreakerTransition("quiet", "open", "closed"),
        BreakerTransition("back", "open", "closed"),
    ]
    driven.advance(IDLE)
    assert breakers.permit("other").allowed
    assert len(transitions) == 2  # told once; the isolated route stays isolated
    assert breakers.last_seen("kept") == "isolated"
    if _forgets(driven):  # (Redis's keys outlive the test's shifted clock)
        assert breakers.permit("back").state == "closed"
        assert len(transitions) == 2
        _trip(breakers, "quiet")
        assert transitions[-1] == BreakerTransition("quiet", "closed", "open")


def test_a_call_forgets_a_bounded_number_of_idle_routes(driven: Driven) -> None:
    """The routes that went idle together are forgotten a few a call, oldest first, not all
    by the call that finds them idle (20,000 routes: 10 to 20 ms on that one call's path, in
    ``Breakers`` and the memory backend each); the backlog drains as calls come, and a route
    of the backlog seen by its own call is forgotten then (reported as the others are)."""
    transitions: list[BreakerTransition] = []
    breakers = Breakers(driven.backend, [transitions.append])
    routes = [f"tenant-{i}" for i in range(5 * FORGET_PER_CALL)]
    for route in routes:
        _trip(breakers, route)
    driven.advance(IDLE)
    del transitions[:]
    assert breakers.permit("other").allowed
    assert len(breakers._seen) == len(routes) - FORGET_PER_CALL
    if _forgets(driven):
        assert len(driven.backend._states) == len(routes) - FORGET_PER_CALL
    assert [t.route for t in transitions] == routes[:FORGET_PER_CALL]  # the oldest first
    last = breakers.permit(routes[-1]).state  # its own call (Redis: still there, half-open)
    assert last == ("closed" if _forgets(driven) else "half_open")
    mine = [t for t in transitions if t.route == routes[-1]]  # forgotten, then as found
    assert mine == [BreakerTransition(routes[-1], "open", "closed")] + (
        [] if last == "closed" else [BreakerTransition(routes[-1], "closed", last)]
    )
    for _ in range(4):
        assert breakers.permit("other").allowed
    assert list(breakers._seen) == ([] if _forgets(driven) else [routes[-1]])
    forgotten = [t for t in transitions if t.route != routes[-1]]
    assert [t.route for t in forgotten] == routes[:-1]
    assert {(t.before, t.after) for t in forgotten} == {("open", "closed")}
    if _forgets(driven):
        assert not driven.backend._states
        assert breakers.permit(routes[0]).state == "closed"


def _forgets(driven: Driven) -> bool:
    """Whether ``driven``'s backend forgets idle routes on the test's clock (the memory
    backend; Redis expires its keys on its own)."""
    return isinstance(driven.backend, MemoryBreakerBackend)


def test_a_route_idle_here_found_open_again_is_reported_closed_then_open(
    driven: Driven,
) -> None:
    """A route idle here as long as the backend keeps one (``last_seen``: closed) that another
    process opened again was reported ``open -> closed`` then ``closed -> open`` when another
    call forgot it first, but nothing at all when its own call found it behind a backlog of
    idle routes not forgotten yet: the hooks' account hung on the order of the calls."""
    transitions: list[BreakerTransition] = []
    breakers = Breakers(driven.backend, [transitions.append])
    other = Breakers(driven.backend)  # another process's, on the same backend
    backlog = [f"tenant-{i}" for i in range(2 * FORGET_PER_CALL)]
    for route in [*backlog, "back"]:
        _trip(breakers, route)
    driven.advance(IDLE)
    assert breakers.last_seen("back") == "closed"
    _trip(other, "back")  # open again, for every process
    del transitions[:]
    assert breakers.state("back") == "open"  # its own call, the backlog not yet forgotten
    assert [t for t in transitions if t.route == "back"] == [
        BreakerTransition("back", "open", "closed"),
        BreakerTransition("back", "closed", "open"),
    ]
    assert breakers.last_seen("back") == "open"
