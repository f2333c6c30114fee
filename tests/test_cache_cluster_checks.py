"""A Redis-backed response cache's checks (whether the server has vector sets, how the
namespace keeps its vectors) on Redis Cluster: building the cache sends nothing to the
cluster, the first lookup or store makes the checks (their scripts on the namespace's
hash-tagged keys, one slot) and raises their ``ConfigurationError``, at each use until a
check passes, in the sync and async twins and through a Guard. (The checks moved from
construction to first use; tests/test_cache_construction.py, tests/test_cache_vector_kinds.py
and tests/test_cache_server_search.py cover them on a single server.)"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any, cast

import anyio
import pytest
import redis
from redis.crc import key_slot

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisClusterStore, RedisStore
from llmguard_sdk.testing import FakeProvider
from tests.test_cache import FAQ, PARAPHRASE, answer, ask

KINDS = ["local", "server"]
OTHER = {"local": "server", "server": "local"}
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


@pytest.fixture
def nodes(redis8_cluster_url: str) -> Iterator[list[redis.Redis]]:
    """A plain client on each master of the Redis 8 cluster."""
    clients = [
        redis.Redis.from_url(f"redis://{node}/0")
        for node in redis8_cluster_url.removeprefix("redis+cluster://").split(",")
    ]
    yield clients
    for client in clients:
        client.close()


def _scripts_run(nodes: list[redis.Redis]) -> int:
    """The scripts the cluster's masters ran (EVAL and EVALSHA calls, failed ones too)."""
    total = 0
    for node in nodes:
        stats = cast(dict[str, Any], node.info("commandstats"))
        for name in ("cmdstat_evalsha", "cmdstat_eval"):
            found = stats.get(name, {})
            total += int(found.get("calls", 0)) + int(found.get("failed_calls", 0))
    return total


def _has_vector_sets(cluster_url: str) -> bool:
    """Whether the cluster's nodes run Redis 8 or later (vector sets)."""
    node = cluster_url.removeprefix("redis+cluster://").split(",")[0]
    client = redis.Redis.from_url(f"redis://{node}/0")
    try:
        version = cast(dict[str, Any], client.info("server"))["redis_version"]
        return int(str(version).split(".")[0]) >= 8
    finally:
        client.close()


def _store(cache: ResponseCache) -> RedisStore:
    assert isinstance(cache.state, RedisStore)
    return cache.state


def _prefix() -> str:
    return f"checks-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("kind", KINDS)
def test_building_a_cache_over_a_cluster_that_is_down_neither_raises_nor_logs(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as free:  # a loopback port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    url = f"redis+cluster://127.0.0.1:{port}"
    with caplog.at_level(logging.DEBUG, logger="llmguard_sdk"):
        cache = ResponseCache(url, vector_search=kind)  # type: ignore[arg-type]
    try:
        assert [r.getMessage() for r in caplog.records] == []
        assert _store(cache).health.failures == 0  # nothing was tried
        assert cache.lookup(ask(FAQ)) is None  # the first use: a miss, as in any outage
        assert not cache.store(ask(FAQ), answer("a"))
    finally:
        cache.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_first_use_checks_the_cluster_on_the_namespaces_slot(
    redis8_cluster_url: str, nodes: list[redis.Redis], kind: str
) -> None:
    prefix = _prefix()
    before = _scripts_run(nodes)
    cache = ResponseCache(redis8_cluster_url, key_prefix=prefix, vector_search=kind)  # type: ignore[arg-type]
    try:
        assert _scripts_run(nodes) == before  # built: nothing sent
        assert cache.lookup(ask(FAQ)) is None
        checked = _scripts_run(nodes)
        assert checked > before + 1  # the checks, then the lookup
        assert cache.store(ask(FAQ), answer("Settings > Account > Reset."))
        hit = cache.lookup(ask(PARAPHRASE))
        assert hit is not None
        assert hit.kind == "semantic"
        keys = [key for node in nodes for key in node.scan_iter(match=f"{prefix}:*")]
        assert len(keys) >= 4  # (the entry, its LRU set, the change stream, the mark ...)
        assert len({key_slot(key) for key in keys}) == 1  # one hash tag, one slot
    finally:
        cache.close()


def test_server_search_on_a_cluster_without_vector_sets_is_refused_at_first_use(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """The suite's cluster runs the system's redis-server (no vector sets before Redis 8)."""
    if _has_vector_sets(redis_cluster_url):
        pytest.skip("this cluster's Redis has vector sets")
    cache = ResponseCache(redis_cluster_url, key_prefix=cluster_prefix, vector_search="server")
    try:
        for _ in range(2):  # (each use, until the check passes)
            with pytest.raises(ConfigurationError, match="VADD / VSIM"):
                cache.store(ask(FAQ), answer("a"))
            with pytest.raises(ConfigurationError, match="VADD / VSIM"):
                cache.lookup(ask(FAQ))

        async def twins() -> None:
            with pytest.raises(ConfigurationError, match="VADD / VSIM"):
                await cache.astore(ask(FAQ), answer("a"))
            with pytest.raises(ConfigurationError, match="VADD / VSIM"):
                await cache.alookup(ask(FAQ))

        anyio.run(twins)
        assert _store(cache).health.up()  # a refusal, no outage
        assert _store(cache).health.failures == 0
    finally:
        cache.close()


def test_a_guard_on_a_cluster_without_vector_sets_raises_and_holds_nothing(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """The check goes out in the call's first round trip, beside the budget hold and the
    rate-limit reservation on other slots; its refusal ends the call before the provider,
    and what was taken ahead is given back."""
    if _has_vector_sets(redis_cluster_url):
        pytest.skip("this cluster's Redis has vector sets")
    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    with FakeProvider(model="fake-model", name="primary") as fake:
        guard = Guard(
            [OpenAICompatibleProvider(fake.base_url, model=fake.model, name=fake.name)],
            store=store,
            rate_limits={"primary": RateLimit(rpm=600, tpm=1_000_000)},
            budgets=Budgets([Budget(5.0, scope="tenant")], prices=PRICES),
            cache=ResponseCache(store, vector_search="server"),
            environ={},
        )
        try:
            user = [{"role": "user", "content": FAQ}]
            with pytest.raises(ConfigurationError, match="VADD / VSIM"):
                guard.chat(user, tenant="acme", max_tokens=50)
            with pytest.raises(ConfigurationError, match="VADD / VSIM"):
                anyio.run(lambda: guard.achat(user, tenant="acme", max_tokens=50))
            assert fake.requests == []
            spend = guard._stages.spend
            assert spend is not None
            (row,) = spend.status(tenant="acme")
            assert (row["spent_usd"], row["held_usd"]) == (0, 0)
        finally:
            guard.close()


@pytest.mark.parametrize("first", KINDS)
@pytest.mark.parametrize("marked", [True, False], ids=["marked", "written-before-the-mark"])
def test_switching_kinds_on_a_cluster_is_refused_at_first_use(
    redis8_cluster_url: str, nodes: list[redis.Redis], first: str, marked: bool
) -> None:
    """Without the mark, the check reads the namespace's vector index or its newest entry
    (keys the script is not given but finds on its slot)."""
    prefix, second = _prefix(), OTHER[first]
    old = ResponseCache(redis8_cluster_url, key_prefix=prefix, vector_search=first)  # type: ignore[arg-type]
    switched = ResponseCache(redis8_cluster_url, key_prefix=prefix, vector_search=second)  # type: ignore[arg-type]
    try:
        assert old.store(ask(FAQ), answer(f"by {first}"))
        if not marked:
            deleted = [
                n.delete(*keys)
                for n in nodes
                if (keys := list(n.scan_iter(f"{prefix}:cache:*:vectors")))
            ]
            assert deleted == [1]
        with pytest.raises(ConfigurationError, match=f"vector_search='{first}'"):
            switched.lookup(ask(FAQ))
        with pytest.raises(ConfigurationError, match=f"vector_search='{first}'"):
            anyio.run(lambda: switched.astore(ask(FAQ), answer(f"by {second}")))
        old.clear()  # the namespace is free: the check passes at the next use
        assert switched.store(ask(FAQ), answer(f"by {second}"))
        hit = switched.lookup(ask(PARAPHRASE))
        assert hit is not None
        assert (hit.kind, hit.response.text) == ("semantic", f"by {second}")
    finally:
        old.close()
        switched.close()
