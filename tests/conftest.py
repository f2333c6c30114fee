"""Shared fixtures: FakeProvider servers, Guards around them, and a real Redis."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import redis8
import redis_cluster
import with_redis

from llmguard_sdk.store import RedisClusterStore, RedisStore

USER = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(model="fake-model", name="primary") as server:
        yield server


@pytest.fixture
def fake2() -> Iterator[FakeProvider]:
    with FakeProvider(model="backup-model", name="backup") as server:
        yield server


@pytest.fixture
def make_guard() -> Iterator[Callable[..., Guard]]:
    """Build Guards over FakeProviders; every one is closed after the test."""
    guards: list[Guard] = []

    def build(*servers: FakeProvider, **options: Any) -> Guard:
        providers = [
            OpenAICompatibleProvider(s.base_url, model=s.model, name=s.name) for s in servers
        ]
        options.setdefault("environ", {})
        guard = Guard(providers, **options)
        guards.append(guard)
        return guard

    yield build
    for guard in guards:
        guard.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis: REDIS_URL, else 127.0.0.1:6379, else a throwaway redis-server."""
    url = os.environ.get("REDIS_URL") or with_redis.DEFAULT_URL
    if with_redis.answers(url):
        yield url
        return
    with with_redis.throwaway() as url:
        yield url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    prefix = f"llmguard-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A throwaway 3-master Redis Cluster on loopback ports, started once per session (from
    the same redis-server binary as the rest of the suite) and stopped afterwards."""
    cluster = redis_cluster.RedisCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def cluster_prefix(redis_cluster_url: str) -> Iterator[str]:
    """A key prefix of this test's own on the cluster; its keys are deleted afterwards."""
    import redis

    prefix = f"llmguard-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    store = RedisClusterStore(redis_cluster_url, key_prefix=prefix)
    client = store.client
    for node in client.get_primaries():  # type: ignore[attr-defined]
        node_client = redis.Redis(host=node.host, port=node.port)
        for key in node_client.scan_iter(match=f"{prefix}:*", count=500):
            node_client.delete(key)
        node_client.close()
    store.close()


@pytest.fixture(scope="session")
def redis8_url() -> Iterator[str]:
    """A throwaway Redis 8 (with vector sets) on a free loopback port, for server-side vector
    search; skips where ``tools/redis8.py`` could not build one."""
    binary = redis8.binary()
    if binary is None:
        pytest.skip("no Redis 8 server: run python tools/redis8.py (make install-dev does)")
    with with_redis.throwaway(binary) as url:
        yield url


@pytest.fixture(scope="session")
def redis8_cluster_url() -> Iterator[str]:
    """A throwaway 3-master Redis Cluster of Redis 8 nodes (vector sets); skips like
    :func:`redis8_url`."""
    binary = redis8.binary()
    if binary is None:
        pytest.skip("no Redis 8 server: run python tools/redis8.py (make install-dev does)")
    cluster = redis_cluster.RedisCluster(binary=binary).start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


RedisTarget = Callable[[str], tuple[str, str]]


@pytest.fixture
def redis_target(request: pytest.FixtureRequest) -> RedisTarget:
    """``redis_target(kind)``: (URL, key prefix) of a real standalone Redis (``"redis"``), of
    the 3-master cluster (``"cluster"``) or of a Redis 8 with vector sets (``"redis8"``, or a
    cluster of them, ``"redis8_cluster"``: throwaway servers, so the prefix is only unique),
    with the prefix's keys cleaned up afterwards."""

    def target(kind: str) -> tuple[str, str]:
        if kind == "cluster":
            return request.getfixturevalue("redis_cluster_url"), request.getfixturevalue(
                "cluster_prefix"
            )
        if kind in ("redis8", "redis8_cluster"):  # throwaway servers: a unique prefix is enough
            url = request.getfixturevalue(f"{kind}_url")
            return url, f"llmguard-test-{uuid.uuid4().hex[:12]}"
        return request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")

    return target


def redis_store(url: str, prefix: str, **options: Any) -> RedisStore:
    """A store for ``url``: a :class:`RedisClusterStore` for ``redis+cluster://`` URLs."""
    if url.startswith("redis+cluster://"):
        return RedisClusterStore(url, key_prefix=prefix, **options)
    return RedisStore(url, key_prefix=prefix, **options)
