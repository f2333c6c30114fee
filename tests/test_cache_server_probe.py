"""The first-use check of ``vector_search="server"`` (does the server have vector sets?) on a
real Redis 8 that answers it with a transient error.

Any error reply to the probe was taken for a server without vector sets: a ``BUSY`` (a
long script), ``CLUSTERDOWN`` / ``TRYAGAIN`` (a cluster failover) or ``MASTERDOWN`` reply
raised ``ConfigurationError`` and failed the whole Guard call before its provider was asked.
Only the server's "unknown command" reply says it has none; any other is an outage: a miss,
and the probe tried again at a later use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis8
import with_redis

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.cache import RedisCacheBackend, ResponseCache
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider
from tests.conftest import require

QUESTION = [{"role": "user", "content": "How do I reset my password on the mobile app?"}]


@pytest.fixture
def busy_redis8() -> Iterator[tuple[str, Any]]:
    """A throwaway Redis 8 of this test's own (it is made busy), and a client on it."""
    binary = redis8.binary()
    require(binary is not None, redis8.missing_reason())
    assert binary is not None
    with with_redis.throwaway(binary) as url:
        admin: Any = redis.Redis.from_url(url)
        yield url, admin
        admin.close()


def _run_a_long_script(url: str, admin: Any) -> threading.Thread:
    """Start a script that loops until ``SCRIPT KILL``; return once Redis answers BUSY."""
    admin.config_set("busy-reply-threshold", 10)  # (BUSY replies after 10 ms, not 5 s)
    blocker: Any = redis.Redis.from_url(url)

    def loop() -> None:
        try:
            blocker.eval("while true do end", 0)
        except redis.ResponseError:
            pass  # killed
        finally:
            blocker.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    for _ in range(500):  # (bounded: 5 s at most)
        try:
            admin.ping()
        except redis.ResponseError as exc:
            if str(exc).startswith("BUSY"):
                return thread
            raise
        time.sleep(0.01)
    raise AssertionError("Redis never answered BUSY")


def test_a_busy_reply_to_the_vector_set_probe_is_a_miss_not_a_configuration_error(
    busy_redis8: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, admin = busy_redis8
    cache = ResponseCache(url, key_prefix="probe-busy", vector_search="server")
    with FakeProvider(model="fake-model", name="primary") as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary")
        guard = Guard([provider], cache=cache, environ={})
        try:
            thread = _run_a_long_script(url, admin)
            try:
                # The probe is the cache's first command: BUSY is an outage, the call a miss.
                assert guard.chat(QUESTION).route == "primary"
                backend = cache._backend
                assert isinstance(backend, RedisCacheBackend)
                assert backend.check_vector_search() is False  # (not raised either)
            finally:
                admin.script_kill()
                thread.join(10)
            assert fake.stats.requests == 1
            assert isinstance(cache.state, RedisStore)
            cache.state.health.down_until = time.monotonic() - 0.01  # any pause is over
            # The probe is tried again, passes, and the cache works.
            assert guard.chat(QUESTION).route == "primary"
            again = guard.chat(QUESTION)
            assert (again.route, again.metadata["cache"]) == ("cache", "exact")
            assert fake.stats.requests == 2
        finally:
            guard.close()
    assert not [r for r in caplog.records if "needs a Redis with vector sets" in r.getMessage()]
