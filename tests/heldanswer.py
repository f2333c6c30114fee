"""A loopback proxy in front of Redis that keeps one answer back, for calls cancelled while
a command of theirs has run in Redis and its answer is on its way."""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any


class AnswerHeld:
    """A loopback proxy in front of Redis: it forwards every command and every answer but the
    answer to the first command that holds ``marker`` and runs (a script Redis had not
    loaded yet does not), which it keeps (``holding`` is set once that command has run)."""

    def __init__(self, redis_url: str, marker: bytes) -> None:
        self.target = urllib.parse.urlsplit(redis_url)
        self.marker = marker
        self.holding = asyncio.Event()
        self.held = False
        self.pumps: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return self.target._replace(netloc=f"127.0.0.1:{port}").geturl()

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for pump in self.pumps:
            pump.cancel()

    async def _serve(self, reader: Any, writer: Any) -> None:
        up_reader, up_writer = await asyncio.open_connection(
            self.target.hostname, self.target.port or 6379
        )
        mine = {"held": False}
        for pump in (self._out(reader, up_writer, mine), self._back(up_reader, writer, mine)):
            task = asyncio.ensure_future(pump)
            self.pumps.add(task)

    async def _out(self, reader: Any, writer: Any, mine: dict[str, bool]) -> None:
        while data := await reader.read(65536):
            if self.marker in data and not self.held:
                self.held = mine["held"] = True
            writer.write(data)
            await writer.drain()
        writer.close()

    async def _back(self, reader: Any, writer: Any, mine: dict[str, bool]) -> None:
        while data := await reader.read(65536):
            if mine["held"] and data.startswith(b"-NOSCRIPT"):  # not run: the next one
                self.held = mine["held"] = False
            elif mine["held"]:  # the command ran; its answer never comes
                self.holding.set()
                return
            writer.write(data)
            await writer.drain()
        writer.close()
