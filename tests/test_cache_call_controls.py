"""Per-call cache controls, as LiteLLM's ``no-cache`` / ``ttl`` / ``s-maxage``: a call that
refreshes its entry (``cache_refresh``), one whose answer lives its own time (``cache_ttl``),
one served only an entry young enough (``cache_max_age``)."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault
from tests.conftest import RawRedis
from tests.test_cache import FAQ, PARAPHRASE, answer, ask

MakeGuard = Callable[..., Guard]
QUESTION = [{"role": "user", "content": FAQ}]
SIMILAR = [{"role": "user", "content": PARAPHRASE}]


@pytest.fixture
def counting() -> Iterator[FakeProvider]:
    """A provider whose every answer is new: "answer 1", "answer 2" ..."""
    numbers = itertools.count(1)
    with FakeProvider(name="primary", reply=lambda body: f"answer {next(numbers)}") as fake:
        yield fake


def test_a_refresh_asks_the_provider_and_stores_its_new_answer(
    counting: FakeProvider, make_guard: MakeGuard
) -> None:
    """``cacheable=False`` skipped the cache both ways: an entry known to be out of date could
    not be replaced from a call (only invalidated, then asked again). ``cache_refresh=True``
    skips the read and stores the new answer, which the next calls are served."""
    cache = ResponseCache()
    guard = make_guard(counting, cache=cache)
    assert guard.chat(QUESTION).text == "answer 1"
    assert guard.chat(QUESTION).text == "answer 1"  # (from the cache)
    refreshed = guard.chat(QUESTION, cache_refresh=True)
    assert (refreshed.route, refreshed.text) == ("primary", "answer 2")
    again = guard.chat(QUESTION)
    assert (again.route, again.text) == ("cache", "answer 2")
    similar = guard.chat(SIMILAR)
    assert (similar.route, similar.text) == ("cache", "answer 2")
    assert counting.stats.requests == 2
    assert cache.stats.skipped == 1  # the refresh read nothing


def test_a_refresh_in_async_code_and_in_a_stream(
    counting: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(counting, cache=True)

    async def main() -> list[str]:
        texts = [(await guard.achat(QUESTION)).text]
        texts.append((await guard.achat(QUESTION, cache_refresh=True)).text)
        stream = await guard.achat(QUESTION, stream=True, cache_refresh=True)
        async with stream:
            texts.append("".join([chunk.text async for chunk in stream]))
        texts.append((await guard.achat(QUESTION)).text)
        await guard.aclose()
        return texts

    assert anyio.run(main) == ["answer 1", "answer 2", "answer 3", "answer 3"]
    with guard.chat(QUESTION, stream=True, cache_refresh=True) as stream:
        assert "".join(chunk.text for chunk in stream) == "answer 4"
    assert guard.chat(QUESTION).text == "answer 4"


def test_a_refresh_is_not_served_a_stale_answer_when_every_route_fails(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A call that asked for a new answer is not given the old one instead: the degraded
    answer (or its routes' error) is its answer."""
    cache = ResponseCache(ttl=0.2, stale_ttl=60)
    guard = make_guard(fake, cache=cache, degraded="Try again later.", breaker=None)
    guard.chat(QUESTION)
    time.sleep(0.3)  # expired: stale only
    fake.always(Fault(status=503))
    with waits_off():
        assert guard.chat(QUESTION, cache_refresh=True).route == "degraded"
        assert guard.chat(QUESTION).metadata["cache"] == "stale"  # (without the refresh)


def test_an_answer_lives_the_ttl_its_call_gives_it(
    counting: FakeProvider, make_guard: MakeGuard
) -> None:
    cache = ResponseCache(ttl=3600)
    guard = make_guard(counting, cache=cache)
    assert guard.chat(QUESTION, cache_ttl=0.2).text == "answer 1"
    assert guard.chat(QUESTION).route == "cache"
    time.sleep(0.3)
    assert guard.chat(QUESTION).text == "answer 2"  # expired: asked again, stored for an hour
    time.sleep(0.3)
    assert guard.chat(QUESTION).text == "answer 2"


def test_a_call_is_served_only_an_entry_younger_than_its_max_age(
    counting: FakeProvider, make_guard: MakeGuard
) -> None:
    cache = ResponseCache()
    guard = make_guard(counting, cache=cache)
    assert guard.chat(QUESTION).text == "answer 1"
    time.sleep(0.3)
    assert guard.chat(QUESTION, cache_max_age=60).route == "cache"
    assert guard.chat(SIMILAR, cache_max_age=60).route == "cache"
    assert guard.chat(SIMILAR, cache_max_age=0.2).text == "answer 2"  # by similarity: too old
    assert guard.chat(SIMILAR, cache_max_age=0.2).route == "cache"  # stored just now
    assert guard.chat(QUESTION, cache_max_age=0).text == "answer 3"  # (nothing is that young)


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("cache_refresh", "yes"),
        ("cache_refresh", 1),
        ("cache_ttl", 0),
        ("cache_ttl", -1.0),
        ("cache_ttl", math.nan),
        ("cache_ttl", math.inf),
        ("cache_ttl", "60"),
        ("cache_ttl", True),
        ("cache_max_age", -1),
        ("cache_max_age", math.nan),
        ("cache_max_age", "60"),
        ("cache_max_age", False),
    ],
)
def test_a_control_of_the_wrong_kind_is_a_typed_error(
    fake: FakeProvider, make_guard: MakeGuard, keyword: str, value: Any
) -> None:
    guard = make_guard(fake, cache=True)
    with pytest.raises(RequestValidationError, match=keyword):
        guard.chat(QUESTION, **{keyword: value})
    cache = ResponseCache()
    plain = keyword.removeprefix("cache_")
    with pytest.raises(RequestValidationError, match=plain):
        cache.lookup(ask(FAQ), **{plain: value})
    assert fake.stats.requests == 0


def test_the_controls_of_a_standalone_cache_in_redis(
    redis_url: str, redis_prefix: str, redis_client: RawRedis
) -> None:
    """The same controls as keywords of a lookup and a store (``refresh``, ``ttl``,
    ``max_age``), on a cache shared through Redis: an entry stored with its own ttl expires
    there with it (and its stale time)."""
    cache = ResponseCache(redis_url, key_prefix=redis_prefix, ttl=3600, stale_ttl=10)
    try:
        assert cache.store(ask(FAQ), answer("a"), ttl=5)
        (key,) = redis_client.keys(f"{redis_prefix}:cache:*:e:*")
        assert 14_000 < redis_client.pttl(key) <= 15_000
        assert cache.lookup(ask(FAQ), refresh=True) is None
        assert cache.lookup(ask(FAQ), max_age=60) is not None
        time.sleep(0.3)
        assert cache.lookup(ask(FAQ), max_age=0.2) is None
        assert cache.lookup(ask(PARAPHRASE), max_age=0.2) is None
        assert cache.lookup_stale(ask(FAQ), max_age=0.2) is not None  # (a last resort)
        assert cache.lookup_stale(ask(FAQ), refresh=True) is None
        assert (cache.stats.exact_hits, cache.stats.skipped) == (1, 1)
    finally:
        cache.clear()
        cache.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[RawRedis]:
    import redis

    client: RawRedis = redis.Redis.from_url(redis_url)
    yield client
    client.close()
