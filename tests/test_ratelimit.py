"""Rate limits: GCRA maths with an injected clock, the memory limiter, and the Guard stage."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import pytest

from llmguard_sdk import ConfigurationError, Guard, RateLimitExceededError
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit, reserve, settle
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

MakeGuard = Callable[..., Guard]


def test_a_full_burst_then_one_request_per_interval() -> None:
    limit = RateLimit(rpm=60)
    tats, granted = (0.0, 0.0), 0
    for _ in range(61):
        grant, tats = reserve(tats, 100.0, limit)
        granted += grant.allowed
    assert granted == 60
    refused, tats = reserve(tats, 100.0, limit)
    assert not refused.allowed
    assert refused.retry_after == pytest.approx(1.0)
    later, tats = reserve(tats, 101.0, limit)
    assert later.allowed


def test_tokens_are_reserved_and_settled() -> None:
    limit = RateLimit(tpm=3000)
    tats = (0.0, 0.0)
    for _ in range(3):
        grant, tats = reserve(tats, 0.0, limit, tokens=1000)
        assert grant.allowed
    refused, _ = reserve(tats, 0.0, limit, tokens=1000)
    assert not refused.allowed
    tats = settle(tats, 0.0, limit, token_delta=-900)  # the call used 100, not 1000
    grant, tats = reserve(tats, 0.0, limit, tokens=800)
    assert grant.allowed
    assert reserve(tats, 0.0, limit, tokens=5000)[0].retry_after == math.inf  # never fits


def test_requests_and_tokens_are_all_or_nothing() -> None:
    limit = RateLimit(rpm=100, tpm=1000)
    tats = (0.0, 0.0)
    grant, tats = reserve(tats, 0.0, limit, tokens=1000)
    assert grant.allowed
    refused, after = reserve(tats, 0.0, limit, tokens=10)
    assert not refused.allowed
    assert after == tats  # the request was not taken either


def test_concurrent_reservations_never_exceed_the_limit() -> None:
    limiter = MemoryRateLimiter({"r": RateLimit(rpm=100)}, clock=lambda: 0.0)
    granted: list[bool] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(50):
            granted.append(limiter.reserve("r").allowed)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sum(granted) == 100


@pytest.mark.parametrize("bad", [{}, {"rpm": 0}, {"tpm": -1}, {"rpm": 1, "period": 0}])
def test_bad_limits(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RateLimit(**bad)


def test_a_route_without_room_is_skipped_at_once(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, rate_limits={"primary": RateLimit(rpm=2)})
    routes = [guard.chat(USER).route for _ in range(4)]
    assert routes == ["primary", "primary", "backup", "backup"]
    assert fake.stats.requests == 2  # the provider never saw the calls over the limit


def test_a_single_limited_route_refuses_with_retry_after(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=1)})
    guard.chat(USER)
    with pytest.raises(RateLimitExceededError) as info:
        guard.chat(USER)
    assert info.value.retry_after is not None
    assert 50 < info.value.retry_after <= 60


def test_settling_returns_unused_tokens(fake: FakeProvider, make_guard: MakeGuard) -> None:
    # Each call reserves its input plus max_tokens=100 (over 100 tokens) but uses about 15:
    # without settling, the third call would find no room in 250 tokens.
    guard = make_guard(fake, rate_limits={"primary": RateLimit(tpm=250)})
    for _ in range(5):
        assert guard.chat(USER, max_tokens=100).route == "primary"
