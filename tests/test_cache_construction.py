"""Building a Redis-backed response cache sends nothing to Redis: it checked the server at
construction (whether it has vector sets, whether the namespace keeps its vectors this
cache's way), so building one failed slowly or blocked while Redis was down or silent (a
socket timeout per check) and logged that Redis was unreachable. Now the first lookup or
store makes those checks, and raises their ``ConfigurationError`` (tests/test_cache_vector_kinds.py,
tests/test_cache_server_search.py); while Redis is away that use misses, as any other."""

from __future__ import annotations

import logging
import socket
import time

import pytest
import with_redis

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.store import RedisStore
from tests.loopback import LoopbackServer
from tests.test_cache import FAQ, answer, ask

KINDS = ["local", "server"]


class SilentServer(LoopbackServer):
    """Accepts connections and never answers (a Redis host that hangs)."""

    def __init__(self) -> None:
        self.accepted = 0
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        self.accepted += 1
        self.open.append(conn)


@pytest.mark.parametrize("kind", KINDS)
def test_building_a_cache_with_redis_down_neither_raises_nor_logs(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{with_redis.free_port()}/0"  # (a closed loopback port)
    with caplog.at_level(logging.DEBUG, logger="llmguard_sdk"):
        cache = ResponseCache(url, vector_search=kind)  # type: ignore[arg-type]
    try:
        assert [r.getMessage() for r in caplog.records] == []
        assert isinstance(cache.state, RedisStore)
        assert cache.state.health.failures == 0  # nothing was tried
        # the first use: a miss and nothing stored, as in any outage
        assert cache.lookup(ask(FAQ)) is None
        assert not cache.store(ask(FAQ), answer("a"))
    finally:
        cache.close()


@pytest.mark.parametrize("kind", KINDS)
def test_building_a_cache_over_a_silent_redis_does_not_block(kind: str) -> None:
    """(Each check waited for its socket timeout, 0.5 s.)"""
    with SilentServer() as silent:
        started = time.monotonic()
        cache = ResponseCache(f"redis://127.0.0.1:{silent.port}/0", vector_search=kind)  # type: ignore[arg-type]
        built = time.monotonic() - started
        try:
            assert silent.accepted == 0
            assert built < 0.25
            started = time.monotonic()
            assert cache.lookup(ask(FAQ)) is None  # a use waits its socket timeout, once
            assert time.monotonic() - started < 3.0
        finally:
            cache.close()
