"""The in-memory cache bounded in bytes (``max_bytes``): an entry costs its stored answer and
its vector, and the least recently used go first, as with ``max_entries``."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import ConfigurationError
from tests.test_cache import answer, ask

BIG = "x" * 10_000


def _held(cache: ResponseCache, questions: list[str]) -> list[bool]:
    return [cache.lookup(ask(question)) is not None for question in questions]


def test_large_answers_evict_the_least_recently_used_first() -> None:
    """Bounded by count only, three 10 KB answers cost what three short ones cost."""
    cache = ResponseCache(semantic=False, max_bytes=25_000)
    questions = [f"question {i}" for i in range(4)]
    assert cache.store(ask(questions[0]), answer(BIG))
    assert cache.store(ask(questions[1]), answer(BIG))
    assert _held(cache, questions[:1]) == [True]  # question 0 is now the most recent
    assert cache.store(ask(questions[2]), answer(BIG))  # over 25 KB: question 1 goes
    assert _held(cache, questions[:3]) == [True, False, True]
    for i in range(50):  # short answers: many fit where the large ones were
        assert cache.store(ask(f"short {i}"), answer("ok"))
    assert all(_held(cache, [f"short {i}" for i in range(50)]))


def test_an_entry_stored_again_is_counted_once() -> None:
    cache = ResponseCache(semantic=False, max_bytes=25_000)
    for _ in range(5):
        assert cache.store(ask("same"), answer(BIG))
    assert cache.store(ask("other"), answer(BIG))
    assert _held(cache, ["same", "other"]) == [True, True]
    cache.clear()
    assert cache.store(ask("after"), answer(BIG))
    assert cache.store(ask("clear"), answer(BIG))
    assert _held(cache, ["after", "clear"]) == [True, True]


def test_an_answer_larger_than_the_bound_is_not_stored() -> None:
    cache = ResponseCache(semantic=False, max_bytes=5_000)
    assert cache.store(ask("small"), answer("ok"))
    assert not cache.store(ask("huge"), answer(BIG))
    assert _held(cache, ["small", "huge"]) == [True, False]  # nothing evicted for it
    assert cache.stats.stores == 1


def test_vectors_count_too() -> None:
    """The hashing embedder's vectors take 2 KB each (1,024 float16): short answers with
    their vectors fit twice in 5,000 bytes."""
    cache = ResponseCache(max_bytes=5_000)
    questions = [f"How do I configure product number {i}?" for i in range(4)]
    for question in questions:
        assert cache.store(ask(question), answer("Open the settings."))
    assert _held(cache, questions) == [False, False, True, True]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1000", True])
def test_a_bad_bound_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_bytes"):
        ResponseCache(max_bytes=bad)


def test_a_redis_cache_takes_no_byte_bound(redis_url: str, redis_prefix: str) -> None:
    """Redis bounds its memory itself (``maxmemory``): a bound this process cannot keep is
    refused, not silently ignored."""
    with pytest.raises(ConfigurationError, match="max_bytes"):
        ResponseCache(redis_url, key_prefix=redis_prefix, max_bytes=1_000_000)


MIB = 1024 * 1024


def test_a_memory_cache_is_bounded_in_bytes_by_default() -> None:
    """``ResponseCache()`` kept 10,000 entries whatever their size: 200 answers of 1 MB held
    200 MB, and the default bound could reach 10 GB. It now keeps 256 MiB at most, the least
    recently used going first."""
    cache = ResponseCache(semantic=False)
    big = "x" * (MIB - 4096)  # (just under the cap on one answer)
    for i in range(300):
        assert cache.store(ask(f"question {i}"), answer(big))
    held = sum(_held(cache, [f"question {i}" for i in range(300)]))
    assert 240 <= held <= 256  # 256 MiB of entries of about 1 MiB each
    assert _held(cache, ["question 0", "question 299"]) == [False, True]


def test_an_answer_larger_than_the_cap_on_one_entry_is_not_stored_and_is_counted() -> None:
    """A 2 MB answer filled an eighth of the memory bound alone. Above ``max_entry_bytes``
    (1 MiB by default, as LiteLLM's in-memory cache caps an item) it is not stored, and
    ``stats.too_large`` counts it."""
    cache = ResponseCache(semantic=False)
    assert cache.store(ask("small"), answer("ok"))
    assert not cache.store(ask("huge"), answer("x" * (2 * MIB)))
    assert _held(cache, ["small", "huge"]) == [True, False]
    assert (cache.stats.stores, cache.stats.too_large) == (1, 1)
    capped = ResponseCache(semantic=False, max_entry_bytes=5_000)
    assert not capped.store(ask("big"), answer(BIG))
    assert capped.store(ask("small"), answer("ok"))
    assert capped.stats.too_large == 1
    unbounded = ResponseCache(semantic=False, max_entry_bytes=None, max_bytes=None)
    assert unbounded.store(ask("huge"), answer("x" * (2 * MIB)))


def test_an_answer_larger_than_the_whole_bound_is_counted_too() -> None:
    cache = ResponseCache(semantic=False, max_bytes=5_000)
    assert not cache.store(ask("huge"), answer(BIG))
    assert cache.stats.too_large == 1


def test_a_redis_cache_caps_one_entry_too(redis_url: str, redis_prefix: str) -> None:
    """The default byte bound is the memory cache's (a Redis cache takes the default without
    a ConfigurationError); the cap on one entry holds in Redis as well."""
    cache = ResponseCache(redis_url, key_prefix=redis_prefix, semantic=False)
    try:
        assert not cache.store(ask("huge"), answer("x" * (2 * MIB)))
        assert cache.store(ask("small"), answer("ok"))
        assert _held(cache, ["small", "huge"]) == [True, False]
        assert (cache.stats.too_large, cache.stats.errors) == (1, 0)
    finally:
        cache.clear()
        cache.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1000", True])
def test_a_bad_cap_on_one_entry_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_entry_bytes"):
        ResponseCache(max_entry_bytes=bad)


@pytest.mark.parametrize("semantic", [False, True])
def test_an_oversize_answer_drops_the_older_entry_in_redis_as_in_memory(
    redis_url: str, redis_prefix: str, semantic: bool
) -> None:
    """A refresh whose new answer was over ``max_entry_bytes`` left the older entry in Redis
    (the memory backend drops it): the old answer went on being served, by its key and by
    similarity, in every process. Now it goes in Redis too, for the other processes as well."""
    options: dict[str, Any] = {"semantic": semantic, "max_entry_bytes": 5_000}
    cache = ResponseCache(redis_url, key_prefix=redis_prefix, **options)
    other = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0.0, **options)
    memory = ResponseCache(**options)
    try:
        for held in (cache, memory):
            assert held.store(ask("What changed?"), answer("the old answer"))
            assert held.lookup(ask("What changed?")) is not None
        assert other.lookup(ask("What changed?")) is not None  # (indexed there too)
        for held in (cache, memory):
            assert not held.store(ask("What changed?"), answer(BIG), refresh=True)
            assert held.stats.too_large == 1
            assert held.lookup(ask("What changed?")) is None
            assert held.lookup_stale(ask("What changed?")) is None
        assert other.lookup(ask("What changed?")) is None
        assert other.lookup_stale(ask("What changed?")) is None
        assert cache.stats.errors == 0
    finally:
        cache.clear()
        cache.close()
        other.close()
