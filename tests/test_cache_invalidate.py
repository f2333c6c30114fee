"""Invalidating one cached answer: ``ResponseCache.invalidate`` (a served answer, a hit or a
request) and ``Guard.invalidate_cached``. The answer is gone in every process sharing the
cache, fresh and stale, found by its key or by similarity; the other entries stay."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.context import Scope
from llmguard_sdk.errors import RequestValidationError, StoreUnavailableError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.testing import FakeProvider
from tests.conftest import RedisTarget

FAQ = "How do I reset my password on the mobile app?"
PARAPHRASE = "How can I reset my password in the mobile app?"
OTHER = "What is the boiling point of water at sea level?"
MakeCache = Callable[..., ResponseCache]


def ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="m")


def answer(text: str) -> ChatResponse:
    return ChatResponse(text=text, finish_reason="stop")


@pytest.fixture(params=["memory", "redis", "cluster", "server_search"])
def make_cache(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[MakeCache]:
    """Caches of one kind over one store: in memory (one cache for every "process"), in
    Redis and a Redis Cluster (a cache per process, the indexes kept in step) and in a
    Redis 8 searched on the server."""
    caches: list[ResponseCache] = []
    where: dict[str, Any] = {}

    def build(**options: Any) -> ResponseCache:
        if request.param == "memory":
            if not caches:
                caches.append(ResponseCache(**options))
            return caches[0]
        if not where:
            kind = "redis8" if request.param == "server_search" else request.param
            where["url"], where["prefix"] = redis_target(kind)
            if request.param == "server_search":
                where["vector_search"] = "server"
        cache = ResponseCache(
            where["url"], key_prefix=where["prefix"], sync_interval=0.0,
            vector_search=where.get("vector_search", "local"), **options,
        )  # fmt: skip
        caches.append(cache)
        return cache

    yield build
    for cache in caches:
        cache.close()


def test_a_served_answer_is_invalidated_in_every_process(make_cache: MakeCache) -> None:
    writer, reader = make_cache(), make_cache()
    assert writer.store(ask(FAQ), answer("Settings > Reset."))
    assert writer.store(ask(OTHER), answer("100 C."))
    hit = reader.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    assert writer.invalidate(hit) is True
    assert reader.lookup(ask(FAQ)) is None  # neither by its key
    assert reader.lookup(ask(PARAPHRASE)) is None  # nor by similarity
    assert reader.lookup_stale(ask(FAQ)) is None  # nor stale, when every route fails
    assert writer.lookup(ask(PARAPHRASE)) is None
    assert writer.invalidate(hit) is False  # gone already
    kept = reader.lookup(ask(OTHER))
    assert kept is not None
    assert kept.response.text == "100 C."
    assert writer.store(ask(FAQ), answer("Profile > Password."))  # a new answer is kept
    again = reader.lookup(ask(FAQ))
    assert again is not None
    assert again.response.text == "Profile > Password."


def test_a_request_invalidates_its_own_entry_in_its_scope(make_cache: MakeCache) -> None:
    cache = make_cache()
    acme = Scope(tenant="acme")
    assert cache.store(ask(FAQ), answer("acme's"), acme, tags=["plan:pro"])
    assert cache.store(ask(FAQ), answer("everyone's"))
    assert cache.invalidate(ask(FAQ), Scope(tenant="globex"), tags=["plan:pro"]) is False
    assert cache.invalidate(ask(FAQ), acme) is False  # (another partition: no tags)
    assert cache.invalidate(ask(PARAPHRASE), acme, tags=["plan:pro"]) is False  # exact only
    assert cache.invalidate(ask(FAQ), acme, tags=["plan:pro"]) is True
    assert cache.lookup(ask(FAQ), acme, tags=["plan:pro"]) is None
    kept = cache.lookup(ask(FAQ))
    assert kept is not None
    assert kept.response.text == "everyone's"


def test_async_invalidation(make_cache: MakeCache) -> None:
    cache = make_cache()

    async def main() -> None:
        assert await cache.astore(ask(FAQ), answer("A."))
        hit = await cache.alookup(ask(FAQ))
        assert hit is not None
        assert await cache.ainvalidate(hit) is True
        assert await cache.alookup(ask(FAQ)) is None

    anyio.run(main)


def test_what_names_no_entry_is_refused_or_false() -> None:
    cache = ResponseCache()
    assert cache.invalidate(answer("from a provider, not the cache")) is False
    with pytest.raises(RequestValidationError):
        cache.invalidate("How do I reset my password?")  # type: ignore[arg-type]


def test_invalidating_while_redis_is_away_raises() -> None:
    cache = ResponseCache("redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailableError):
        cache.invalidate(ask(FAQ))
    cache.close()


def test_a_guard_invalidates_the_answer_it_served_from_the_cache(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    guard = make_guard(fake, cache=True)
    first = guard.chat([{"role": "user", "content": FAQ}])
    assert guard.invalidate_cached(first) is False  # a provider's answer: no entry named
    hit = guard.chat([{"role": "user", "content": PARAPHRASE}])
    assert hit.route == "cache"
    assert guard.invalidate_cached(hit) is True
    again = guard.chat([{"role": "user", "content": FAQ}])
    assert again.route == "primary"
    assert fake.stats.requests == 2
    assert make_guard(fake).invalidate_cached(hit) is False  # (no cache)

    async def main() -> None:
        served = await guard.achat([{"role": "user", "content": FAQ}])
        assert served.route == "cache"
        assert await guard.ainvalidate_cached(served) is True
        assert (await guard.achat([{"role": "user", "content": FAQ}])).route == "primary"

    anyio.run(main)


def test_async_code_clears_a_namespace_without_holding_its_loop(make_cache: MakeCache) -> None:
    """``aclear``: ``clear``'s scripts (a bounded step each, many for a large namespace) run
    in a worker thread; the event loop serves its other tasks meanwhile."""
    cache, other = make_cache(semantic=False), make_cache(semantic=False)
    for number in range(300):
        assert cache.store(ask(f"{OTHER} ({number})"), answer("100 C."))
    ticks: list[int] = []

    async def main() -> None:
        done = anyio.Event()

        async def tick() -> None:
            while not done.is_set():
                ticks.append(1)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            await anyio.lowlevel.checkpoint()
            before = len(ticks)
            await cache.aclear()
            ticks[:before] = []
            done.set()

    anyio.run(main)
    assert ticks  # the loop went on while the namespace was cleared
    assert other.lookup(ask(f"{OTHER} (7)")) is None
