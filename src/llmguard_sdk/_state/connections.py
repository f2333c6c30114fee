"""How a standalone Redis store's connections send commands: each command (or pipeline)
once, but the health-check PING of an idle pooled connection once more on a fresh one.

redis-py retried a command whose reply was lost, running its scripts (a budget reserve, a
rate-limit acquire) twice, so the store's clients retry nothing. Yet redis-py sends its
health-check PING (before the first command on a connection idle past
``health_check_interval``) under the same retry policy: a pooled connection that a NAT or a
load balancer forgot while it was idle (no FIN: its bytes go nowhere, or come back as a
reset) failed its PING, and with it the call, read as Redis down (a pause of every stage; a
fail-closed budget refuses calls during it). Nothing of the command has been written when
the PING fails, so the connection classes here reconnect once and check again: a silent
connection costs that call one ``socket_timeout`` (the PING's wait) and a reconnect. The
check of a fresh connection (its handshake's) is final: a hung Redis costs the call that
finds it two socket timeouts, each later attempt one, as before.

Private. redis is imported when a store's pool is built, never before.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["sent_once"]


def sent_once(url: str, *, asynchronous: bool) -> dict[str, Any]:
    """The pool options (``retry``, ``connection_class``) of a standalone store's client for
    ``url`` (sync, or ``asynchronous``): see the module's docs."""
    from redis.backoff import NoBackoff

    if asynchronous:
        from redis.asyncio.connection import Connection as AsyncConnection
        from redis.asyncio.connection import parse_url as async_parse_url
        from redis.asyncio.retry import Retry as AsyncRetry

        base: Any = async_parse_url(url).get("connection_class", AsyncConnection)
        return {"retry": AsyncRetry(NoBackoff(), 0), "connection_class": _again(base, True)}
    from redis.connection import Connection, parse_url
    from redis.retry import Retry

    base = parse_url(url).get("connection_class", Connection)  # type: ignore[no-untyped-call]
    return {"retry": Retry(NoBackoff(), 0), "connection_class": _again(base, False)}


@functools.cache
def _again(base: Any, asynchronous: bool) -> type[Any]:
    """``base`` (redis-py's connection class for the URL: TCP, TLS or a Unix socket) whose
    failed health check is tried once more on a fresh connection."""
    mixin = _AsyncCheckedAgain if asynchronous else _CheckedAgain
    return type(base.__name__, (mixin, base), {})


class _CheckedAgain:
    """Mixed into a sync redis-py connection class (see the module's docs)."""

    _fresh = False  # connecting: a failed check of a fresh connection is final

    def connect(self) -> None:
        parent: Any = super()
        fresh, self._fresh = self._fresh, True
        try:
            parent.connect()
        finally:
            self._fresh = fresh

    def check_health(self) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        parent: Any = super()
        if self._fresh:
            parent.check_health()
            return
        try:
            parent.check_health()
        except (ConnectionError, TimeoutError):  # the idle connection is dead (and closed)
            parent.disconnect()
            self.connect()  # a fresh one, whose handshake checks it (once)
            parent.check_health()  # a PING, where the handshake asked nothing


class _AsyncCheckedAgain:
    """Mixed into an async redis-py connection class: :class:`_CheckedAgain`'s twin."""

    _fresh = False

    async def connect(self) -> None:
        parent: Any = super()
        fresh, self._fresh = self._fresh, True
        try:
            await parent.connect()
        finally:
            self._fresh = fresh

    async def check_health(self) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        parent: Any = super()
        if self._fresh:
            await parent.check_health()
            return
        try:
            await parent.check_health()
        except (ConnectionError, TimeoutError):
            await parent.disconnect()
            await self.connect()
            await parent.check_health()
