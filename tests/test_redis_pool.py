"""A store's connection pool that is all in use is this process's own load, not Redis down:
round trips beyond ``max_connections`` wait their turn (at most ``pool_timeout``), and one
whose wait runs out is decided without Redis, with the store not paused and no outage
logged. Real Redis (standalone and Cluster); the pool is held full by taking its
connections."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, BudgetUnavailableError
from llmguard_sdk.budget.memory import HoldArgs
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider
from tests.conftest import USER, RawRedis, RedisTarget, redis_store
from tests.slowanswer import SlowAnswers
from tests.test_budget_guard import PRICES

OUTAGE = "Redis unavailable"
TOO_SMALL = "max_connections"  # the setting the pool's warning names


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _limiter(store: RedisStore) -> RedisRateLimiter:
    """A limit whose every granted call holds a lease in Redis (or, decided locally, in
    this process only): Redis's count of leases says how many calls Redis decided."""
    return RedisRateLimiter(store, {"r": RateLimit(rpm=10**9, concurrency=10_000)})


@contextlib.contextmanager
def _pool_held(store: RedisStore) -> Iterator[None]:
    """Every connection of ``store``'s sync pool taken while the block runs."""
    pool: RawRedis = store._pool
    held = [pool.get_connection() for _ in range(pool.max_connections)]
    try:
        yield
    finally:
        for connection in held:
            pool.release(connection)


@contextlib.asynccontextmanager
async def _apool_held(store: RedisStore) -> AsyncIterator[None]:
    """Every connection of ``store``'s async pool (this event loop's) taken meanwhile."""
    pool: RawRedis = store.aclient.connection_pool
    held = [await pool.get_connection() for _ in range(pool.max_connections)]
    try:
        yield
    finally:
        for connection in held:
            await pool.release(connection)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_round_trips_beyond_a_small_pool_wait_their_turn(
    redis_url: str, redis_prefix: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A pool of 2 connections, both taken while 120 round trips queue for one, longer than
    an attempt on Redis (``socket_timeout``, a connection's timeout) but within
    ``pool_timeout``: every one is answered by Redis once the pool frees, the store is never
    paused and no outage is logged."""
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, max_connections=2, socket_timeout=0.1, pool_timeout=10
    )
    limiter = _limiter(store)

    async def tasks() -> None:
        async with anyio.create_task_group() as group, _apool_held(store):
            for _ in range(120):
                group.start_soon(limiter.areserve, "r")
            await anyio.sleep(0.4)  # (all queued: past socket_timeout + connect timeout)
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        if mode == "async":
            anyio.run(tasks)
        else:
            threads = [
                threading.Thread(target=lambda: [limiter.reserve("r") for _ in range(10)])
                for _ in range(12)
            ]
            with _pool_held(store):
                for thread in threads:
                    thread.start()
                time.sleep(0.4)
            for thread in threads:
                thread.join(30)
    assert limiter.in_flight("r") == 120  # every lease in Redis: none decided locally
    assert (store.health.outages, store.health.failures, store.health.exhausted) == (0, 0, 0)
    assert _logged(caplog, OUTAGE) == []
    store.close()


def test_round_trips_queued_behind_a_redis_gone_silent_are_not_sent(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """20 round trips queue for a store's one connection; the first one's answer never comes
    in time (an outage: the store is paused), so the others, when their turn comes, are
    decided without Redis at once, unsent (each would have waited for Redis in turn)."""
    truth = _limiter(RedisStore(redis_url, key_prefix=redis_prefix))
    assert truth.reserve("r").allowed  # (its script loaded in Redis: the EVALSHA runs)
    with SlowAnswers(redis_url, b"EVALSHA", delay=2.0) as slow:
        store = RedisStore(slow.url, key_prefix=redis_prefix, max_connections=1, socket_timeout=0.1)
        limiter = _limiter(store)
        grants: list[bool] = []

        async def calls() -> None:
            async def call() -> None:
                grants.append((await limiter.areserve("r")).allowed)

            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(call)
            await store.aclose()

        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            anyio.run(calls)
        assert grants == [True] * 20  # (this process's share, each)
        assert truth.in_flight("r") == 2  # the warm-up's, and the first round trip's only
        assert (store.health.outages, store.health.exhausted) == (1, 0)
        assert len(_logged(caplog, OUTAGE)) == 1
        store.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_pool_held_full_past_pool_timeout_is_no_redis_outage(
    redis_url: str, redis_prefix: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every connection of the pool held past ``pool_timeout``: each decision that waited is
    made without Redis (as in an outage, for that decision only), but Redis is not paused
    (the next decision tries it again), no outage is logged, and one warning names the
    setting to raise. It was "Redis unavailable" and a pause of every stage."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, max_connections=2, pool_timeout=0.05)
    limiter = _limiter(store)
    grants: list[bool] = []

    async def calls() -> None:
        async with _apool_held(store):
            for _ in range(3):  # (this process's share, each)
                grants.append((await limiter.areserve("r")).allowed and store.health.up())
        grants.append((await limiter.areserve("r")).allowed)  # the pool free: in Redis
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        if mode == "async":
            anyio.run(calls)
        else:
            with _pool_held(store):
                grants.extend(limiter.reserve("r").allowed and store.health.up() for _ in "abc")
            grants.append(limiter.reserve("r").allowed)
    assert grants == [True] * 4
    assert limiter.in_flight("r") == 1  # three decided locally, the last one in Redis
    assert (store.health.outages, store.health.failures, store.health.exhausted) == (0, 0, 3)
    assert _logged(caplog, OUTAGE) == []
    warned = _logged(caplog, TOO_SMALL)
    assert len(warned) == 1  # (once, however many decisions met it)
    assert "pool_timeout" in warned[0]
    store.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_full_pool_on_a_cluster_is_no_outage(
    redis_target: RedisTarget, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As on a single Redis: a cluster store whose connections (each node's, sync; the
    event loop's round trips, async) are all in use past ``pool_timeout`` decides without
    Redis, and the cluster is not paused."""
    url, prefix = redis_target("cluster")
    store = redis_store(url, prefix, max_connections=1, pool_timeout=0.05)
    limiter = _limiter(store)
    assert store.ping()

    async def async_side() -> None:
        async with store.async_round_trip():  # its only round trip, held
            assert (await limiter.areserve("r")).allowed
        assert (await limiter.areserve("r")).allowed
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        if mode == "async":
            anyio.run(async_side)
        else:
            client: RawRedis = store.client
            pools = [node.redis_connection.connection_pool for node in client.get_nodes()]
            held = [(pool, pool.get_connection()) for pool in pools]
            try:
                assert limiter.reserve("r").allowed
            finally:
                for pool, connection in held:
                    pool.release(connection)
            assert limiter.reserve("r").allowed
    assert limiter.in_flight("r") == 1
    assert (store.health.outages, store.health.failures, store.health.exhausted) == (0, 0, 1)
    assert _logged(caplog, OUTAGE) == []
    store.close()


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), 3601, "5", True])
def test_pool_timeout_must_be_a_bounded_positive_number(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="pool_timeout"):
        RedisStore("redis://127.0.0.1:1/0", pool_timeout=bad)  # type: ignore[arg-type]


def test_the_pool_timeout_is_one_attempt_unless_set(redis_url: str) -> None:
    """``pool_timeout``'s default is one attempt on Redis (a connection, then an answer), as
    the URL sets those; the keyword sets it, and the URL's ``timeout`` wins over both."""
    default = RedisStore(f"{redis_url}?socket_connect_timeout=1.5", socket_timeout=2.5)
    keyword = RedisStore(redis_url, pool_timeout=3)
    query = RedisStore(f"{redis_url}?timeout=4", pool_timeout=3)
    stores = (default, keyword, query)
    assert [store.pool_timeout for store in stores] == [4.0, 3, 4]
    assert [store._pool.timeout for store in stores] == [4.0, 3, 4]


def budgeted(fake: FakeProvider, store: RedisStore, **options: Any) -> Guard:
    """A Guard of one route and a $1 budget (``options``: more of its :class:`Budgets`)
    through ``store``, with no other stage that keeps state in it."""
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        store=store,
        budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES, **options),
        breaker=None,
        retry_budget=None,
        environ={},
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fail_closed_budget_meeting_a_full_pool_says_so(
    redis_url: str, redis_prefix: str, fake: FakeProvider, mode: str
) -> None:
    """A budget that refuses calls while Redis is away, meeting a pool held full past
    ``pool_timeout``, refuses the call with :class:`BudgetUnavailableError` saying what
    happened (the pool stayed full; raise ``max_connections`` or ``pool_timeout``), not
    "Redis cannot be reached": Redis is not paused, so ``retry_after`` is 0 (at once)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, max_connections=1, pool_timeout=0.05)
    guard = budgeted(fake, store, fail_open=False)

    async def achat() -> None:
        async with _apool_held(store):
            await guard.achat(USER, max_tokens=3)

    def call() -> None:
        if mode == "async":
            anyio.run(achat)
        else:
            with _pool_held(store):
                guard.chat(USER, max_tokens=3)

    with pytest.raises(BudgetUnavailableError) as refused:
        call()
    text = str(refused.value)
    assert "cannot be reached" not in text
    assert "connection pool stayed full for pool_timeout (0.05 s)" in text
    assert "max_connections" in text
    assert refused.value.retry_after == 0.0
    assert fake.stats.requests == 0  # refused before the provider call
    assert (store.health.outages, store.health.failures, store.health.exhausted) == (0, 0, 1)
    guard.close()


def _slot_map_queries(nodes: list[tuple[str, int]]) -> int:
    """How many ``CLUSTER SLOTS`` (a client's slot-map refresh) the cluster's nodes served."""
    import redis

    served = 0
    for host, port in nodes:
        client: RawRedis = redis.Redis(host=host, port=port)
        served += client.info("commandstats").get("cmdstat_cluster|slots", {}).get("calls", 0)
        client.close()
    return served


def test_a_full_node_pool_on_a_cluster_refreshes_no_slot_map(
    redis_cluster_url: str, cluster_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pool of the node that serves a budget's keys held full past ``pool_timeout`` (the
    other nodes' free): the sync cluster client read redis-py's ``MaxConnectionsError`` as a
    connection error and refreshed its slot map (``CLUSTER SLOTS`` on each node in turn, each
    waiting ``pool_timeout`` on a full pool, and a reconnect of every connection of the node
    that answered), logged as "Redis Cluster cannot be connected". It is this process's
    load: the decision is made without Redis at once, nothing is asked of the cluster."""
    options = {"max_connections": 1, "pool_timeout": 0.05, "journal_dir": str(tmp_path)}
    store = redis_store(redis_cluster_url, cluster_prefix, **options)
    budgets = RedisBudgetBackend(store, fail_open=True)
    spec = CounterSpec("global", nano(1.0), "day", 3600.0, (), "global", 0)
    hold = HoldArgs(base=nano(0.1), per_token=0.0, want=0, minimum=0, ttl=60.0)
    assert budgets.reserve("first", [spec], **hold).allowed  # (the slot map, fetched)
    client: RawRedis = store.client
    nodes = [(node.host, node.port) for node in client.get_nodes()]
    pool = client.get_node_from_key(budgets._keys([spec])[0]).redis_connection.connection_pool
    before = _slot_map_queries(nodes)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        held = pool.get_connection()
        try:
            counted = budgets.reserve("second", [spec], **hold)
        finally:
            pool.release(held)
    assert (counted.allowed, counted.first_local) == (True, True)  # counted in this process
    assert _slot_map_queries(nodes) == before  # no slot map asked for
    assert (store.health.outages, store.health.failures, store.health.exhausted) == (0, 0, 1)
    warned = _logged(caplog, TOO_SMALL)
    assert len(warned) == 1
    assert "cannot be connected" not in warned[0]
    assert budgets.reserve("third", [spec], **hold).allowed
    assert _slot_map_queries(nodes) == before
    store.close()
