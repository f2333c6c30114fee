"""A loopback proxy in front of Redis that keeps one answer back, for calls cancelled while
a command of theirs has run in Redis and its answer is on its way."""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any


class AnswerHeld:
    """A loopback proxy in front of Redis: it forwards every command and every answer but the
    answers to the first ``holds`` commands that hold ``marker`` and run (a script Redis had
    not loaded yet does not), which it keeps (``holding`` is set once the first has run;
    ``forwarded`` counts the commands with ``marker`` that ran: sent on to Redis, and not
    answered NOSCRIPT)."""

    def __init__(self, redis_url: str, marker: bytes, holds: int = 1) -> None:
        self.target = urllib.parse.urlsplit(redis_url)
        self.marker = marker
        self.holding = asyncio.Event()
        self.left = holds
        self.forwarded = 0
        self.pumps: set[asyncio.Task[None]] = set()
        self.kept: list[Any] = []  # the writers of held answers' connections, left open
        self.closed = False

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return self.target._replace(netloc=f"127.0.0.1:{port}").geturl()

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True  # a connection still being opened is closed, not pumped
        self.server.close()
        for pump in self.pumps:
            pump.cancel()
        await asyncio.gather(*self.pumps, return_exceptions=True)
        for writer in self.kept:
            writer.close()

    async def _serve(self, reader: Any, writer: Any) -> None:
        up_reader, up_writer = await asyncio.open_connection(
            self.target.hostname, self.target.port or 6379
        )
        if self.closed:  # it arrived as the proxy closed: no pump would ever be awaited
            up_writer.close()
            writer.close()
            return
        mine = {"held": False}
        self.pumps.add(asyncio.ensure_future(self._out(reader, up_writer, mine)))
        self.pumps.add(asyncio.ensure_future(self._back(up_reader, writer, mine)))

    async def _out(self, reader: Any, writer: Any, mine: dict[str, bool]) -> None:
        while data := await reader.read(65536):
            mine["marked"] = self.marker in data
            if mine["marked"]:
                self.forwarded += 1
                if self.left > 0 and not mine["held"]:
                    self.left -= 1
                    mine["held"] = True
            writer.write(data)
            await writer.drain()
        writer.close()

    async def _back(self, reader: Any, writer: Any, mine: dict[str, bool]) -> None:
        while data := await reader.read(65536):
            if mine.get("marked") and data.startswith(b"-NOSCRIPT"):  # it did not run
                self.forwarded -= 1
            if mine["held"] and data.startswith(b"-NOSCRIPT"):  # not run: the next one
                self.left += 1
                mine["held"] = False
            elif mine["held"]:  # the command ran; its answer never comes
                self.holding.set()
                self.kept.append(writer)  # (from Python 3.13 one let go of closes its socket)
                return
            writer.write(data)
            await writer.drain()
        writer.close()
