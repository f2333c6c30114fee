"""Count the Redis round trips, socket writes and commands this process makes.

Used by ``bench/redis_roundtrips.py`` and by the tests that pin the round trips of a guarded
call. It wraps redis-py's sync and async connections (once, for the whole process) and
counts while a :class:`RoundTrips` is active:

* ``writes``: packed writes to a socket (a pipeline to one node is one write);
* ``round_trips``: waits for Redis: a write that goes out while no earlier write is still
  waiting for its answer starts a round trip; writes that follow it before any answer has
  been read (a Cluster pipeline writes to every node first, then reads) belong to the same
  one, since they travel at the same time;
* ``commands``: commands packed (a pipeline of five scripts is five).

Usage::

    with RoundTrips() as counted:
        guard.chat(...)
    print(counted.round_trips, counted.writes, counted.commands)
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import redis.asyncio.connection
import redis.connection

__all__ = ["RoundTrips"]

_lock = threading.Lock()
_active: list[RoundTrips] = []
_installed = False


class RoundTrips:
    """Counts while entered (see the module docs); counters are reset on entry."""

    def __init__(self) -> None:
        self.round_trips = 0
        self.writes = 0
        self.commands = 0
        self._waiting = False

    def __enter__(self) -> RoundTrips:
        _install()
        self.round_trips = self.writes = self.commands = 0
        self._waiting = False
        with _lock:
            _active.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with _lock:
            _active.remove(self)

    def _wrote(self) -> None:
        self.writes += 1
        if not self._waiting:
            self.round_trips += 1
            self._waiting = True

    def _read(self) -> None:
        self._waiting = False

    def _packed(self, count: int) -> None:
        self.commands += count


def _each(method: str, *args: Any) -> None:
    with _lock:
        counters = list(_active)
    for counter in counters:
        getattr(counter, method)(*args)


def _install() -> None:
    """Wrap redis-py's connections (sync and async), once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    sync = redis.connection.AbstractConnection
    send: Any = sync.send_packed_command
    send_one: Any = sync.send_command
    read: Any = sync.read_response
    pack_many: Any = sync.pack_commands

    def counted_send(self: Any, command: Any, check_health: bool = True) -> None:
        _each("_wrote")
        send(self, command, check_health)

    def counted_one(self: Any, *args: Any, **options: Any) -> None:
        _each("_packed", 1)
        send_one(self, *args, **options)

    def counted_read(self: Any, *args: Any, **options: Any) -> Any:
        answer = read(self, *args, **options)
        _each("_read")
        return answer

    def counted_many(self: Any, commands: Any) -> Any:
        commands = list(commands)
        _each("_packed", len(commands))
        return pack_many(self, commands)

    sync.send_packed_command = counted_send  # type: ignore[method-assign]
    sync.send_command = counted_one  # type: ignore[method-assign]
    sync.read_response = counted_read  # type: ignore[method-assign]
    sync.pack_commands = counted_many  # type: ignore[method-assign]

    aio = redis.asyncio.connection.AbstractConnection
    asend: Any = aio.send_packed_command
    aread: Any = aio.read_response
    apack: Any = aio.pack_command

    async def acounted_send(self: Any, command: Any, check_health: bool = True) -> None:
        _each("_wrote")
        await asend(self, command, check_health)

    async def acounted_read(self: Any, *args: Any, **options: Any) -> Any:
        answer = await aread(self, *args, **options)
        _each("_read")
        return answer

    def acounted_pack(self: Any, *args: Any) -> Any:
        _each("_packed", 1)  # pack_commands packs each command with pack_command
        return apack(self, *args)

    aio.send_packed_command = acounted_send  # type: ignore[method-assign]
    aio.read_response = acounted_read  # type: ignore[method-assign]
    aio.pack_command = acounted_pack  # type: ignore[method-assign]
