"""A script whose reply is lost runs once: the store's Redis clients send no command twice.

A loopback proxy in front of a real Redis forwards a script call, lets Redis run it, then
drops the connection instead of relaying the reply (as a network cut or a killed proxy
would). redis-py retried such a call once by default: the script (a rate-limit acquire, a
budget reserve) ran twice.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from types import TracebackType

import anyio
import pytest

from llmguard_sdk._state.steps import Step, arun, run
from llmguard_sdk.store import RedisScripts, RedisStore

INCR = "return redis.call('INCR', KEYS[1])"


class ReplyLosingProxy:
    """Forwards loopback connections to Redis at ``port``; once armed, the first reply to
    an EVALSHA is dropped with its connection (Redis ran the script; the client never
    hears so)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url_port = self.sock.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port))
            self.open += [client, upstream]
            lose = threading.Event()
            threading.Thread(target=self._up, args=(client, upstream, lose), daemon=True).start()
            threading.Thread(target=self._down, args=(client, upstream, lose), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, lose: threading.Event) -> None:
        for data in _chunks(client):
            if b"EVALSHA" in data.upper() and self.armed.is_set():
                self.armed.clear()
                lose.set()  # before Redis can answer
            upstream.sendall(data)

    def _down(self, client: socket.socket, upstream: socket.socket, lose: threading.Event) -> None:
        for data in _chunks(upstream):
            if lose.is_set():  # the script ran: its reply goes nowhere
                self.dropped.set()
                for end in (client, upstream):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)
                return
            client.sendall(data)

    def __enter__(self) -> ReplyLosingProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.sock.close()
        for end in self.open:
            end.close()


def _chunks(end: socket.socket) -> Iterator[bytes]:
    while True:
        try:
            data = end.recv(65536)
        except OSError:
            return
        if not data:
            return
        yield data


def test_a_script_whose_reply_is_lost_runs_once(redis_url: str, redis_prefix: str) -> None:
    """The lost reply is a Redis error (the stage decides locally, as for any Redis
    failure), not a second run of the script; the next call goes through."""
    import redis
    from redis.connection import parse_url

    where = parse_url(redis_url)  # type: ignore[no-untyped-call]
    direct = redis.Redis.from_url(redis_url)
    direct.script_load(INCR)  # so that the proxied EVALSHA runs it at once
    key = f"{redis_prefix}:replies:{{t}}:n"
    with ReplyLosingProxy(where.get("port", 6379)) as proxy:
        url = f"redis://127.0.0.1:{proxy.url_port}/{where.get('db', 0)}"
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
