"""A burst of concurrent async calls through one Guard whose store is Redis (a single Redis,
or a Redis Cluster) is served by Redis: its round trips queue for the store's connections and
wait out the event loop's own lag (the burst's CPU work, or the application's) instead of
running out of ``pool_timeout`` and the socket timeouts on the wall clock. It was every call
of the burst (or most) refused by a fail-closed budget ("no connection of the pool came
free", "the event loop was too busy"); on a cluster, the loop's lag timed out its round trips
(refused, the slot map fetched again, the node's connections dropped). Real Redis, real HTTP
(FakeProvider on loopback)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import redis

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisClusterStore, RedisStore
from llmguard_sdk.testing import FakeProvider
from tests.conftest import USER
from tests.test_budget_guard import PRICES
from tests.test_redis_loop_lag import _work

CALLS = 1000  # at once, on one event loop
CONNECTIONS = 2  # the store's max_connections (a cluster's: per node): round trips queue
# the application's own CPU work on the loop during the burst: each slice longer than the
# socket timeout (0.5 s by default), ten times shorter than a wait's cap (ten times it)
SLICES, SLICE = 6, 0.6


def _burst(store: RedisStore, fake: FakeProvider, *, busy: bool = False) -> None:
    """1,000 ``achat`` at once through a Guard with a fail-closed budget and a rate limit on
    ``store`` (and, ``busy``, a task that keeps the loop busy in slices meanwhile): every
    call is answered, each decided in Redis (no decision made without it for a full pool, a
    busy loop or an outage)."""
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        store=store,
        rate_limits={"primary": RateLimit(rpm=10**8, tpm=10**11)},
        budgets=Budgets([Budget(limit_usd=10**6)], prices=PRICES, fail_open=False),
        breaker=None,
        retry_budget=None,
        environ={},
    )
    outcomes: Counter[str] = Counter()

    async def call() -> None:
        try:
            await guard.achat(USER, max_tokens=3)
            outcomes["answered"] += 1
        except Exception as exc:  # (counted by kind: the assertion names them)
            outcomes[type(exc).__name__] += 1

    async def busy_loop() -> None:
        for _ in range(SLICES if busy else 0):
            await anyio.sleep(0.01)
            _work(SLICE)

    async def burst() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(CALLS):
                group.start_soon(call)
            group.start_soon(busy_loop)
        await guard.aclose()

    anyio.run(burst)
    guard.close()
    assert outcomes == {"answered": CALLS}
    assert fake.stats.requests == CALLS
    health = store.health
    assert (health.exhausted, health.lagged, health.outages) == (0, 0, 0)


def test_a_burst_of_async_calls_is_served_by_redis(
    redis_url: str, redis_prefix: str, fake: FakeProvider, tmp_path: Path
) -> None:
    """A single Redis, on a store of 2 connections (its other settings the defaults)."""
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, max_connections=CONNECTIONS, journal_dir=str(tmp_path)
    )
    _burst(store, fake)


def test_a_burst_on_a_busy_event_loop_is_served_by_redis(
    redis_url: str, redis_prefix: str, fake: FakeProvider, tmp_path: Path
) -> None:
    """The same while the application keeps the loop busy for 0.6 s at a time, six times."""
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, max_connections=CONNECTIONS, journal_dir=str(tmp_path)
    )
    _burst(store, fake, busy=True)


def _cluster_store(url: str, prefix: str, tmp_path: Path) -> RedisClusterStore:
    return RedisClusterStore(
        url, key_prefix=prefix, max_connections=CONNECTIONS, journal_dir=str(tmp_path)
    )


def test_a_burst_of_async_calls_is_served_by_a_cluster(
    redis_cluster_url: str, cluster_prefix: str, fake: FakeProvider, tmp_path: Path
) -> None:
    """A Redis Cluster, on a store of 2 connections a node (its other settings the
    defaults)."""
    _burst(_cluster_store(redis_cluster_url, cluster_prefix, tmp_path), fake)


def _slot_maps(url: str) -> int:
    """How many times the cluster's nodes were asked for the slot map (``CLUSTER SLOTS``)."""
    asked = 0
    for node in urlsplit(url).netloc.split(","):
        host, _, port = node.rpartition(":")
        client = redis.Redis(host=host, port=int(port))
        stats: dict[str, dict[str, int]] = client.info("commandstats")  # type: ignore[assignment]
        asked += stats.get("cmdstat_cluster|slots", {}).get("calls", 0)
        client.close()
    return asked


def test_a_burst_on_a_busy_event_loop_is_served_by_a_cluster(
    redis_cluster_url: str, cluster_prefix: str, fake: FakeProvider, tmp_path: Path
) -> None:
    """The cluster's twin of the busy loop's burst: every call is decided by the cluster,
    whose slot map is fetched once (no round trip timed out: its waits for the cluster are
    on the loop's on-time clock). They were on the wall clock: a few calls refused (1 to 3
    in 1,000), the slot map fetched again and the node's connections dropped after each
    timeout, and in one run in four every call refused (a node's connections that timed out
    connecting were never given back: redis-py's node pool full for good)."""
    asked = _slot_maps(redis_cluster_url)
    _burst(_cluster_store(redis_cluster_url, cluster_prefix, tmp_path), fake, busy=True)
    assert _slot_maps(redis_cluster_url) - asked == 1
