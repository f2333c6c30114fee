"""A false hit is reported to the cache that served it.

``report_false_hit`` took any semantic hit: one served by another cache (another namespace)
fed this cache's ``false_hit_rate`` and its monitor, which raised *this* namespace's
threshold and then stopped its semantic hits, though none of them was ever wrong. A hit now
names the cache that served it (its namespace, and where its entries live: the Redis key
prefix, shared by every process, or this in-memory cache alone); a report of a hit another
cache served counts nothing and returns False.
"""

from __future__ import annotations

from collections.abc import Callable

from llmguard_sdk import ChatResponse, Guard
from llmguard_sdk.cache import FalseHitMonitor, ResponseCache
from llmguard_sdk.testing import FakeProvider
from tests.test_cache import FAQ, PARAPHRASE, answer, ask

MakeGuard = Callable[..., Guard]


def _monitor() -> FalseHitMonitor:
    """A monitor that acts on the first report (no background checks)."""
    return FalseHitMonitor(
        lambda request: ChatResponse(text="x", finish_reason="stop"),
        sample_rate=0.0,
        min_checks=1,
        window=1,
    )


def test_a_hit_of_another_namespace_feeds_neither_the_stats_nor_the_monitor() -> None:
    monitor = _monitor()
    faq = ResponseCache(namespace="faq")
    support = ResponseCache(namespace="support", monitor=monitor)
    faq.store(ask(FAQ), answer("reset it in the app"))
    hit = faq.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    for _ in range(5):
        assert not support.report_false_hit(hit)
    assert support.stats.false_hits == 0
    assert "support" not in monitor.metrics()  # nothing raised, nothing stopped
    support.store(ask(FAQ), answer("ask the support desk"))
    served = support.lookup(ask(PARAPHRASE))
    assert served is not None
    assert served.kind == "semantic"  # still served by similarity
    assert faq.report_false_hit(hit)  # the cache that served it takes it
    assert faq.stats.false_hits == 1


def test_a_hit_of_another_in_memory_cache_of_the_same_namespace_is_not_counted() -> None:
    one, other = ResponseCache(), ResponseCache()
    one.store(ask(FAQ), answer("a"))
    hit = one.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert not other.report_false_hit(hit)
    assert other.stats.false_hits == 0
    assert one.report_false_hit(hit)


def test_a_guards_answer_is_reported_to_the_guard_whose_cache_served_it(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    question = [{"role": "user", "content": FAQ}]
    paraphrase = [{"role": "user", "content": PARAPHRASE}]
    faq = make_guard(fake, cache=ResponseCache(namespace="faq"))
    support_cache = ResponseCache(namespace="support", monitor=_monitor())
    support = make_guard(fake, cache=support_cache)
    faq.chat(question)
    similar = faq.chat(paraphrase)
    assert similar.metadata["cache_matched"] == "semantic"
    assert not support.report_false_hit(similar)
    assert support_cache.stats.false_hits == 0
    assert faq.report_false_hit(similar)


def test_processes_sharing_a_redis_namespace_take_each_others_reports(
    redis_url: str, redis_prefix: str
) -> None:
    """Two caches on one Redis namespace are one cache (two processes: a report may reach
    another worker than the one that served the answer); another namespace or another key
    prefix on that Redis is another cache."""
    served_here = ResponseCache(redis_url, key_prefix=redis_prefix, namespace="faq")
    elsewhere = ResponseCache(redis_url, key_prefix=redis_prefix, namespace="faq")
    other_namespace = ResponseCache(redis_url, key_prefix=redis_prefix, namespace="support")
    other_prefix = ResponseCache(redis_url, key_prefix=redis_prefix + "-b", namespace="faq")
    try:
        served_here.store(ask(FAQ), answer("a"))
        hit = served_here.lookup(ask(PARAPHRASE))
        assert hit is not None
        assert hit.kind == "semantic"
        assert elsewhere.report_false_hit(hit)
        assert not other_namespace.report_false_hit(hit)
        assert not other_prefix.report_false_hit(hit)
        assert (other_namespace.stats.false_hits, other_prefix.stats.false_hits) == (0, 0)
    finally:
        for cache in (served_here, elsewhere, other_namespace, other_prefix):
            cache.close()
