"""A loop's own async client is closed as its loop shuts down (``asyncio.run()``'s end), not
forgotten open: a Redis store's per-loop async client left its sockets open until it was
collected, and a cluster client's collection reported "Unclosed RedisCluster client" to a
later loop. A loop closed without that shutdown, or an object taken with ``pop_current``,
is forgotten unclosed, as before."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
import warnings
from typing import Any

import pytest

from llmguard_sdk import PerLoop
from llmguard_sdk.store import RedisStore

from .conftest import RawRedis, redis_store


class _Client:
    """An async client of the test's own: records its closes."""

    def __init__(self, closes: list[_Client]) -> None:
        self._closes = closes

    async def aclose(self) -> None:
        self._closes.append(self)


def _named_connections(url: str, name: str) -> int:
    """How many connections Redis at ``url`` has from clients named ``name``, once the ones
    closed by now are gone (Redis drops a closed one at its next turn: at most 5 s)."""
    import redis

    admin: RawRedis = redis.Redis.from_url(url)
    try:
        give_up = time.monotonic() + 5.0
        while True:
            count = sum(1 for c in admin.client_list() if c.get("name") == name)
            if count == 0 or time.monotonic() > give_up:
                return count
            time.sleep(0.01)
    finally:
        admin.close()


def test_a_loops_redis_client_is_closed_as_asyncio_run_ends(
    redis_url: str, redis_prefix: str
) -> None:
    name = f"perloop-{uuid.uuid4().hex[:8]}"
    store = RedisStore(f"{redis_url}?client_name={name}", key_prefix=redis_prefix)
    try:

        async def ping() -> bool:
            client: RawRedis = store.aclient
            return bool(await client.ping())

        assert asyncio.run(ping())
        assert _named_connections(redis_url, name) == 0  # (was 1, until it was collected)
        assert asyncio.run(ping())  # a fresh client on the next loop
    finally:
        store.close()


def test_a_loops_cluster_client_is_closed_and_not_reported_to_a_later_loop(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    store = redis_store(redis_cluster_url, cluster_prefix)
    told: list[dict[str, Any]] = []
    try:

        async def ping() -> bool:
            client: RawRedis = store.aclient
            return bool(await client.ping())

        async def later() -> None:
            asyncio.get_running_loop().set_exception_handler(lambda _loop, c: told.append(c))
            client: RawRedis = store.aclient  # (forgets the first loop's client)
            await client.ping()
            gc.collect()

        assert asyncio.run(ping())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            asyncio.run(later())
        assert [c["message"] for c in told] == []  # was "Unclosed RedisCluster client"
        assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []
    finally:
        store.close()


def test_objects_are_closed_at_their_loops_shutdown_and_forgotten_otherwise() -> None:
    closes: list[_Client] = []
    per_loop = PerLoop(lambda: _Client(closes))

    async def get() -> _Client:
        return per_loop.get()

    first = asyncio.run(get())
    assert closes == [first]  # closed as asyncio.run ended
    assert not per_loop.open_elsewhere()

    loop = asyncio.new_event_loop()
    second = loop.run_until_complete(get())
    loop.close()  # without shutdown_asyncgens(): nothing to close it on
    assert not per_loop.open_elsewhere()  # forgotten
    assert closes == [first]

    async def taken() -> _Client | None:
        per_loop.get()
        return per_loop.pop_current()

    third = asyncio.run(taken())
    assert third is not None
    assert third is not second
    assert closes == [first]  # the caller's to close


def test_a_close_that_fails_at_shutdown_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def fail(_: object) -> None:
        raise OSError("no close")

    per_loop = PerLoop(object, close=fail)

    async def get() -> object:
        return per_loop.get()

    asyncio.run(get())
    assert "no close" in caplog.text
    assert not per_loop.open_elsewhere()
