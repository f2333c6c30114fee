"""A provider's hints (``x-ratelimit-remaining-*``, a 429's pause) speak for its one-minute
window: a limit of a longer ``period`` (a daily quota) learns at most a minute's share of them.
They used to be learned over every limit's whole capacity, so one 429 of 1 s, or a low
per-minute counter, emptied a whole day's allowance. The same rule in memory and in Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.ratelimit.policy import CellState, learn
from llmguard_sdk.store import RedisStore

MINUTE, DAY = RateLimit(rpm=600), RateLimit(rpm=100_000, period=86_400)


@pytest.fixture(params=["memory", "redis"])
def limiter(
    request: pytest.FixtureRequest, redis_url: str, redis_prefix: str
) -> Iterator[tuple[Any, Callable[[float], None]]]:
    """A limiter of route "p" (a per-minute and a daily limit) and a way to move its clock."""
    limits: dict[str, RateLimit | list[RateLimit]] = {"p": [MINUTE, DAY], "day": DAY}
    if request.param == "memory":
        now = [1000.0]

        def move(seconds: float) -> None:
            now[0] += seconds

        yield MemoryRateLimiter(limits, clock=lambda: now[0]), move
        return
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    shared = RedisRateLimiter(store, limits)

    def shift(seconds: float) -> None:
        shared.clock_offset += seconds

    yield shared, shift
    store.close()


def _burst(limiter: Any, key: str, most: int) -> int:
    granted = 0
    while granted < most and limiter.reserve(key).allowed:
        granted += 1
    return granted


@pytest.mark.parametrize(
    "taught", [{"pause": 1.0}, {"remaining_requests": 5}, {"pause": 30.0, "remaining_requests": 0}]
)
def test_a_minute_s_hint_leaves_a_daily_quota_its_day(
    limiter: tuple[Any, Callable[[float], None]], taught: dict[str, float]
) -> None:
    rl, advance = limiter
    assert _burst(rl, "p", 3) == 3
    rl.learn("p", **taught)
    advance(120)  # the provider's minute has long reset
    # the minute limit's whole burst (and in Redis what its real clock refilled meanwhile):
    # the day has room (it had 137 requests left of its 100,000)
    assert 600 <= _burst(rl, "p", 700) < 700
    rl.learn("day", **taught)  # a route with the daily limit alone
    advance(taught.get("pause", 0.0) + 1.0)  # (a pause holds its calls until it ends)
    assert _burst(rl, "day", 1000) == 1000  # (it had none: the whole day's allowance gone)


def test_a_pause_still_blocks_the_minute_limit_for_the_pause(
    limiter: tuple[Any, Callable[[float], None]],
) -> None:
    rl, advance = limiter
    rl.learn("p", pause=5.0)
    refused = rl.reserve("p")
    assert not refused.allowed
    assert 5.0 <= refused.retry_after <= 5.2  # the minute limit: the pause, then its rate
    advance(5.2)
    assert rl.reserve("p").allowed


def test_a_pause_holds_a_daily_quota_for_the_pause_at_no_cost(
    limiter: tuple[Any, Callable[[float], None]],
) -> None:
    """A route whose only limit is a daily quota let calls through a 429's pause (learned
    as a minute's share of the day, it blocked nothing): the pause holds them, a call that
    may wait is told to wait it out, and it costs the day nothing."""
    rl, advance = limiter
    rl.learn("day", pause=30.0)
    refused = rl.reserve("day")  # (the limit's max_wait: 0)
    assert (refused.allowed, refused.reason) == (False, "rate")
    assert 29.0 <= refused.retry_after <= 30.0
    rl.learn("day", pause=1.0)  # a shorter pause does not shorten it
    advance(20.0)
    assert not rl.reserve("day").allowed
    advance(10.5)
    assert _burst(rl, "day", 1000) == 1000


def test_a_call_that_may_wait_is_told_to_wait_the_pause_out() -> None:
    now = [1000.0]
    limits = {"day": RateLimit(rpm=100_000, period=86_400, max_wait=60.0)}
    rl = MemoryRateLimiter(limits, clock=lambda: now[0])
    rl.learn("day", pause=20.0)
    grant = rl.reserve("day", max_wait=30.0)  # (its deadline leaves it 30 s)
    assert grant.allowed
    assert grant.wait == pytest.approx(20.0)
    short = rl.reserve("day", max_wait=10.0)  # the pause outlasts its deadline: at once
    assert (short.allowed, short.reason) == (False, "rate")


@pytest.mark.parametrize(
    ("limit", "taught", "ahead"),
    [
        (MINUTE, {"pause": 5.0}, 65.0),  # a minute limit: as before, the pause then its rate
        (MINUTE, {"remaining_requests": 100}, 50.0),  # 100 left of its 600
        (RateLimit(rpm=100, burst=0.5), {"pause": 5.0}, 35.0),  # its whole capacity
        (DAY, {"pause": 30.0, "remaining_requests": 0}, 90.0),  # a minute's share + the pause
        (DAY, {"remaining_requests": 5}, 60.0 - 5 * 0.864),
        (RateLimit(rpm=1000, period=3600), {"pause": 3600.0}, 3660.0),  # the hour's share
    ],
)
def test_the_tat_learned_is_at_most_the_hint_s_minute_and_pause(
    limit: RateLimit, taught: dict[str, float], ahead: float
) -> None:
    learned = learn(CellState(), 1000.0, limit, **taught)
    assert learned.tats[0] == pytest.approx(1000.0 + ahead)
