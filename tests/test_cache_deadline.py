"""The response cache within a call's deadline: a Redis that does not answer is a miss in
the time the deadline leaves, not a call that runs out of time before its provider is asked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import anyio
import pytest
from redis_cluster import RedisServer

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cache._recent import STALE_FLOOR_S
from llmguard_sdk.errors import LLMGuardError
from llmguard_sdk.store import RedisClusterStore, RedisStore
from llmguard_sdk.testing import FakeProvider, Fault
from tests.test_cache import FAQ, answer, ask
from tests.test_cache_construction import SilentServer

QUESTION = [{"role": "user", "content": FAQ}]
SLACK = 0.25  # seconds a loaded test machine may add to a bound
TIMEOUT = 1.0  # the calls' deadline: shorter than the store's socket timeout
SOCKET_TIMEOUT = 2.0


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    """A Redis host that accepts connections and never answers; the default embedder's
    first use done (it reads its word weights then, a few tenths of a second of CPU inside
    the first call's deadline)."""
    ResponseCache().store(ask("A question to warm the embedder?"), answer("a"))
    with SilentServer() as server:
        yield server


def _guard(fake: FakeProvider, port: int) -> tuple[Guard, ResponseCache]:
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    store = RedisStore(
        f"redis://127.0.0.1:{port}/0", key_prefix="deadline", socket_timeout=SOCKET_TIMEOUT
    )
    cache = ResponseCache(store)
    return Guard([provider], cache=cache, environ={}, timeout=TIMEOUT), cache


def test_a_silent_redis_leaves_a_short_call_time_for_its_provider(
    fake: FakeProvider, silent: SilentServer
) -> None:
    """``Guard(timeout=0.3)`` over a Redis that never answered: the cache lookup waited the
    store's socket timeout (0.5 s by default, for the connection's handshake) and the call
    raised ProviderTimeoutError after 0.66 s without asking its provider. The lookup now
    waits half of what the deadline leaves at most, and misses; the store after the answer
    what is left."""
    guard, cache = _guard(fake, silent.port)
    try:
        started = time.monotonic()
        response = guard.chat(QUESTION)
        took = time.monotonic() - started
        assert response.route == "primary"
        assert took < TIMEOUT + SLACK
        assert fake.stats.requests == 1
        assert silent.accepted >= 1  # (Redis was asked)
        assert cache.stats.misses == 1
        assert cache.stats.errors == 2  # the lookup, and the store after the answer
        assert isinstance(cache.state, RedisStore)
        assert cache.state.health.failures == 0  # the call's time was up: Redis not paused
    finally:
        guard.close()


def test_a_silent_redis_leaves_a_short_async_call_time_for_its_provider(
    fake: FakeProvider, silent: SilentServer
) -> None:
    """(1.06 s, then ProviderTimeoutError: an async round trip waits for a connection's
    handshake and an answer, a socket timeout each.)"""
    guard, cache = _guard(fake, silent.port)

    async def main() -> tuple[str, float]:
        try:
            started = time.monotonic()
            response = await guard.achat(QUESTION)
            return response.route, time.monotonic() - started
        finally:
            await guard.aclose()

    route, took = anyio.run(main)
    assert route == "primary"
    assert took < TIMEOUT + SLACK
    assert cache.stats.errors == 2
    assert isinstance(cache.state, RedisStore)
    assert cache.state.health.failures == 0


def test_a_silent_redis_bounds_a_lookup_and_a_store_given_a_deadline(
    silent: SilentServer,
) -> None:
    cache = ResponseCache(f"redis://127.0.0.1:{silent.port}/0", key_prefix="deadline")
    try:
        started = time.monotonic()
        assert cache.lookup(ask(FAQ), deadline=started + 0.2) is None
        assert time.monotonic() - started < 0.1 + SLACK
        started = time.monotonic()
        assert not cache.store(ask(FAQ), answer("a"), deadline=started + 0.2)
        assert time.monotonic() - started < 0.2 + SLACK
        assert cache.stats.errors == 2
    finally:
        cache.close()


def test_a_deadline_already_past_sends_nothing(silent: SilentServer) -> None:
    cache = ResponseCache(f"redis://127.0.0.1:{silent.port}/0", key_prefix="deadline")
    try:
        assert cache.lookup(ask(FAQ), deadline=time.monotonic() - 1) is None
        assert not cache.store(ask(FAQ), answer("a"), deadline=time.monotonic() - 1)
        assert silent.accepted == 0
        assert cache.stats.errors == 2
    finally:
        cache.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_short_deadline_still_hits_a_redis_that_answers(
    fake: FakeProvider, redis_url: str, redis_prefix: str, mode: str
) -> None:
    """The bound is what is left of the deadline, not a refusal to wait: a Redis that answers
    within it serves hits as before, sync and async, and a later call with no time to spare
    on the cache still gets its provider's answer."""
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    cache = ResponseCache(redis_url, key_prefix=redis_prefix)
    guard = Guard([provider], cache=cache, environ={}, timeout=0.5)

    async def twice() -> list[str]:
        try:
            return [(await guard.achat(QUESTION)).route for _ in range(2)]
        finally:
            await guard.aclose()

    try:
        routes = [guard.chat(QUESTION).route for _ in range(2)] if mode == "sync" else None
        if routes is None:
            routes = anyio.run(twice)
        assert routes == ["primary", "cache"]
        assert cache.stats.errors == 0
    finally:
        cache.clear()
        guard.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_lookup_cut_short_leaves_no_answer_behind_for_the_next(
    redis_server: RedisServer, mode: str
) -> None:
    """A Redis that hangs for a moment (``DEBUG SLEEP``) past a lookup's share of its deadline:
    the lookup misses in time and Redis is not paused; its connection is dropped, not handed
    to the next lookup with the late answer still owed on it (which would read that answer
    as its own)."""
    store = RedisStore(redis_server.url, key_prefix="late", socket_timeout=3.0)
    cache = ResponseCache(store, sync_interval=0.0)

    async def alookups() -> tuple[bool, float, bool]:
        started = time.monotonic()
        late = await cache.alookup(ask(FAQ), deadline=started + 0.4)
        took = time.monotonic() - started
        await anyio.sleep(0.6)
        again = await cache.alookup(ask(FAQ))
        await cache.aclose()
        return late is None, took, again is not None

    try:
        assert cache.store(ask(FAQ), answer("a"))
        redis_server.sleep(0.5)
        time.sleep(0.05)  # (the sleep under way)
        if mode == "sync":
            started = time.monotonic()
            missed = cache.lookup(ask(FAQ), deadline=started + 0.4) is None
            took = time.monotonic() - started
            time.sleep(0.6)
            found = cache.lookup(ask(FAQ)) is not None
        else:
            missed, took, found = anyio.run(alookups)
        assert missed
        assert took < 0.2 + SLACK
        assert found
        assert store.health.failures == 0
        assert (cache.stats.errors, cache.stats.exact_hits) == (1, 1)
    finally:
        cache.close()


@pytest.mark.cluster
def test_an_async_lookup_on_a_paused_cluster_keeps_to_its_deadline(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """The cluster's twin (async: a cluster node's waits are bounded on the event loop as a
    single Redis's are): its masters hold every command back (``CLIENT PAUSE``)."""
    import redis

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix, socket_timeout=2.0)
    cache = ResponseCache(store, sync_interval=0.0)
    nodes = [n.rpartition(":") for n in urlsplit(redis_cluster_url).netloc.split(",")]
    masters = [redis.Redis(host=host, port=int(port)) for host, _, port in nodes]
    took: list[float] = []

    async def lookups() -> None:
        assert await cache.astore(ask(FAQ), answer("a"))  # (the slot map, the connections)
        for master in masters:
            master.client_pause(1500, all=True)
        started = time.monotonic()
        assert await cache.alookup(ask(FAQ), deadline=started + 0.4) is None
        took.append(time.monotonic() - started)
        await cache.aclose()

    try:
        anyio.run(lookups)
    finally:
        for master in masters:
            master.client_unpause()
            master.close()
    assert took[0] < 0.2 + SLACK
    assert (store.health.failures, cache.stats.errors) == (0, 1)
    cache.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_stale_lookup_keeps_to_the_deadline_too(
    fake: FakeProvider, redis_server: RedisServer, mode: str
) -> None:
    """A Redis that hangs (``DEBUG SLEEP``) and a route that fails at once: the fresh lookup
    missed within its share of the deadline, but the stale lookup after the failure waited
    the store's own timeouts: the error came after 1.95 s here (the 2 s hang), 3.5 s for a
    5 s one (the store's 3 s socket timeout), sync and async, for a 1 s ``timeout``. It now
    waits as the fresh one does: the error comes within the deadline (0.75 s)."""
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    store = RedisStore(redis_server.url, key_prefix="stale", socket_timeout=3.0)
    cache = ResponseCache(store)
    guard = Guard([provider], cache=cache, environ={}, timeout=TIMEOUT, retry=None)
    fake.always(Fault(status=503))

    async def acall() -> None:
        try:
            await guard.achat(QUESTION)
        finally:
            await guard.aclose()

    try:
        assert cache.lookup(ask("warm the connection and the embedder?")) is None
        redis_server.sleep(2.0)
        time.sleep(0.05)  # (the sleep under way)
        started = time.monotonic()
        with pytest.raises(LLMGuardError):
            guard.chat(QUESTION) if mode == "sync" else anyio.run(acall)
        took = time.monotonic() - started
        assert took < TIMEOUT + SLACK
        assert fake.stats.requests == 1
        assert store.health.failures == 0  # (the call's time was up, not Redis's)
        time.sleep(max(0.0, 2.1 - took))  # (the sleep's own client answered before the stop)
    finally:
        guard.close()


def test_a_stale_answer_is_found_when_the_routes_spent_the_deadline(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    """The bound has a floor (``STALE_FLOOR_S``): a route that timed out at the deadline
    leaves the stale lookup no time of the call's own, and it still reads Redis."""
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    cache = ResponseCache(redis_url, key_prefix=redis_prefix, ttl=0.2, stale_ttl=60)
    guard = Guard([provider], cache=cache, environ={}, timeout=0.5, retry=None)
    try:
        assert guard.chat(QUESTION).route == "primary"
        time.sleep(0.3)
        fake.always(Fault(latency=5))
        started = time.monotonic()
        stale = guard.chat(QUESTION)
        took = time.monotonic() - started
        assert (stale.route, stale.metadata["cache"]) == ("cache", "stale")
        assert took < 0.5 + STALE_FLOOR_S + SLACK
    finally:
        cache.clear()
        guard.close()
