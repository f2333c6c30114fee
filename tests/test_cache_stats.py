"""The cache's counters under threads, the false-hit rate, and reports of served answers."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from llmguard_sdk.cache import HashingEmbedder, ResponseCache
from llmguard_sdk.errors import ConfigurationError, RequestValidationError
from tests.test_cache import FAQ, PARAPHRASE, answer, ask


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads switched as often as the interpreter allows (lost updates show at once)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_counters_lose_no_update_when_threads_count_at_once(frequent_switches: None) -> None:
    """``guard_rejections[reason] = get(reason, 0) + 1`` from many threads lost counts (a
    thread switch between the read and the write: about 100,000 of 160,000 counted in a
    tight loop on CPython 3.11; every ``+=`` loses them on a free-threaded build). The
    cache counts through its stats' own updates, under a lock."""
    cache = ResponseCache()
    cache.store(ask("How many days are there in 3 weeks?"), answer("21"))
    assert cache.lookup(ask("How many days are there in 4 weeks?")) is None
    assert cache.stats.guard_rejections == {"number": 1}  # the number guard refused it
    threads, rounds = 8, 5_000

    def count() -> None:
        for _ in range(rounds):
            cache.stats._reject("number")
            cache.stats._add("misses")

    workers = [threading.Thread(target=count) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert cache.stats.guard_rejections == {"number": 1 + threads * rounds}
    assert cache.stats.misses == 1 + threads * rounds


def test_the_false_hit_rate_never_exceeds_one() -> None:
    """A stale hit found by similarity, reported, counted as a false hit but not as a
    semantic hit (2 false hits over 1 semantic hit: a rate of 2.0); and a hit reported
    twice counted twice."""
    cache = ResponseCache(ttl=1.5, stale_ttl=30)  # (fresh for the lookups right after)
    cache.store(ask(FAQ), answer("a"))
    stored = time.monotonic()
    fresh = cache.lookup(ask(PARAPHRASE))
    assert fresh is not None
    assert fresh.kind == "semantic"
    cache.report_false_hit(fresh)
    time.sleep(max(0.0, stored + 1.6 - time.monotonic()))
    stale = cache.lookup_stale(ask(PARAPHRASE))
    assert stale is not None
    assert (stale.kind, stale.matched) == ("stale", "semantic")
    cache.report_false_hit(stale)
    assert cache.stats.false_hit_rate == 1.0  # 2 wrong answers of 2 found by similarity
    assert cache.stats.stale_semantic_hits == 1
    cache.report_false_hit(stale)  # the same wrong answer reported again
    assert cache.stats.false_hits == 3
    assert cache.stats.false_hit_rate == 1.0


def test_a_served_answer_is_reported_with_what_its_metadata_say() -> None:
    """A Guard's caller holds the answer, not the CacheHit: its metadata say how the entry
    was found and which cache served it, and the report takes the answer itself."""
    cache = ResponseCache()
    cache.store(ask(FAQ), answer("a"))
    hit = cache.lookup(ask(PARAPHRASE))
    assert hit is not None
    found = {"cache": "semantic", "cache_matched": "semantic"}
    unnamed = answer("a").model_copy(update={"metadata": found})
    assert not cache.report_false_hit(unnamed)  # which cache served it? not this one's
    served = unnamed.model_copy(update={"metadata": {**found, "cache_served_by": hit.served_by}})
    assert cache.report_false_hit(served)
    exact = answer("a").model_copy(
        update={"metadata": {"cache": "exact", "cache_matched": "exact"}}
    )
    assert not cache.report_false_hit(exact)
    assert not cache.report_false_hit(answer("from a provider"))
    assert cache.stats.false_hits == 1
    with pytest.raises(RequestValidationError):
        cache.report_false_hit("the answer's text")  # type: ignore[arg-type]


def test_what_is_not_a_request_an_answer_or_a_deadline_is_a_typed_error() -> None:
    """A text given as the request, the answer or the deadline raised ``AttributeError`` or
    ``TypeError`` from deep inside the cache."""
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="ChatRequest"):
        cache.lookup("How do I reset my password?")  # type: ignore[arg-type]
    with pytest.raises(RequestValidationError, match="ChatResponse"):
        cache.store(ask(FAQ), "the answer")  # type: ignore[arg-type]
    with pytest.raises(RequestValidationError, match="deadline"):
        cache.store(ask(FAQ), answer("a"), deadline="5")  # type: ignore[arg-type]
    with pytest.raises(RequestValidationError, match="deadline"):
        cache.lookup(ask(FAQ), deadline=True)
    assert cache.lookup(ask(FAQ), deadline=time.monotonic() + 5) is None


def test_an_openai_embedder_with_a_timeout_or_dimension_of_the_wrong_kind_is_refused() -> None:
    """A text timeout failed at the first embedding (``min`` of a text and a number); a
    negative one made every request time out at once."""
    from llmguard_sdk.cache import OpenAIEmbedder
    from llmguard_sdk.errors import ConfigurationError

    for options in ({"timeout": "10"}, {"timeout": -1.0}, {"timeout": float("nan")}):
        with pytest.raises(ConfigurationError, match="timeout"):
            OpenAIEmbedder("http://127.0.0.1:1/v1", "m", 8, **options)
    with pytest.raises(ConfigurationError, match="dimension"):
        OpenAIEmbedder("http://127.0.0.1:1/v1", "m", 0)


@pytest.mark.parametrize("api_key", ["", " sk-embed-key\n"])
def test_an_openai_embedder_refuses_an_empty_key_as_routes_do(api_key: str) -> None:
    """``api_key=""`` sent no key without a word (each embedding then a 401, read as the
    endpoint failing); routes refuse an empty key, or one with whitespace around it."""
    from llmguard_sdk.cache import OpenAIEmbedder
    from llmguard_sdk.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="api_key is empty"):
        OpenAIEmbedder("http://127.0.0.1:1/v1", "m", 8, api_key=api_key)
    OpenAIEmbedder("http://127.0.0.1:1/v1", "m", 8).close()  # no key: none sent, as before


def test_the_recent_embeddings_keep_no_long_query_text() -> None:
    """The last 256 queries' embeddings were kept under the query's text: 256 long prompts
    (documents pasted in, say) held their whole text, 256 MB for prompts of 1 MB, however
    small the vectors. A long query is kept under its digest instead."""
    cache = ResponseCache()
    long_query = "Please summarise this report. " + "word " * 200_000  # about 1 MB
    request = ask(long_query)
    assert cache.lookup(request) is None
    assert cache.store(request, answer("a summary"))
    assert cache.lookup(request) is not None  # exact
    kept = list(cache._recent._recent)
    assert kept
    assert max(len(key) for key in kept) <= 2048
    assert cache._recent.embedded(long_query) is cache._recent.embedded(long_query)  # found


def test_cache_options_of_the_wrong_kind_are_typed_errors() -> None:
    """``cacheable="no"`` (a text, so true) cached the answer, and ``keys=`` given something
    other than a CacheKeys raised ``AttributeError`` from inside the lookup."""
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="cacheable"):
        cache.store(ask(FAQ), answer("a"), cacheable="no")  # type: ignore[arg-type]
    assert cache.lookup(ask(FAQ)) is None  # nothing was stored
    with pytest.raises(RequestValidationError, match="keys"):
        cache.lookup(ask(FAQ), keys="abc")  # type: ignore[arg-type]


class _ShortVectors(HashingEmbedder):
    """Says 1,024 dimensions; once ``short``, returns 100 (a model swapped behind it)."""

    short = False

    def embed(self, texts: Sequence[str]) -> Any:
        vectors = super().embed(texts)
        return vectors[:, :100] if self.short else vectors


def test_an_embedding_of_the_wrong_size_is_a_typed_error_before_anything_is_written() -> None:
    """An embedder whose vectors are not the size it declares raised numpy's ``ValueError``
    from the index, after the entry was written: a stored entry no search could find."""
    embedder = _ShortVectors()
    cache = ResponseCache(embedder=embedder)
    cache.store(ask(FAQ), answer("a"))
    cache.store(ask("How do I change my e-mail address?"), answer("b"))
    embedder.short = True
    assert cache.lookup(ask(PARAPHRASE)) is None  # a miss, logged
    parcel = ask("Where is my parcel?")
    with pytest.raises(ConfigurationError, match="100"):
        cache.store(parcel, answer("c"))
    embedder.short = False
    assert cache.lookup(parcel) is None  # nothing was written
