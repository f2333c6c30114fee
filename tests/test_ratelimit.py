"""Rate limits: GCRA maths with an injected clock, the memory limiter, and the Guard stage."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    RateLimitConfigWarning,
    RateLimitExceededError,
)
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.ratelimit.policy import reserve, settle
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider
from tests.conftest import RedisTarget, redis_store

from .conftest import USER

MakeGuard = Callable[..., Guard]


def test_a_full_burst_then_one_request_per_interval() -> None:
    limit = RateLimit(rpm=60)
    tats: tuple[float, ...] = (0.0, 0.0)
    granted = 0
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
    tats: tuple[float, ...] = (0.0, 0.0)
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
    tats: tuple[float, ...] = (0.0, 0.0)
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
def test_bad_limits(bad: dict[str, Any]) -> None:
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
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)})
    guard.chat(USER)
    with pytest.raises(RateLimitExceededError) as info:
        guard.chat(USER)
    assert info.value.retry_after is not None
    assert 50 < info.value.retry_after <= 60


def test_settling_returns_unused_tokens(fake: FakeProvider, make_guard: MakeGuard) -> None:
    # Each call reserves its input plus max_tokens=100 (over 100 tokens) but uses about 15:
    # without settling, the third call would find no room in 250 tokens.
    guard = make_guard(fake, rate_limits={"primary": RateLimit(tpm=250, reserve_output_tokens=100)})
    for _ in range(5):
        assert guard.chat(USER, max_tokens=100).route == "primary"


class Limiters:
    """The same limiter contract in memory (injected clock) or Redis (clock offset)."""

    def __init__(
        self, limiter: Any, advance: Callable[[float], None], store: RedisStore | None = None
    ) -> None:
        self.limiter, self.advance, self.store = limiter, advance, store

    async def aclose(self) -> None:
        """Close the store's async client on the running loop, before the loop ends (one
        left on a closed loop reports itself unclosed to the loop running when it is
        collected: another test's)."""
        if self.store is not None:
            await self.store.aclose()


@pytest.fixture(params=["memory", "redis", "cluster"])
def limiters(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Limiters]:
    limits = {"r": RateLimit(rpm=10, tpm=1000)}
    if request.param == "memory":
        now = [0.0]

        def move(seconds: float) -> None:
            now[0] += seconds

        yield Limiters(MemoryRateLimiter(limits, clock=lambda: now[0]), move)
        return
    store = redis_store(*redis_target(request.param))
    limiter = RedisRateLimiter(store, limits)

    def shift(seconds: float) -> None:
        limiter.clock_offset += seconds

    yield Limiters(limiter, shift, store)
    store.close()


def test_contract_a_misspelt_keyword_is_a_configuration_error(limiters: Limiters) -> None:
    limiter: Any = limiters.limiter
    with pytest.raises(ConfigurationError, match="tokns"):
        limiter.reserve("r", tokns=5)
    with pytest.raises(ConfigurationError, match="token_delt"):
        limiter.settle("r", token_delt=5)
    with pytest.raises(ConfigurationError, match="remaining_request"):
        limiter.learn("r", remaining_request=5)
    assert limiter.reserve("r", tokens=5).allowed  # nothing was taken by the refusals


def test_contract_limits_hold_and_refill(limiters: Limiters) -> None:
    limiter = limiters.limiter
    assert [limiter.reserve("r", tokens=10).allowed for _ in range(11)] == [True] * 10 + [False]
    refused = limiter.reserve("r", tokens=10)
    assert 5.9 < refused.retry_after <= 6.0  # one request every 6 s at 10 per minute
    limiters.advance(6.1)
    assert limiter.reserve("r", tokens=10).allowed
    with pytest.warns(RateLimitConfigWarning, match="'unlimited'"):  # (a misspelt key?)
        assert limiter.reserve("unlimited", tokens=10**9).allowed  # no limits: it passes


def test_contract_tokens_settle_and_all_or_nothing(limiters: Limiters) -> None:
    limiter = limiters.limiter
    assert limiter.reserve("r", tokens=900).allowed
    assert not limiter.reserve("r", tokens=200).allowed  # tokens short: no request taken
    limiter.settle("r", token_delta=-800)  # it used 100
    assert limiter.reserve("r", tokens=800).allowed
    assert limiter.reserve("r", tokens=5000).retry_after == math.inf


def test_contract_async_twins(limiters: Limiters) -> None:
    limiter = limiters.limiter

    async def run() -> list[bool]:
        grants = [(await limiter.areserve("r", tokens=400)).allowed for _ in range(3)]
        await limiter.asettle("r", token_delta=-400)
        grants.append((await limiter.areserve("r", tokens=400)).allowed)
        await limiters.aclose()
        return grants

    assert anyio.run(run) == [True, True, False, True]


def test_two_processes_share_one_redis_limit(redis_url: str, redis_prefix: str) -> None:
    limits = {"shared": RateLimit(rpm=6)}
    first = RedisRateLimiter(RedisStore(redis_url, key_prefix=redis_prefix), limits)
    second = RedisRateLimiter(RedisStore(redis_url, key_prefix=redis_prefix), limits)
    grants = [first.reserve("shared").allowed for _ in range(4)]
    grants += [second.reserve("shared").allowed for _ in range(4)]
    assert sum(grants) == 6


def test_the_guard_shares_limits_through_a_redis_store(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    def process() -> Guard:
        return Guard(
            OpenAICompatibleProvider(fake.base_url, model="m", name="primary"),
            store=redis_url,
            key_prefix=redis_prefix,
            rate_limits={"primary": RateLimit(rpm=3)},
            environ={},
        )

    first, second = process(), process()
    first.chat(USER)
    first.chat(USER)
    second.chat(USER)
    with pytest.raises(RateLimitExceededError):
        second.chat(USER)
    assert fake.stats.requests == 3
    first.close()
    second.close()


def test_streams_reserve_and_settle_too(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(
        fake, fake2, rate_limits={"primary": RateLimit(rpm=60, tpm=250, reserve_output_tokens=100)}
    )
    for _ in range(4):  # settled to ~15 tokens each: all fit in 250
        with guard.chat(USER, stream=True, max_tokens=100) as stream:
            list(stream)
        assert stream.response.route == "primary"
    limited = make_guard(fake, fake2, rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)})
    routes = []
    for _ in range(2):
        with limited.chat(USER, stream=True) as stream:
            list(stream)
        routes.append(stream.response.route)
    assert routes == ["primary", "backup"]


def test_waiting_takes_the_next_slot_in_arrival_order() -> None:
    limit = RateLimit(rpm=60, max_wait=2.5)
    tats: tuple[float, ...] = (0.0, 0.0)
    for _ in range(60):
        tats = reserve(tats, 0.0, limit)[1]
    waits = []
    for _ in range(2):
        grant, tats = reserve(tats, 0.0, limit)
        waits.append(grant.wait)
    assert waits == pytest.approx([1.0, 2.0])  # the next slots, one second apart
    refused, _ = reserve(tats, 0.0, limit)
    assert not refused.allowed  # a third would wait 3 s: the queue is as long as the wait bound
    assert refused.retry_after == pytest.approx(3.0)


def test_large_requests_are_not_starved_by_small_ones() -> None:
    limit = RateLimit(tpm=1000, max_wait=60)
    tats = reserve((0.0, 0.0), 0.0, limit, tokens=900)[1]
    big, tats = reserve(tats, 0.0, limit, tokens=800)
    small, tats = reserve(tats, 0.0, limit, tokens=10)
    assert big.allowed
    assert small.allowed
    assert big.wait > 0
    assert small.wait >= big.wait  # first come, first served, whatever the size


def test_batch_calls_leave_headroom_to_interactive_ones() -> None:
    limit = RateLimit(rpm=10, batch_headroom=0.2)
    tats: tuple[float, ...] = (0.0, 0.0)
    batch = 0
    for _ in range(10):
        grant, tats = reserve(tats, 0.0, limit, priority="batch")
        batch += grant.allowed
    interactive = 0
    for _ in range(10):
        grant, tats = reserve(tats, 0.0, limit)
        interactive += grant.allowed
    assert (batch, interactive) == (8, 2)


def test_contract_provider_counters_and_429s_bring_the_state_down(limiters: Limiters) -> None:
    limiter = limiters.limiter
    limiter.learn("r", remaining_requests=1)
    assert [limiter.reserve("r").allowed for _ in range(2)] == [True, False]
    limiters.advance(120)
    limiter.learn("r", pause=5)
    refused = limiter.reserve("r")
    assert not refused.allowed
    assert refused.retry_after >= 5


def test_contract_waiting(limiters: Limiters) -> None:
    limiter = limiters.limiter
    limiter.set_limits("w", RateLimit(rpm=60, max_wait=2.5))
    started = time.monotonic()
    for _ in range(60):
        assert limiter.reserve("w").allowed
    grant = limiter.reserve("w")
    took = time.monotonic() - started
    assert grant.allowed
    # The 61st request waits one interval (1 s) from the start of the burst: less the time
    # the 61 reservations took on the Redis clock (none on the memory limiter's frozen one),
    # which lies within what this process measured around them.
    assert 1.0 - took - 0.01 <= grant.wait <= 1.0 + 0.01
    assert not limiter.reserve("w", max_wait=0.5).allowed  # this caller cannot wait that long


def test_the_guard_waits_for_a_slot_within_the_deadline(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=2, period=1.0, max_wait=2)})
    started = time.monotonic()
    routes = [guard.chat(USER).route for _ in range(3)]
    assert routes == ["primary"] * 3
    assert time.monotonic() - started >= 0.4  # the third call waited for its slot


def test_the_guard_learns_from_the_providers_counters(make_guard: MakeGuard) -> None:
    with FakeProvider(name="primary", rpm=2) as strict:  # the provider allows 2 a minute
        guard = make_guard(strict, rate_limits={"primary": RateLimit(rpm=100)}, breaker=None)
        guard.chat(USER)
        guard.chat(USER)  # the provider says: 0 requests remaining
        with pytest.raises(RateLimitExceededError) as info:
            guard.chat(USER)
        assert strict.stats.rate_limited == 0  # refused here, not by a 429 over there
        # "0 remaining, resets in about 60 s": no room here until then either
        assert info.value.retry_after is not None
        assert info.value.retry_after > 50
