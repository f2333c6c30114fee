"""Replacing a key's limits on a limiter in use: ``set_limits`` (``limits`` is read-only).

``limiter.limits[key] = new`` was half applied: the memory limiter kept the old limit's cells
(the new limit never applied), both kept the old wait bound and whether calls are named (a
new concurrency cap handed out no lease), and the Redis limiter's per-process fallback kept
the old limit. Memory limiter (real clock) and a real Redis, the same cases.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.ratelimit import LimitsConfig, MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisStore
from tests import test_ratelimit_waiters

Make = Callable[[LimitsConfig], Any]
make = test_ratelimit_waiters.make  # the fixture: a memory limiter, then a Redis one


def test_limits_are_read_only_and_say_what_replaces_them(make: Make) -> None:
    limiter = make({"r": RateLimit(rpm=1, batch_headroom=0)})
    with pytest.raises(ConfigurationError, match=r"read-only: limiter\.set_limits\('r', "):
        limiter.limits["r"] = (RateLimit(rpm=100),)
    with pytest.raises(ConfigurationError, match=r"limiter\.set_limits\('r', "):
        del limiter.limits["r"]
    assert limiter.limits == {"r": (RateLimit(rpm=1, batch_headroom=0),)}
    with pytest.raises(ConfigurationError, match=r"rate_limits\['r'\] must be a RateLimit"):
        limiter.set_limits("r", 5)  # checked as the limiter's own limits are
    with pytest.raises(ConfigurationError, match="no call ever fits"):
        limiter.set_limits("r", RateLimit(rpm=0.5))
    assert limiter.limits["r"] == (RateLimit(rpm=1, batch_headroom=0),)  # (left as it was)


def test_a_replaced_limit_applies_at_once(make: Make) -> None:
    """The memory limiter kept the old limit's cells: a route raised from rpm=1 to rpm=100
    still refused its second call for a minute."""
    limiter = make({"r": RateLimit(rpm=1, batch_headroom=0)})
    assert limiter.reserve("r").allowed
    assert limiter.reserve("r").reason == "rate"
    limiter.set_limits("r", RateLimit(rpm=100))  # meters otherwise: a state of its own
    assert [limiter.reserve("r").allowed for _ in range(100)] == [True] * 100
    assert limiter.reserve("r").reason == "rate"  # and it is the new limit that holds


def test_a_limit_replaced_by_one_that_meters_the_same_keeps_its_state(make: Make) -> None:
    """Only the wait changed: the calls already let through still count, and the new wait
    bound applies (the limiters kept the old one: a call was refused instead of waiting)."""
    limiter = make({"r": RateLimit(rpm=2, max_wait=0)})
    assert [limiter.reserve("r").allowed for _ in range(3)] == [True, True, False]
    limiter.set_limits("r", RateLimit(rpm=2.0, max_wait=60))
    grant = limiter.reserve("r")
    assert grant.allowed
    assert 25 < grant.wait <= 30.01  # the next slot, half a minute on: the state was kept


def test_a_concurrency_cap_set_later_hands_out_leases(make: Make) -> None:
    """A key given a concurrency cap by replacement reserved without a lease in memory (its
    calls were not named), so the cap never counted them."""
    limiter = make({"r": RateLimit(rpm=100)})
    limiter.set_limits("r", RateLimit(rpm=100, concurrency=1))
    held = limiter.reserve("r")
    assert held.allowed
    assert held.lease
    assert limiter.reserve("r").reason == "concurrency"
    limiter.release("r", lease=held.lease)
    assert limiter.reserve("r").allowed


def test_calls_in_flight_still_count_against_a_replaced_cap(make: Make) -> None:
    """The new limit meters otherwise (its TATs start afresh) but the calls holding a slot
    are still in flight, in memory as in Redis (where the leases are the route's)."""
    limiter = make({"r": RateLimit(rpm=60, concurrency=1)})
    held = limiter.reserve("r")
    assert held.allowed
    limiter.set_limits("r", RateLimit(rpm=30, concurrency=1))
    assert limiter.reserve("r").reason == "concurrency"
    limiter.set_limits("r", RateLimit(rpm=30, concurrency=2))  # a larger cap: room at once
    second = limiter.reserve("r")
    assert second.allowed
    limiter.release("r", lease=held.lease)
    limiter.release("r", lease=second.lease)
    assert limiter.in_flight("r") == 0


def test_a_replaced_wait_bounds_the_wait_for_a_slot(make: Make) -> None:
    """The memory limiter kept the wait bound worked out from the old limits (none): a call
    allowed to wait 0.3 s for a slot was refused at once."""
    limiter = make({"r": RateLimit(concurrency=1)})
    held = limiter.reserve("r")
    assert held.allowed
    limiter.set_limits("r", RateLimit(concurrency=1, max_wait=0.3))
    started = time.monotonic()
    grant = limiter.reserve("r")
    assert (grant.allowed, grant.reason) == (False, "concurrency")
    assert time.monotonic() - started >= 0.25
    limiter.release("r", lease=held.lease)


def test_a_key_given_limits_later_is_limited_and_not_warned_about(make: Make) -> None:
    limiter = make({"r": RateLimit(rpm=100)})
    limiter.set_limits(
        "new", [RateLimit(rpm=2), RateLimit(rpm=1, per_tenant=True, batch_headroom=0)]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not a key without limits (a misspelt one?)
        assert limiter.reserve("new", tenant="a").allowed
        assert limiter.reserve("new", tenant="a").reason == "rate"  # the tenant's limit
        assert limiter.reserve("new", tenant="b").allowed
        assert limiter.reserve("new", tenant="c").reason == "rate"  # the route's


def test_a_memory_limiters_cells_of_a_limit_no_longer_there_are_dropped() -> None:
    limiter = MemoryRateLimiter({"r": [RateLimit(rpm=10), RateLimit(rpm=5, per_tenant=True)]})
    for tenant in ("a", "b"):
        assert limiter.reserve("r", tenant=tenant).allowed
    assert len(limiter._cells) == 3  # the route's, and a cell per tenant
    limiter.set_limits("r", RateLimit(rpm=10))
    assert list(limiter._cells) == [("r", 0, None)]
    assert limiter.reserve("r").allowed


def test_the_redis_limiters_own_share_follows_a_replaced_limit() -> None:
    """While Redis is down each process limits on its own share: it kept the old limit's."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.2, local_share=0.25)
    try:
        limiter = RedisRateLimiter(store, {"r": RateLimit(rpm=4, batch_headroom=0)})
        assert limiter.reserve("r").allowed  # a quarter of rpm=4: one a minute
        assert limiter.reserve("r").reason == "rate"
        limiter.set_limits("r", RateLimit(rpm=400))  # a quarter: 100 a minute
        assert limiter.reserve("r").allowed
    finally:
        store.close()
