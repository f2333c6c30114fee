"""An async Redis round trip waits for Redis on its event loop's on-time clock: while this
process's event loop is busy (a burst of calls' own work), up to ten times the store's
timeouts, so a busy loop's lag is waited out. One that timed out all the same (the loop busy
past that) is this process's load, not Redis down: it is decided without Redis, but the
store is not paused and no outage is logged. A Redis that does not answer in time on a loop
that ran on time is still an outage. Real Redis; the loop is kept busy by a task that blocks
it, as a burst's CPU work does."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest
import redis

from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget.memory import HoldArgs
from llmguard_sdk.budget.policy import CounterSpec, ReserveResult
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisClusterStore, RedisStore
from tests.slowanswer import SlowAnswers

OUTAGE = "Redis unavailable"
# with socket_timeout=0.05, a fresh connection's bound is 0.1 s (a connection, then an
# answer) on the on-time clock: a loop busy for longer than ten times that times it out
PAST_THE_CAP = 1.3


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _work(seconds: float) -> None:
    """A burst's CPU work: nothing else on the event loop runs meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _limiter(store: RedisStore) -> RedisRateLimiter:
    """Every call granted by Redis holds a lease there: Redis's count says how many."""
    return RedisRateLimiter(store, {"r": RateLimit(rpm=10**9, concurrency=10_000)})


def test_a_connect_timeout_on_a_busy_event_loop_is_no_outage(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A round trip starts connecting, then another task keeps the loop busy past ten times
    the round trip's bound (the loop cannot read the socket, whose connection Redis had
    made): the timeout fires once the loop runs again. That decision is made without Redis (this
    process's share), but Redis is not paused: the next call reaches it. It was "Redis
    unavailable (Timeout connecting to server)" and every stage of the store paused."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, socket_timeout=0.05)
    limiter = _limiter(store)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        grants = _connecting_while_busy(store, limiter, PAST_THE_CAP)
    assert grants == [True, True]
    assert limiter.in_flight("r") == 1  # the first decided locally, the second in Redis
    assert (store.health.outages, store.health.failures, store.health.lagged) == (0, 0, 1)
    assert _logged(caplog, OUTAGE) == []
    warned = _logged(caplog, "event loop")
    assert len(warned) == 1
    store.close()


def _connecting_while_busy(
    store: RedisStore, limiter: RedisRateLimiter, seconds: float
) -> list[bool]:
    """A round trip starts connecting, then another task keeps the loop busy for ``seconds``;
    then a second round trip: whether each was granted."""
    grants: list[bool] = []

    async def granted() -> None:
        grants.append((await limiter.areserve("r")).allowed)

    async def busy_loop() -> None:
        _work(seconds)

    async def calls() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(granted)  # starts connecting first
            group.start_soon(busy_loop)
        await granted()
        await store.aclose()

    anyio.run(calls)
    return grants


def test_a_busy_event_loop_s_lag_is_waited_out(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A round trip starts connecting, then another task keeps the loop busy for four times
    the connect timeout (0.2 s), but less than ten times the round trip's bound: the round
    trip waits on the loop's on-time clock, which stood still meanwhile, so Redis decides
    it (it was decided without Redis, as load). Nothing is counted or logged."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, socket_timeout=0.05)
    limiter = _limiter(store)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        grants = _connecting_while_busy(store, limiter, 0.2)
    assert grants == [True, True]
    assert limiter.in_flight("r") == 2  # both decided in Redis
    assert (store.health.outages, store.health.lagged, store.health.exhausted) == (0, 0, 0)
    assert caplog.records == []
    store.close()


def test_a_redis_too_slow_on_an_idle_event_loop_is_an_outage(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis's answer held back past ``socket_timeout`` while the loop ran on time: an outage
    (the store paused, logged), as before."""
    with SlowAnswers(redis_url, b"EVALSHA", delay=1.0) as slow:
        store = RedisStore(slow.url, key_prefix=redis_prefix, socket_timeout=0.1)
        limiter = _limiter(store)

        async def call() -> None:
            assert (await limiter.areserve("r")).allowed  # (this process's share)
            await store.aclose()

        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            anyio.run(call)
        assert (store.health.outages, store.health.failures, store.health.lagged) == (1, 1, 0)
        assert len(_logged(caplog, OUTAGE)) == 1
        store.close()


def test_a_fail_closed_budget_refusing_for_a_busy_event_loop_says_so(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A fail-closed budget whose round trip timed out on a busy loop refuses that call,
    saying the event loop was too busy (not "Redis cannot be reached"); Redis is not paused,
    and the next reservation reaches it."""
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, socket_timeout=0.05, journal_dir=str(tmp_path)
    )
    backend = RedisBudgetBackend(store)
    spec = CounterSpec("global-x", 10**12, "day", 3600.0, (), "global", 0)
    results: list[ReserveResult] = []

    async def reserve(rid: str) -> None:
        hold = HoldArgs(base=1000, per_token=0.0, want=0, minimum=0, ttl=60.0)
        results.append(await backend.areserve(rid, [spec], **hold))

    async def busy_loop() -> None:
        _work(PAST_THE_CAP)

    async def calls() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(reserve, "call-1")  # starts connecting first
            group.start_soon(busy_loop)
        await reserve("call-2")
        await store.aclose()

    anyio.run(calls)
    refused, granted = results
    assert (refused.allowed, refused.unavailable) == (False, True)
    assert "event loop was too busy" in refused.detail
    assert refused.retry_after == 0.0
    assert granted.allowed
    assert (store.health.outages, store.health.failures, store.health.lagged) == (0, 0, 1)
    store.close()


def _masters(url: str) -> list[redis.Redis]:
    """A plain client of each node of the cluster at ``url`` (for admin commands)."""
    nodes = [node.rpartition(":") for node in urlsplit(url).netloc.split(",")]
    return [redis.Redis(host=host, port=int(port)) for host, _, port in nodes]


def test_a_cluster_too_slow_on_an_idle_event_loop_is_an_outage(
    redis_cluster_url: str, cluster_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The cluster's twin: its nodes hold every command back (``CLIENT PAUSE``) while the
    loop runs on time. A cluster store's waits for Redis are on the on-time clock, redis-py's
    own socket timeouts raised to ten times theirs meanwhile: the round trip is cut short
    after ``socket_timeout`` all the same (not ten times it), an outage (the store paused,
    logged) as before."""
    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix, socket_timeout=0.1)
    limiter = _limiter(store)
    masters = _masters(redis_cluster_url)
    took: list[float] = []

    async def calls() -> None:
        assert (await limiter.areserve("r")).allowed  # (the slot map, the connections)
        for master in masters:
            master.client_pause(1500, all=True)
        began = time.monotonic()
        assert (await limiter.areserve("r")).allowed  # (this process's share)
        took.append(time.monotonic() - began)
        await store.aclose()

    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            anyio.run(calls)
    finally:
        for master in masters:
            master.client_unpause()
            master.close()
    assert took[0] < 0.6  # (a socket_timeout, and a wait for its tick; ten times it: 1 s)
    assert (store.health.outages, store.health.failures, store.health.lagged) == (1, 1, 0)
    assert len(_logged(caplog, OUTAGE)) == 1
    store.close()
