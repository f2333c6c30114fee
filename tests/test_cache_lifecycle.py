"""The response cache's lifecycle: what ``close()`` / ``aclose()`` stop and release, and what
they leave alone (a user's embedder)."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import FalseHitMonitor, HashingEmbedder, ResponseCache
from tests.test_cache import answer as _answer
from tests.test_cache import ask as _ask

QUESTION = "How do I configure topic1?"
PARAPHRASE = "How can I configure topic1?"


def _monitor() -> FalseHitMonitor:
    return FalseHitMonitor(lambda request: _answer("a"), sample_rate=1.0)


class _ClosableEmbedder(HashingEmbedder):
    """The hashing embedder with a ``close`` that counts its calls (a user's, not the cache's)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def _served_once(cache: ResponseCache, monitor: FalseHitMonitor) -> None:
    """A semantic hit, sampled: the monitor's worker starts and stays for the next check."""
    cache.store(_ask(QUESTION), _answer("a"))
    assert cache.lookup(_ask(PARAPHRASE)) is not None
    assert monitor.wait_idle(10)
    assert monitor._worker is not None
    assert monitor._worker.is_alive()


def test_close_stops_the_monitors_worker_and_a_closed_cache_starts_none() -> None:
    """``close()`` left the monitor's background thread running; a lookup after it started
    another one."""
    monitor = _monitor()
    embedder = _ClosableEmbedder()
    cache = ResponseCache(namespace="n", monitor=monitor, embedder=embedder, threshold=0.3,
                          strict=False)  # fmt: skip
    _served_once(cache, monitor)
    worker = monitor._worker
    assert worker is not None
    cache.close()
    assert not worker.is_alive()  # close() waited for it (bounded)
    assert cache.lookup(_ask(PARAPHRASE)) is not None  # still answers from memory...
    assert monitor._worker is worker  # ... but samples nothing: no new thread
    assert embedder.closed == 0  # the user's embedder is not the cache's to close
    cache.close()  # twice: nothing left to do


@pytest.mark.anyio
async def test_aclose_stops_the_monitor_and_closes_the_async_redis_client(
    redis_url: str, redis_prefix: str
) -> None:
    """There was no ``aclose()``: the async Redis client of a cache used from async code
    stayed open, and the monitor's thread ran on."""
    monitor = _monitor()
    cache = ResponseCache(redis_url, key_prefix=redis_prefix, namespace="n", monitor=monitor,
                          threshold=0.3, strict=False, sync_interval=0.0)  # fmt: skip
    assert await cache.astore(_ask(QUESTION), _answer("a"))
    assert await cache.alookup(_ask(PARAPHRASE)) is not None
    assert monitor.wait_idle(10)
    worker = monitor._worker
    assert worker is not None
    assert worker.is_alive()
    clients = cache.state._aclients  # type: ignore[attr-defined]
    assert clients.open_elsewhere()  # this loop's client
    await cache.aclose()
    assert not worker.is_alive()
    assert not clients.open_elsewhere()
    assert await cache.alookup(_ask(PARAPHRASE)) is not None  # reconnects, samples nothing
    assert monitor._worker is worker
    await cache.aclose()


def test_the_cache_closes_with_a_with_block() -> None:
    monitor = _monitor()
    with ResponseCache(namespace="n", monitor=monitor, threshold=0.3, strict=False) as cache:
        _served_once(cache, monitor)
    assert monitor._worker is not None
    assert not monitor._worker.is_alive()
