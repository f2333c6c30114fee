"""A full Redis connection pool, or a timeout on a blocked event loop, is this process's own
load, not Redis down: the decision that met it is made without Redis, but the store is not
paused (breakers, rate limits and the retry budget of every other call stay shared), and no
outage is logged. Real Redis (standalone and Cluster), FakeProvider on loopback."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

from llmguard_sdk import ConfigurationError, Guard, RedisStore
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.testing import FakeProvider
from tests.conftest import USER, RedisTarget, redis_store

OUTAGE = "Redis unavailable"
LOAD = "this process's own load"


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _limiter(store: RedisStore) -> RedisRateLimiter:
    return RedisRateLimiter(store, {"r": RateLimit(rpm=10**9)})


@pytest.mark.slow  # about 10 s on two cores
def test_two_thousand_async_calls_through_fifty_connections_are_no_redis_outage(
    fake: FakeProvider,
    redis_url: str,
    redis_prefix: str,
    make_guard: Callable[..., Guard],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """2,000 concurrent ``achat`` calls through one Guard on a store of 50 connections (the
    defaults), with breakers, the retry budget and a rate limit in Redis: callers beyond the
    pool waited their turn. It was read as Redis down ("No connection available.", and
    "Timeout connecting to server" on the loop the burst kept busy): every stage went local
    for a pause, with an outage logged."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    guard = make_guard(
        fake, store=store, rate_limits={fake.name: RateLimit(rpm=10**9)}, telemetry=False
    )
    routes: list[str] = []

    async def calls() -> None:
        async def one() -> None:
            routes.append((await guard.achat(USER)).route)

        async with anyio.create_task_group() as group:
            for _ in range(2000):
                group.start_soon(one)
        await guard.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        anyio.run(calls)
    assert routes == [fake.name] * 2000
    assert _logged(caplog, OUTAGE) == []
    assert (store.health.outages, store.health.failures) == (0, 0)
    assert guard.breakers is not None
    assert guard.breakers.state(fake.name) == "closed"
    for kind in ("cb", "rb"):  # the breakers and the retry budget: decided in Redis
        assert list(store.client.scan_iter(match=f"{redis_prefix}:{kind}:*")), kind


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_pool_whose_connections_are_all_taken_is_no_redis_outage(
    redis_url: str, redis_prefix: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every connection of the pool taken (by direct use of the client): a decision that
    finds none free in ``pool_timeout`` (here the URL's ``timeout``) is made without Redis,
    and Redis is not paused; the pool says ``MaxConnectionsError`` (redis-py: a bare "No
    connection available.", read as Redis down)."""
    store = RedisStore(f"{redis_url}?timeout=0.05", key_prefix=redis_prefix, max_connections=1)
    limiter = _limiter(store)

    async def async_side() -> None:
        pool = store.aclient.connection_pool
        taken = await pool.get_connection()
        try:
            with pytest.raises(MaxConnectionsError):
                await store.aclient.ping()
            await limiter.areserve("r")
        finally:
            await pool.release(taken)
        await limiter.areserve("r")  # (free again: in Redis)
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        if mode == "async":
            anyio.run(async_side)
        else:
            taken = store._pool.get_connection()
            try:
                assert store.ping() is False
                limiter.reserve("r")
            finally:
                store._pool.release(taken)
            limiter.reserve("r")
    assert (store.health.outages, store.health.crowded) == (0, 1)
    assert _logged(caplog, OUTAGE) == []
    assert len(_logged(caplog, LOAD)) == 1
    assert store.ping()
    store.close()


@pytest.mark.parametrize("kind", ["redis", "cluster"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_no_turn_for_a_round_trip_in_pool_timeout_is_no_redis_outage(
    redis_target: RedisTarget, kind: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's round trips take turns, at most ``max_connections`` at once (per node on
    a cluster); one that gets no turn in ``pool_timeout`` is decided without Redis, and the
    store is not paused: the same on a single Redis and a cluster, sync and async."""
    url, prefix = redis_target(kind)
    store = redis_store(url, prefix, max_connections=1, pool_timeout=0.05)
    limiter = _limiter(store)

    async def async_side() -> None:
        async with store.async_round_trip():  # the only turn, held
            await limiter.areserve("r")
        await limiter.areserve("r")
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        if mode == "async":
            anyio.run(async_side)
        else:
            with store.round_trip():
                limiter.reserve("r")
            limiter.reserve("r")
    assert (store.health.outages, store.health.crowded) == (0, 1)
    assert _logged(caplog, OUTAGE) == []
    assert [m for m in _logged(caplog, LOAD) if "pool_timeout (0.05 s)" in m]
    store.close()


def test_a_round_trip_whose_turn_came_after_redis_was_paused_is_not_sent(
    redis_url: str, redis_prefix: str
) -> None:
    """A round trip that waited its turn while another found Redis down is not sent: Redis
    is paused, so it is decided locally at once (a hung Redis costs one timeout per pause,
    not one per round trip that queued behind it)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    limiter = _limiter(store)
    with store.round_trip():
        store.health.failed()  # (what a failed round trip tells the store)
        outages = store.health.outages
        with pytest.raises(RedisConnectionError, match="paused"), store.round_trip():
            pass
    assert store.health.outages == outages == 1
    limiter.reserve("r")  # paused: local, no round trip
    store.close()


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_timeouts_on_a_blocked_event_loop_are_no_redis_outage(
    redis_target: RedisTarget, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A task that blocks the event loop (CPU work, a blocking call) past ``socket_timeout``
    while a Redis connection or reply is awaited: the timeout comes late, when the answer may
    have been there all along. It was read as Redis down (an outage, every stage local); it
    is this process's load: the decision is made without Redis, the store is not paused."""
    url, prefix = redis_target(kind)
    store = redis_store(url, prefix, socket_timeout=0.2)
    limiter = _limiter(store)

    async def main() -> None:
        done = anyio.Event()

        async def blocker() -> None:
            while not done.is_set():
                time.sleep(0.5)  # noqa: ASYNC251 (the point: no socket is read meanwhile)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            group.start_soon(blocker)
            for _ in range(3):
                await limiter.areserve("r")
            done.set()
        await limiter.areserve("r")  # (the loop runs again: in Redis)
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        anyio.run(main)
    assert store.health.outages == 0
    assert store.health.crowded >= 1
    assert _logged(caplog, OUTAGE) == []
    store.close()


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), 3601, "5", True])
def test_pool_timeout_must_be_a_bounded_positive_number(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="pool_timeout"):
        RedisStore("redis://127.0.0.1:1/0", pool_timeout=bad)  # type: ignore[arg-type]


def test_the_pool_timeout_is_the_keyword_or_the_urls_timeout(redis_url: str) -> None:
    """``pool_timeout`` (default 10 s) is the pools' wait and the turns' (the URL's
    ``timeout`` wins over it); it no longer follows ``socket_timeout``."""
    default = RedisStore(redis_url, socket_timeout=2.5)
    keyword = RedisStore(redis_url, pool_timeout=3)
    query = RedisStore(f"{redis_url}?timeout=4", pool_timeout=3)
    assert [s._pool.timeout for s in (default, keyword, query)] == [10, 3, 4]
    assert [s._turns.seconds for s in (default, keyword, query)] == [10, 3, 4]
