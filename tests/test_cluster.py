"""Redis Cluster: the store, its URL, and a whole guarded call on a real 3-master cluster.

The contract tests of every backend also run on the cluster (their fixtures take
``"cluster"``); these tests cover what only a cluster has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisClusterStore, RedisStore, open_store
from llmguard_sdk.testing import FakeProvider
from tests.conftest import RawRedis, crowd_a_small_pool

pytestmark = pytest.mark.cluster

USER = [{"role": "user", "content": "hello there"}]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


def test_a_cluster_url_opens_a_cluster_store() -> None:
    store = open_store("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", key_prefix="p")
    assert isinstance(store, RedisClusterStore)
    assert isinstance(store, RedisStore)  # every Redis backend accepts it
    assert store.cluster
    assert "redis+cluster://" in repr(store)
    secret = RedisClusterStore("redis+cluster://u:hunter2@127.0.0.1:7000")
    assert "hunter2" not in repr(secret)


@pytest.mark.parametrize(
    "bad",
    [
        "redis+cluster://127.0.0.1",  # no port
        "redis+cluster://127.0.0.1:7000,:7001",
        "redis+cluster://127.0.0.1:7000/3",  # a cluster has database 0 only
        # no port above 65535: accepted, then every call raised ValueError (ping() too)
        "redis+cluster://127.0.0.1:99999",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:70000",
        "redis+cluster://127.0.0.1:\u00b2",  # a digit to str.isdigit, not to int(): ValueError
    ],
)
def test_bad_cluster_urls_are_configuration_errors(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        open_store(bad)


def test_a_cluster_store_rejects_a_plain_url() -> None:
    with pytest.raises(ConfigurationError, match="redis\\+cluster"):
        RedisClusterStore("redis://127.0.0.1:6379/0")


def test_an_unreachable_cluster_does_not_stop_the_guard(
    fake: FakeProvider, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Nothing connects at start; the first call finds the cluster down and every stage
    decides locally (budgets fail open here, their spend journaled in the temp dir), without
    raising."""
    from llmguard_sdk import OpenAICompatibleProvider

    caplog.set_level(logging.WARNING, logger="llmguard_sdk")
    store = RedisClusterStore(
        "redis+cluster://127.0.0.1:1", socket_timeout=0.2, journal_dir=str(tmp_path)
    )
    with Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary"),
        store=store,
        rate_limits={"primary": RateLimit(rpm=600)},
        budgets=Budgets([Budget(10.0, scope="tenant")], prices=PRICES, fail_open=True),
        cache=True,
        environ={},
    ) as guard:
        assert guard.chat(USER, tenant="acme").text
        assert guard.chat(USER, tenant="acme", cacheable=False).text
    assert any("Redis unavailable" in r.getMessage() for r in caplog.records)
    assert not store.ping()
    assert list(tmp_path.glob("*.jsonl"))  # the spend it could not send stayed in the temp dir


def test_a_guarded_call_with_every_stage_on_a_cluster(
    fake: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_cluster_url: str,
    cluster_prefix: str,
) -> None:
    budgets = Budgets([Budget(5.0, scope="tenant")], prices=PRICES)
    options: dict[str, Any] = {
        "store": redis_cluster_url,
        "key_prefix": cluster_prefix,
        "rate_limits": {"primary": RateLimit(rpm=600, tpm=1_000_000)},
        "budgets": budgets,
        "cache": True,
    }
    first = make_guard(fake, **options)
    second = make_guard(fake, **options)  # another process, as far as Redis can tell
    answer = first.chat(USER, tenant="acme", max_tokens=50)
    assert answer.route == "primary"
    again = second.chat(USER, tenant="acme", max_tokens=50)
    assert again.route == "cache"  # the answer stored by the first Guard, via the cluster
    assert len(fake.requests) == 1
    spend = first._stages.spend
    assert spend is not None
    (row,) = spend.status(tenant="acme")
    assert row["spent_usd"] == pytest.approx(answer.cost_usd)
    assert row["held_usd"] == 0

    store = first.store
    assert isinstance(store, RedisClusterStore)
    client = store.client
    keys = [k.decode() for k in client.scan_iter(match=f"{cluster_prefix}:*")]
    kinds = {key.split(":")[1] for key in keys}
    assert {"rl", "cb", "budget", "cache", "rb"} <= kinds
    nodes = {client.get_node_from_key(key).name for key in keys}  # type: ignore[attr-defined]
    assert len(nodes) >= 2  # the stages' hash tags spread over the masters
    by_tag: dict[str, set[int]] = {}
    for key in keys:
        tag = key[key.index("{") : key.index("}") + 1]
        by_tag.setdefault(tag, set()).add(client.keyslot(key))  # type: ignore[attr-defined]
    assert all(len(slots) == 1 for slots in by_tag.values())  # one decision, one slot


def test_the_async_twins_on_a_cluster(
    fake: FakeProvider, redis_cluster_url: str, cluster_prefix: str
) -> None:
    import anyio

    from llmguard_sdk import OpenAICompatibleProvider

    async def run() -> list[str]:
        async with Guard(
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary"),
            store=redis_cluster_url,
            key_prefix=cluster_prefix,
            rate_limits={"primary": RateLimit(rpm=600)},
            budgets=Budgets([Budget(5.0, scope="tenant")], prices=PRICES),
            cache=True,
            environ={},
        ) as guard:
            routes = []
            for _ in range(2):
                answer = await guard.achat(USER, tenant="acme", max_tokens=20)
                routes.append(answer.route)
            return routes

    assert anyio.run(run) == ["primary", "cache"]


def test_a_script_follows_a_moved_slot(redis_cluster_url: str, cluster_prefix: str) -> None:
    """Scripts reach the node that serves their slot, also after the client's slot map went
    stale (MOVED): the client refreshes it and the decision still happens once."""
    from llmguard_sdk.breaker import BreakerPolicy, RedisBreakerBackend

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    backend = RedisBreakerBackend(store, BreakerPolicy(minimum_calls=2, window=2))
    assert backend.acquire("route").allowed
    client = store.client
    key = store.key("cb", __import__("llmguard_sdk.store").store.hash_id("route"), "s")
    right = client.get_node_from_key(key)  # type: ignore[attr-defined]
    wrong = next(n for n in client.get_primaries() if n.name != right.name)  # type: ignore[attr-defined]
    slot = client.keyslot(key)  # type: ignore[attr-defined]
    client.nodes_manager.slots_cache[slot] = [wrong]  # type: ignore[attr-defined]
    backend.record("route", "fail")
    backend.record("route", "fail")
    assert backend.state("route") == "open"
    assert client.get_node_from_key(key).name == right.name  # type: ignore[attr-defined]
    store.close()


def test_scripts_the_cluster_lost_run_again_on_their_nodes(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """After SCRIPT FLUSH on every node, the commands of a round go again with their script
    (EVAL), each to the node of its slot, sync and async alike, and run once."""
    import anyio
    import redis

    from llmguard_sdk._state.steps import Batch, answer
    from llmguard_sdk.store import RedisScripts

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    scripts = RedisScripts(store, "return redis.call('INCR', KEYS[1])")
    keys = [store.key("t", f"tag{n}", "n") for n in range(6)]
    client: Any = store.client
    assert len({client.get_node_from_key(key).name for key in keys}) > 1

    def flush() -> None:
        for node in client.get_primaries():
            raw: RawRedis = redis.Redis(host=node.host, port=node.port)
            raw.script_flush()
            raw.close()

    def steps() -> list[Any]:
        return [answer(scripts.command(0, [key])) for key in keys]

    async def in_a_loop() -> list[Any]:
        found = [outcome.result() for outcome in await Batch(steps()).arun()]
        await store.aclose()
        return found

    flush()
    assert [outcome.result() for outcome in Batch(steps()).run()] == [1] * 6
    flush()
    assert anyio.run(in_a_loop) == [2] * 6
    assert [outcome.result() for outcome in Batch(steps()).run()] == [3] * 6
    store.close()


def test_cluster_keys_hold_no_tenant_ids(
    fake: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_cluster_url: str,
    cluster_prefix: str,
) -> None:
    guard = make_guard(
        fake,
        store=redis_cluster_url,
        key_prefix=cluster_prefix,
        budgets=Budgets([Budget(5.0, scope="tenant")], prices=PRICES),
        rate_limits={"primary": RateLimit(rpm=600, per_tenant=True)},
    )
    guard.chat(USER, tenant="acme-secret-tenant")
    client = guard.store.client  # type: ignore[attr-defined]
    keys = [k.decode() for k in client.scan_iter(match=f"{cluster_prefix}:*")]
    assert keys
    assert not any("acme" in key for key in keys)


def test_more_callers_than_connections_wait_for_one_on_a_cluster(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """As on a single Redis: threads and async tasks beyond ``max_connections`` (per node)
    wait, at most pool_timeout, for a connection; a full pool is not the cluster down."""
    store = RedisClusterStore(
        redis_cluster_url, key_prefix=cluster_prefix, max_connections=2, socket_timeout=5
    )
    crowd_a_small_pool(store)
    assert store.health.outages == 0


def test_a_cluster_store_takes_its_timeouts_by_the_standalone_path(
    redis_url: str, redis_cluster_url: str, cluster_prefix: str
) -> None:
    """The connection settings of a cluster's nodes are the standalone store's, from the
    same keywords and URL query: socket_timeout, socket_connect_timeout, the pool's wait and
    its size (the cluster ignored its URL's query, and the pool's wait was passed by hand)."""
    import anyio

    query = "socket_timeout=2.5&socket_connect_timeout=1.5&max_connections=7"
    single = RedisStore(f"{redis_url}?{query}", socket_timeout=0.7)
    cluster = RedisClusterStore(f"{redis_cluster_url}?{query}", socket_timeout=0.7)
    names = ("socket_timeout", "socket_connect_timeout")
    expected = {name: single._pool.connection_kwargs[name] for name in names}
    assert expected == {"socket_timeout": 2.5, "socket_connect_timeout": 1.5}
    # the pool's wait (pool_timeout): one attempt, a connection then an answer (1.5 + 2.5)
    assert (single._pool.timeout, single._pool.max_connections) == (4.0, 7)
    assert cluster.pool_timeout == single.pool_timeout == 4.0
    assert cluster.ping()
    for node in cluster.client.get_nodes():  # type: ignore[attr-defined]
        pool = node.redis_connection.connection_pool
        assert {name: pool.connection_kwargs[name] for name in names} == expected
        assert (pool.timeout, pool.max_connections) == (4.0, 7)

    async def nodes() -> None:
        client: RawRedis = cluster.aclient
        await client.ping()
        for node in client.get_nodes():
            assert {name: node.connection_kwargs[name] for name in names} == expected
            assert node.max_connections == 7
        await cluster.aclose()

    anyio.run(nodes)
    assert cluster.health.attempt_seconds == single.health.attempt_seconds == 4.0
    single.close()


def test_each_client_gets_the_retry_of_its_kind(
    redis_url: str, redis_prefix: str, redis_cluster_url: str, cluster_prefix: str
) -> None:
    """The async clients (a cluster's, a single Redis's) retry with redis-py's asyncio
    ``Retry``, the sync ones with its sync one: the async cluster client got the sync one,
    which redis-py 8 converts with a warning ("A synchronous redis.retry.Retry was passed to
    an asyncio client")."""
    import anyio
    import redis.asyncio.retry
    import redis.retry

    cluster = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    single = RedisStore(redis_url, key_prefix=redis_prefix)

    def retry_of(store: RedisStore, client: RawRedis) -> Any:
        return client.retry if store is cluster else client.get_retry()

    for store in (cluster, single):
        assert store.ping()
        assert isinstance(retry_of(store, store.client), redis.retry.Retry)

    async def retries() -> None:
        for store in (cluster, single):
            client: RawRedis = store.aclient
            await client.ping()
            assert isinstance(retry_of(store, client), redis.asyncio.retry.Retry)
            await store.aclose()

    anyio.run(retries)
    cluster.close()
    single.close()
