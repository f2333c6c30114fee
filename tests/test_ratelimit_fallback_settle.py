"""A reservation is settled where it was taken: one that a process's own share granted while
Redis was down is settled in that share, even once Redis is back, and one taken in Redis is
never settled into the share. The share's reservation used to be settled into Redis once it
answered again: its refund came off the shared state, which never counted it, and handed the
tokens other processes had reserved out again (the fleet overran the limit).

Redis goes away and comes back through a loopback proxy in front of the real one
(tests/test_store_replies.py's), whose connections can be reset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisStore

from .test_store_replies import FaultyProxy

pytestmark = pytest.mark.redis

LIMITS = {"r": RateLimit(tpm=10_000)}


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultyProxy]:
    server = FaultyProxy(urlsplit(redis_url).port or 6379)
    yield server
    server.close()


def _stores(redis_url: str, redis_prefix: str, proxy: FaultyProxy) -> tuple[RedisStore, RedisStore]:
    """(a store through ``proxy``, another process's straight to Redis)."""
    db = urlsplit(redis_url).path or "/0"
    through = RedisStore(
        f"redis://127.0.0.1:{proxy.port}{db}", key_prefix=redis_prefix, retry_pause=0.05
    )
    return through, RedisStore(redis_url, key_prefix=redis_prefix)


def _back(proxy: FaultyProxy, store: RedisStore) -> None:
    """Redis answers through ``proxy`` again, and ``store``'s breaker lets it be tried."""
    proxy.forget("", new_too=True)
    deadline = time.monotonic() + 5
    while not store.health.up() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_reservation_taken_in_an_outage_is_settled_in_the_share_once_redis_is_back(
    redis_url: str, redis_prefix: str, proxy: FaultyProxy
) -> None:
    through, other = _stores(redis_url, redis_prefix, proxy)
    a, b = RedisRateLimiter(through, LIMITS), RedisRateLimiter(other, LIMITS)
    try:
        assert b.reserve("r", tokens=9000).allowed  # another process, in Redis
        proxy.forget("reset", new_too=True)  # Redis is gone for a
        local = a.reserve("r", tokens=5000)  # its own share decides
        assert local.allowed
        assert local.lease  # named, so that its settle finds it
        _back(proxy, through)
        a.settle("r", token_delta=-4900, lease=local.lease)  # it used 100 tokens
        # 9,000 of the 10,000 are still reserved in Redis: the share's refund is not its
        assert not b.reserve("r", tokens=5000).allowed
        assert a.reserve("r", tokens=5000).reason == "rate"  # a, in Redis again, agrees
    finally:
        through.close()
        other.close()


def test_a_reservation_taken_in_redis_is_not_settled_into_the_share_in_an_outage(
    redis_url: str, redis_prefix: str, proxy: FaultyProxy
) -> None:
    through, other = _stores(redis_url, redis_prefix, proxy)
    limits = {"r": RateLimit(tpm=1000)}  # a quarter of it (the default share): 250 tokens
    a = RedisRateLimiter(through, limits)
    try:
        held = a.reserve("r", tokens=900)  # in Redis
        assert held.allowed
        proxy.forget("reset", new_too=True)
        assert a.reserve("r", tokens=250).allowed  # the share's whole burst
        a.settle("r", token_delta=-900, lease=held.lease)  # nothing of it is the share's
        assert not a.reserve("r", tokens=200).allowed  # the share is still spent
    finally:
        through.close()
        other.close()
