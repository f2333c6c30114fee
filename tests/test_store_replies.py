"""A script whose reply is lost runs once: the store's Redis clients send no command twice;
and a pooled connection that went dead while idle is replaced before a command goes out.

A loopback proxy in front of a real Redis forwards a script call, lets Redis run it, then
drops the connection instead of relaying the reply (as a network cut or a killed proxy
would). redis-py retried such a call once by default: the script (a rate-limit acquire, a
budget reserve) ran twice. The same proxy can forget the connections open at a moment (as a
NAT or a load balancer does with idle ones): their bytes go nowhere, or come back as a reset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import anyio
import pytest

from llmguard_sdk._state.steps import Step, arun, run
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.ratelimit.redis import RedisRateLimiter
from llmguard_sdk.store import RedisScripts, RedisStore, redis_errors

from .conftest import RawRedis
from .loopback import LoopbackServer

if TYPE_CHECKING:
    import redis.asyncio

INCR = "return redis.call('INCR', KEYS[1])"


@dataclasses.dataclass
class _Pair:
    """One connection through the proxy: the client's end, Redis's end, and its faults."""

    client: socket.socket
    upstream: socket.socket
    lose: threading.Event = dataclasses.field(default_factory=threading.Event)
    forgotten: str = ""  # "", "silent" or "reset"


class FaultyProxy(LoopbackServer):
    """Forwards loopback connections (to ``port``) to Redis at ``redis_port``. Once armed,
    the first reply to an EVALSHA is dropped with its connection (Redis ran the script; the
    client never hears so). :meth:`forget` makes the connections open now go dead without a
    word."""

    def __init__(self, redis_port: int) -> None:
        self.redis_port = redis_port
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self.pairs: list[_Pair] = []  # one a connection accepted
        self.forgets_new = ""
        super().__init__()

    def forget(self, how: str, *, new_too: bool = False) -> None:
        """The connections open now (``new_too``: and those to come, as before a hung
        Redis) are forgotten: ``"silent"``, their bytes go nowhere and nothing closes them;
        ``"reset"``, the next byte from the client is answered by a reset."""
        for pair in self.pairs:
            pair.forgotten = how
        self.forgets_new = how if new_too else ""

    def handle(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.redis_port))
        pair = _Pair(conn, upstream, forgotten=self.forgets_new)
        self.pairs.append(pair)
        self.open += [conn, upstream]
        for pump in (self._up, self._down):
            threading.Thread(target=pump, args=(pair,), daemon=True).start()

    def _up(self, pair: _Pair) -> None:
        for data in _chunks(pair.client):
            if pair.forgotten == "reset":
                linger = struct.pack("ii", 1, 0)  # close with a reset
                pair.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                pair.client.close()
                return
            if pair.forgotten:
                continue
            if b"EVALSHA" in data.upper() and self.armed.is_set():
                self.armed.clear()
                pair.lose.set()  # before Redis can answer
            pair.upstream.sendall(data)

    def _down(self, pair: _Pair) -> None:
        for data in _chunks(pair.upstream):
            if pair.lose.is_set():  # the script ran: its reply goes nowhere
                self.dropped.set()
                for end in (pair.client, pair.upstream):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)
                return
            if not pair.forgotten:
                pair.client.sendall(data)


def _chunks(end: socket.socket) -> Iterator[bytes]:
    while True:
        try:
            data = end.recv(65536)
        except OSError:
            return
        if not data:
            return
        yield data


async def _aping(client: redis.asyncio.Redis) -> bool:
    """``PING`` on an async client (redis-py types its reply ``Awaitable[bool] | bool``)."""
    reply = client.ping()
    assert not isinstance(reply, bool)
    return await reply


def test_a_script_whose_reply_is_lost_runs_once(redis_url: str, redis_prefix: str) -> None:
    """The lost reply is a Redis error (the stage decides locally, as for any Redis
    failure), not a second run of the script; the next call goes through."""
    import redis
    from redis.connection import parse_url

    where = parse_url(redis_url)  # type: ignore[no-untyped-call]
    direct: RawRedis = redis.Redis.from_url(redis_url)
    direct.script_load(INCR)  # so that the proxied EVALSHA runs it at once
    key = f"{redis_prefix}:replies:{{t}}:n"
    with FaultyProxy(where.get("port", 6379)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/{where.get('db', 0)}"
        store = RedisStore(url, key_prefix=redis_prefix)
        scripts = RedisScripts(store, INCR)

        def incr() -> Step[int]:
            reply: int = yield scripts.command(0, [key])
            return reply

        ran = int(direct.get(key) or 0)
        proxy.armed.set()
        with pytest.raises(redis.ConnectionError):
            run(incr())
        assert proxy.dropped.is_set()
        assert int(direct.get(key) or 0) == ran + 1  # it ran once, not twice
        assert run(incr()) == ran + 2  # the next call goes through

        async def the_async_twin() -> None:
            proxy.armed.set()
            proxy.dropped.clear()
            with pytest.raises(redis.ConnectionError):
                await arun(incr())
            assert proxy.dropped.is_set()
            assert int(direct.get(key) or 0) == ran + 3
            assert await arun(incr()) == ran + 4
            await store.aclose()

        anyio.run(the_async_twin)
    direct.close()


@pytest.mark.parametrize("how", ["silent", "reset"])
def test_a_pooled_connection_gone_dead_is_replaced_before_a_command_goes_out(
    redis_url: str, redis_prefix: str, how: str
) -> None:
    """A NAT or a load balancer forgot an idle pooled connection (cloud idle timeouts): the
    next call's health-check PING fails on it and goes once more on a fresh connection
    (nothing of the call was sent yet), so the call reaches Redis and the store sees no
    outage (a fail-closed budget would refuse calls during one)."""
    from redis.connection import parse_url

    where = parse_url(redis_url)  # type: ignore[no-untyped-call]
    limits = {"sync": RateLimit(concurrency=5), "async": RateLimit(concurrency=5)}
    direct = RedisStore(redis_url, key_prefix=redis_prefix)
    truth = RedisRateLimiter(direct, limits)  # what Redis holds
    with FaultyProxy(where.get("port", 6379)) as proxy:
        db = where.get("db", 0)
        url = f"redis://127.0.0.1:{proxy.port}/{db}?health_check_interval=1"
        store = RedisStore(url, key_prefix=redis_prefix, socket_timeout=0.3, max_connections=1)
        limiter = RedisRateLimiter(store, limits)
        assert store.ping()  # the pool holds a connection
        proxy.forget(how)
        time.sleep(1.1)  # idle past health_check_interval: its next use PINGs first
        assert limiter.reserve("sync").allowed
        assert truth.in_flight("sync") == 1  # the reservation reached Redis
        assert (store.health.outages, store.health.failures) == (0, 0)

        async def the_async_twin() -> None:
            assert await _aping(store.aclient)
            proxy.forget(how)
            await anyio.sleep(1.1)
            assert (await limiter.areserve("async")).allowed
            assert truth.in_flight("async") == 1
            assert (store.health.outages, store.health.failures) == (0, 0)
            await store.aclose()

        anyio.run(the_async_twin)
    direct.close()


def test_a_health_check_is_tried_once_more_and_not_on_a_fresh_connection(
    redis_url: str, redis_prefix: str
) -> None:
    """Redis hung (every connection silent): the idle connection's failed PING goes once more
    on one fresh connection, and that one's failure is final; a later call's fresh
    connection is checked once (a dead Redis costs no chain of reconnects)."""
    from redis.connection import parse_url

    where = parse_url(redis_url)  # type: ignore[no-untyped-call]
    with FaultyProxy(where.get("port", 6379)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0?health_check_interval=1"
        store = RedisStore(url, key_prefix=redis_prefix, socket_timeout=0.2, max_connections=1)
        assert store.ping()
        proxy.forget("silent", new_too=True)
        time.sleep(1.1)
        assert not store.ping()
        assert len(proxy.pairs) == 2  # the pooled one, and one fresh one
        assert not store.ping()
        assert len(proxy.pairs) == 3

        async def the_async_twin() -> None:
            proxy.forget("")
            assert await _aping(store.aclient)
            proxy.forget("silent", new_too=True)
            await anyio.sleep(1.1)
            with pytest.raises(redis_errors()):
                await _aping(store.aclient)
            assert len(proxy.pairs) == 5
            with pytest.raises(redis_errors()):
                await _aping(store.aclient)
            assert len(proxy.pairs) == 6
            await store.aclose()

        anyio.run(the_async_twin)
