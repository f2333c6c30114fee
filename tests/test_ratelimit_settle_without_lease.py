"""A settle without a ``lease`` goes to Redis only where it changes something: a route whose
limits meter none of what it corrects (tokens settled on a route limited by requests alone,
whose grants name no lease) is left alone. Such a settle used to run the settle script
anyway, a round trip that changed nothing: each standalone ``settle(key, token_delta=...,
lease=grant.lease)`` of an ``rpm``-only route (the README's pattern), and each Guard call's
rate-limit settle on one."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from roundtrips import RoundTrips

pytestmark = pytest.mark.redis

LIMITS: dict[str, RateLimit | list[RateLimit]] = {
    "requests": RateLimit(rpm=600),
    "tenants": [RateLimit(rpm=600), RateLimit(rpm=60, per_tenant=True)],
    "tokens": RateLimit(rpm=600, tpm=10_000),
}


def test_a_settle_that_changes_nothing_makes_no_round_trip(
    redis_url: str, redis_prefix: str
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    limiter = RedisRateLimiter(store, LIMITS)
    try:
        for key in ("requests", "tenants"):
            grant = limiter.reserve(key, tenant="acme", tokens=100)
            assert grant.allowed
            assert grant.lease is None  # (no concurrency, no token limit: nothing to give back)
            with RoundTrips() as counted:
                limiter.settle(key, tenant="acme", token_delta=-40, lease=grant.lease)
                limiter.settle(key, tenant="acme", input_delta=5, output_delta=-60)
            assert counted.round_trips == 0, key
        # what does change a limit still goes to Redis
        with RoundTrips() as counted:
            limiter.settle("requests", request_delta=-1.0)
        assert counted.round_trips == 1
        grant = limiter.reserve("tokens", tokens=10_000)
        assert grant.allowed
        assert grant.lease is not None
        assert not limiter.reserve("tokens", tokens=1_000).allowed
        with RoundTrips() as counted:
            limiter.settle("tokens", token_delta=-5_000)  # (its lease lapses on its own)
        assert counted.round_trips == 1
        assert limiter.reserve("tokens", tokens=1_000).allowed  # the refund reached Redis
    finally:
        store.close()


def test_a_guard_call_on_a_route_limited_by_requests_settles_nothing_in_redis(
    fake: FakeProvider, make_guard: Callable[..., Guard], redis_url: str, redis_prefix: str
) -> None:
    guard = make_guard(
        fake, store=redis_url, key_prefix=redis_prefix, rate_limits={"primary": LIMITS["requests"]}
    )
    ask = [{"role": "user", "content": "hello"}]
    for _ in range(2):  # scripts loaded
        guard.chat(ask, max_tokens=8)
    with RoundTrips() as counted:
        assert guard.chat(ask, max_tokens=8).route == "primary"
    # rate-limit reserve and breaker permit; breaker record and retry-budget count (no
    # rate-limit settle: the route's limit meters requests alone, and the call was sent)
    assert (counted.round_trips, counted.commands) == (2, 4)
