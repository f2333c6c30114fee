"""A 429 is a pause for its Retry-After, never a breaker failure (README, Circuit breakers),
also when the wait it gives is none: ``Retry-After: 0``, a Retry-After date in the past,
``retry-after-ms: 0``, ``x-ratelimit-reset-requests: 0``. Those counted as failures (a
"no wait given" branch took 0 for absent): in closed state four such 429s opened the
breaker, and one answering a half-open probe reopened it for twice the open time. A 429
with no wait hint at all still counts as a failure, as the README says. In memory and in a
real Redis, through a Guard over FakeProviders on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.breaker import BreakerPolicy, Breakers
from llmguard_sdk.testing import FakeProvider, Fault
from tests.conftest import USER, RedisTarget
from tests.test_breaker import Driven, drive
from tests.test_guard_breaker import MakeGuard

POLICY = BreakerPolicy(
    window=10, minimum_calls=4, failure_rate=0.5, open_seconds=10, probe_every=None
)
NO_WAIT = {
    "retry-after-0": Fault(status=429, retry_after=0),
    "retry-after-past-date": Fault(status=429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"),
    "retry-after-ms-0": Fault(status=429, retry_after_ms=0),
    "ratelimit-reset-0": Fault(status=429, headers={"x-ratelimit-reset-requests": "0"}),
}


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from drive(request.param, redis_target, POLICY)


@pytest.fixture
def guard(driven: Driven, fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard) -> Guard:
    """A Guard over ``fake`` (the primary) and ``fake2`` (the backup), no retries, its
    breakers on the ``driven`` backend."""
    return make_guard(fake, fake2, retry=None, breaker=Breakers(driven.backend))


def _primary(guard: Guard) -> str:
    """The state of the primary's breaker."""
    assert guard.breakers is not None
    return guard.breakers.state("primary")


@pytest.mark.parametrize("fault", NO_WAIT.values(), ids=NO_WAIT.keys())
def test_429s_with_no_wait_do_not_open_a_closed_breaker(
    fault: Fault, fake: FakeProvider, guard: Guard
) -> None:
    fake.always(fault)
    for _ in range(8):
        assert guard.chat(USER).route == "backup"
    assert _primary(guard) == "closed"  # (was open after the 4th)
    assert fake.stats.requests == 8  # (was 4: the breaker refused the rest)


@pytest.mark.parametrize("fault", NO_WAIT.values(), ids=NO_WAIT.keys())
def test_a_429_with_no_wait_does_not_reopen_a_half_open_breaker(
    fault: Fault, driven: Driven, fake: FakeProvider, guard: Guard
) -> None:
    fake.script(*[Fault(status=503)] * 4, fault)
    for _ in range(4):
        assert guard.chat(USER).route == "backup"
    assert _primary(guard) == "open"
    driven.advance(10.5)
    assert guard.chat(USER).route == "backup"  # the probe got the 429
    assert fake.stats.requests == 5
    assert _primary(guard) == "half_open"  # (was open again, for 20 s)
    for _ in range(2):  # its probe permit came back: the next probes go and close it
        assert guard.chat(USER).route == "primary"
    assert _primary(guard) == "closed"


def test_a_429_without_any_wait_hint_still_counts_as_a_failure(
    fake: FakeProvider, guard: Guard
) -> None:
    fake.always(Fault(status=429))
    for _ in range(8):
        assert guard.chat(USER).route == "backup"
    assert _primary(guard) == "open"
    assert fake.stats.requests == 4
