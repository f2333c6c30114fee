"""A provider's 429 with ``Retry-After`` pauses its route for that long whatever the route's
configured windows: the pause is not a quota. A route whose only limit is longer than a
minute (a daily quota), without a breaker, let every call through the pause (the hint was
learned as a minute's share of the day, which blocked nothing); the pause now holds them. A
call that cannot wait it out (the limit's ``max_wait``, bounded by its deadline) is refused
at once, without a request, or goes on to the next route."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.errors import RateLimitedError, RateLimitExceededError
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

DAY = RateLimit(rpm=100_000, period=86_400)


def _paused(
    make_guard: Callable[..., Guard], store: dict[str, str], limit: RateLimit, *fakes: FakeProvider
) -> Guard:
    """A Guard over ``fakes`` whose first route answered a 429 with a 30 s Retry-After."""
    options = {"retry": None, "breaker": None, "timeout": 5.0, **store}
    guard = make_guard(*fakes, rate_limits={fakes[0].name: limit}, **options)
    fakes[0].script(Fault(status=429, retry_after=30.0))
    with contextlib.suppress(RateLimitedError):  # (one route: its error; else the next's answer)
        guard.chat(USER)
    return guard


@pytest.fixture(params=["memory", "redis"], name="store")
def _store(request: pytest.FixtureRequest, redis_url: str, redis_prefix: str) -> dict[str, str]:
    return {"store": redis_url, "key_prefix": redis_prefix} if request.param == "redis" else {}


@pytest.mark.parametrize("limit", [DAY, RateLimit(rpm=100_000, period=86_400, max_wait=10.0)])
def test_a_call_that_cannot_wait_the_pause_is_refused_without_a_request(
    fake: FakeProvider, make_guard: Callable[..., Guard], store: dict[str, str], limit: RateLimit
) -> None:
    """The limit's max_wait (0), or the call's 5 s deadline, is shorter than the pause."""
    guard = _paused(make_guard, store, limit, fake)
    with pytest.raises(RateLimitExceededError) as refused:
        guard.chat(USER)
    assert refused.value.retry_after is not None
    assert refused.value.retry_after > 20.0
    assert fake.stats.requests == 1  # the 429 alone: nothing went out during the pause


def test_a_paused_route_sends_the_call_to_the_next_one(
    fake: FakeProvider, make_guard: Callable[..., Guard], store: dict[str, str]
) -> None:
    with FakeProvider(name="backup") as backup:
        guard = _paused(make_guard, store, DAY, fake, backup)
        assert [guard.chat(USER).route for _ in range(3)] == ["backup"] * 3
    assert (fake.stats.requests, backup.stats.requests) == (1, 4)  # (the 429's call: backup's)


def test_a_call_that_may_wait_goes_out_once_the_pause_ends(
    fake: FakeProvider, make_guard: Callable[..., Guard], store: dict[str, str]
) -> None:
    limit = RateLimit(rpm=100_000, period=86_400, max_wait=10.0)
    guard = make_guard(fake, rate_limits={"primary": limit}, retry=None, breaker=None, **store)
    fake.script(Fault(status=429, retry_after=0.3))
    with pytest.raises(RateLimitedError):
        guard.chat(USER)
    assert guard.chat(USER).route == "primary"  # held for the pause, then sent
    assert fake.stats.requests == 2
