"""A guarded call's round trips to Redis within its deadline: a sync Redis Cluster client's
waits for its nodes are bounded as a single Redis's are."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.store import RedisClusterStore
from tests.test_cache import FAQ, answer, ask

SLACK = 0.25  # seconds a loaded test machine may add to a bound


@pytest.mark.cluster
def test_a_sync_lookup_on_a_paused_cluster_keeps_to_its_deadline(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """A sync cluster client waited its socket timeouts whatever the call's deadline (2 s
    here, then a slot map asked of each node in turn); its nodes' waits are now bounded as a
    single Redis's are: its masters hold every command back (``CLIENT PAUSE``)."""
    import redis

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix, socket_timeout=2.0)
    cache = ResponseCache(store, sync_interval=0.0)
    nodes = [n.rpartition(":") for n in urlsplit(redis_cluster_url).netloc.split(",")]
    masters = [redis.Redis(host=host, port=int(port)) for host, _, port in nodes]
    try:
        assert cache.store(ask(FAQ), answer("a"))  # (the slot map, the connections)
        for master in masters:
            master.client_pause(1500, all=True)
        started = time.monotonic()
        assert cache.lookup(ask(FAQ), deadline=started + 0.4) is None
        took = time.monotonic() - started
    finally:
        for master in masters:
            master.client_unpause()
            master.close()
    try:
        assert took < 0.2 + SLACK
        assert (store.health.failures, cache.stats.errors) == (0, 1)
    finally:
        cache.close()
