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

A cluster store's connections (:func:`resends_bounded`) refuse to write once a round's
re-sends would outlive the marker keys of :mod:`._state.once`: redis-py's cluster client and
pipeline send a command again after a lost reply, a MOVED or ASK redirection, or a connection
error (each after a new slot map, whose queries to the startup nodes may each take a
timeout), with no bound on the time that takes; a re-send that came after the command's
marker key expired ran its script a second time (a budget held twice ...). Every write of a
round (a pipeline's, a re-send of one of its commands, an ``ASKING``, a slot map query) is
refused once ``resend_seconds`` minus one attempt (a connection, then an answer) has passed
since the round began: the last re-send reaches Redis while the first run's marker lives.
Inside a turn (:mod:`._state.turns`) their waits for Redis are on the loop's on-time clock, as
a standalone store's are: a busy loop's lag timed them out on the wall clock, and each
timeout cost the cluster client a new slot map and the node's connections.

A store's pools are redis-py's blocking pools (:func:`waiting_pool`): a caller beyond
``max_connections`` waits for a free connection, at most the store's ``pool_timeout``. A wait
that runs out raises :func:`pool_exhausted`'s error (redis-py's ``MaxConnectionsError``, in
place of its bare "No connection available." ``ConnectionError``): this process's own load,
which the stages do not take for Redis down (:func:`.health.exhausted`); a sync cluster
node's pool raises it wrapped (:func:`node_pool_full`), so that redis-py's cluster client
does not answer it with a slot-map refresh.

Private. redis is imported when a store's pool is built, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import queue
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from . import bounds, turns

if TYPE_CHECKING:
    from .stores import RedisStore

__all__ = [
    "bound_async_cluster",
    "bounded_pool",
    "node_pool_full",
    "pool_exhausted",
    "resends_bounded",
    "sends_bounded",
    "sent_once",
    "waiting_pool",
]

# the monotonic instant after which the round under way writes nothing more (None: no bound)
_WRITE_BY: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "llmguard_write_by", default=None
)


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


class _WithinDeadline:
    """Mixed into a sync redis-py connection class (a standalone store's, a cluster node's).
    Inside a round trip bounded by its call's deadline (:mod:`._state.bounds`), each wait for
    Redis (the connection, each send and each answer, the handshake's included) ends when the
    round trip's time is up, as :func:`.bounds.out_of_time`'s error; otherwise it waits as
    the store's timeouts let it."""

    socket_timeout: float | None
    socket_connect_timeout: float | None

    def connect(self) -> None:
        parent: Any = super()
        connect_timeout = self.socket_connect_timeout
        seconds = bounds.left()
        try:
            if seconds is not None:
                if seconds <= 0:
                    raise bounds.ran_out(seconds)
                if connect_timeout is None or seconds < connect_timeout:
                    self.socket_connect_timeout = seconds  # (the TCP connection's wait only)
            parent.connect()
        except _timeouts() as exc:
            if seconds is None or _own_wait(exc, seconds, connect_timeout):
                raise
            raise bounds.ran_out(seconds) from exc
        finally:
            self.socket_connect_timeout = connect_timeout

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        parent: Any = super()
        with self._bounded():
            parent.send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        parent: Any = super()
        with self._bounded():
            return parent.read_response(*args, **kwargs)

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[None]:
        """Around one wait for Redis: its socket waits no longer than the round trip's bound
        leaves (see the class docs)."""
        seconds = bounds.left()
        if seconds is None or (self.socket_timeout is not None and seconds >= self.socket_timeout):
            yield
            return
        parent: Any = super()
        if seconds <= 0:
            parent.disconnect()  # (an answer may be owed on it)
            raise bounds.ran_out(seconds)
        sock = getattr(self, "_sock", None)
        if sock is not None:
            sock.settimeout(seconds)
        try:
            yield
        except _timeouts() as exc:
            raise bounds.ran_out(seconds) from exc
        finally:
            sock = getattr(self, "_sock", None)
            if sock is not None:
                sock.settimeout(self.socket_timeout)


class _CheckedAgain(_WithinDeadline):
    """Mixed into a sync redis-py connection class (see the module's docs), its waits within
    its round trip's deadline (:class:`_WithinDeadline`)."""

    _fresh = False  # connecting: a failed check of a fresh connection is final

    def connect(self) -> None:
        fresh, self._fresh = self._fresh, True
        try:
            super().connect()
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


def _timeouts() -> type[Exception]:
    from redis.exceptions import TimeoutError

    return TimeoutError


def _own_wait(exc: Exception, seconds: float, own: float | None) -> bool:
    """Whether a connection's timeout ``exc`` came from the store's own wait, not from the
    round trip's bound of ``seconds`` (the longer of the two is never the one that ran out)."""
    return isinstance(exc, bounds.out_of_time()) or (own is not None and own <= seconds)


class _OnTime:
    """Mixed into an async redis-py connection class whose waits for Redis a turn's round
    trip bounds on the loop's on-time clock (:mod:`._state.turns`): redis-py's own socket
    timeouts (its public ``socket_timeout`` and ``socket_connect_timeout``) are raised to
    the bound's cap meanwhile, so that the bound runs out first; outside a turn (``aclient``
    used directly) they are as set."""

    _bounded = False  # whether a turn's round trip bounds it (its timeouts raised)
    _timeouts: tuple[float | None, float | None]  # (socket, connect) timeouts as set
    socket_timeout: float | None
    socket_connect_timeout: float | None

    def _bound(self, bounded: bool) -> None:
        """redis-py's timeouts: raised to the cap of a turn's bound, or as set."""
        if bounded is self._bounded:
            return
        if not self._bounded:
            self._timeouts = (self.socket_timeout, self.socket_connect_timeout)
        self._bounded = bounded
        factor = turns.CAP if bounded else 1.0
        answer, connect = self._timeouts
        self.socket_timeout = None if answer is None else factor * answer
        self.socket_connect_timeout = None if connect is None else factor * connect


class _AsyncCheckedAgain(_OnTime):
    """Mixed into an async redis-py connection class: :class:`_CheckedAgain`'s twin. It also
    bounds the round trip of a turn (:mod:`._state.turns`) from the moment the connection is
    asked for: the pool asks it to connect (a fresh connection, or nothing to do) before
    every command or pipeline; redis-py's own timeouts are raised to the bound's cap
    meanwhile. The health check's PING waits on its own ``socket_timeout`` (as before: a
    silent idle connection is replaced), unbounded by the round trip's."""

    _fresh = False

    async def connect(self) -> None:
        parent: Any = super()
        self._bound(turns.arm(fresh=not parent.is_connected))
        fresh, self._fresh = self._fresh, True
        try:
            await parent.connect()
        finally:
            self._fresh = fresh

    async def check_health(self) -> None:
        parent: Any = super()
        if self._fresh:
            await parent.check_health()
            return
        if not self._bounded:
            await self._check_again(parent)
            return
        if not parent.health_check_interval or asyncio.get_running_loop().time() <= getattr(
            parent, "next_health_check", 0
        ):
            return  # no check due (redis-py checks the same)
        turns.pause()
        self.socket_timeout = self._timeouts[0]
        try:
            await self._check_again(parent)
        finally:
            self.socket_timeout = self._timeouts[0] and turns.CAP * self._timeouts[0]
        turns.arm(fresh=False)  # the command's answer

    async def _check_again(self, parent: Any) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            await parent.check_health()
        except (ConnectionError, TimeoutError):
            await parent.disconnect()
            await self.connect()
            await parent.check_health()


@contextlib.contextmanager
def resends_bounded(store: RedisStore) -> Iterator[None]:
    """Around one round of ``store`` (a pipeline and whatever the client re-sends of it): no
    write after ``resend_seconds`` less one attempt from now (see the module's docs); nothing
    to bound on a store whose client sends each command once."""
    seconds = store.resend_seconds
    if seconds <= 0:
        yield
        return
    token = _WRITE_BY.set(time.monotonic() + seconds - store.health.attempt_seconds)
    try:
        yield
    finally:
        _WRITE_BY.reset(token)


@contextlib.contextmanager
def closed_under() -> Iterator[None]:
    """Around one round trip: a connection closed under it by another thread (the store's
    ``close()`` disconnects the connections in use too) is a connection failure, as Redis
    gone would be; redis-py raises ``ValueError`` ("I/O operation on closed file") reading
    the closed socket's file, which no caller took for a Redis error (a sweep's replay
    logged a crash)."""
    try:
        yield
    except ValueError as exc:
        if "closed file" not in str(exc):
            raise
        from redis.exceptions import ConnectionError

        raise ConnectionError(f"the connection was closed meanwhile: {exc}") from exc


def _check_write() -> None:
    by = _WRITE_BY.get()
    if by is not None and time.monotonic() >= by:
        from redis.exceptions import ConnectionError

        raise ConnectionError(
            "not sent: a re-send this late could find its command's once-marker expired "
            "(resend_seconds passed since the round began)"
        )


@functools.cache
def sends_bounded(base: Any, asynchronous: bool) -> type[Any]:
    """``base`` (redis-py's connection class of a cluster node, sync or ``asynchronous``)
    whose writes :func:`resends_bounded` stops."""
    mixin = _AsyncBoundedSends if asynchronous else _BoundedSends
    if issubclass(base, mixin):  # (bounded already)
        return cast(type[Any], base)
    return type(base.__name__, (mixin, base), {})


class _BoundedSends(_WithinDeadline):
    """Mixed into a sync redis-py connection class (a cluster node's: see
    :func:`resends_bounded`), its waits within its round trip's deadline, as a standalone
    store's are (:class:`_WithinDeadline`: a wait cut short is redis-py's ``TimeoutError``
    to the cluster client, and each of its later waits in the round is cut at once)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _check_write()
        super().send_packed_command(command, check_health)


class _AsyncBoundedSends(_OnTime):
    """Mixed into an async redis-py connection class: :class:`_BoundedSends`'s twin (an
    async cluster node's). Inside a turn's round trip, each of its waits for Redis is bounded
    on the loop's on-time clock (:class:`.turns.Waiting`): a send (connecting first, when not
    connected: a connection, then an answer) and each answer (``socket_timeout``), through
    redis-py's public ``send_packed_command`` and ``read_response``, which the cluster's nodes
    call for every command, pipeline and slot-map query. A bound that runs out is redis-py's
    ``TimeoutError`` to the cluster client, met as its own socket timeout was (the connection
    closed, the next startup node asked for the slot map ...). A read given a timeout of its
    own, or told to keep its connection on an error, is left alone."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _check_write()
        parent: Any = super()
        with turns.Waiting(fresh=not parent.is_connected) as bounded:
            self._bound(bounded)
            await parent.send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        parent: Any = super()
        timeout = kwargs.get("timeout", args[1] if len(args) > 1 else None)
        if timeout is not None or not kwargs.get("disconnect_on_error", True):
            return await parent.read_response(*args, **kwargs)
        with turns.Waiting(fresh=False) as bounded:
            self._bound(bounded)
            return await parent.read_response(*args, **kwargs)


@functools.cache
def bounded_pool() -> type[Any]:
    """:func:`waiting_pool`, whose connections are :func:`sends_bounded` and whose wait that
    runs out raises :func:`node_pool_full`'s error (the pool class of a sync cluster
    client's nodes)."""
    import redis

    class BoundedPool(waiting_pool(False)):  # type: ignore[misc]
        node_of_cluster = True  # (its wait that runs out: node_pool_full's error)

        def __init__(self, connection_class: Any = redis.Connection, **options: Any) -> None:
            bounded = sends_bounded(connection_class, False)
            super().__init__(connection_class=bounded, **options)

    return BoundedPool


@functools.cache
def node_pool_full() -> type[Exception]:
    """The error of a sync cluster node's pool whose wait for a free connection ran out:
    :func:`pool_exhausted`'s error raised from it as a ``RedisError`` that is no
    ``ConnectionError``. redis-py's cluster pipeline answers a connection error from a
    node's pool with a slot-map refresh (``CLUSTER SLOTS`` on each known node in turn, each
    waiting ``pool_timeout`` on a full pool, then a reconnect of every connection of the
    node that answered); a full pool is this process's load, so the round trip fails at
    once (:func:`.health.exhausted` finds its cause) and nothing is asked of the cluster."""
    from redis.exceptions import RedisError

    class NodePoolFullError(RedisError):
        """No connection of a cluster node's pool came free in time (this process's load)."""

    return NodePoolFullError


@functools.cache
def pool_exhausted() -> type[Exception]:
    """The error of a round trip that found no free connection in ``pool_timeout``: redis-py's
    ``MaxConnectionsError`` (a ``ConnectionError``; redis-py < 6 has none: one of ours)."""
    from redis import exceptions

    found = getattr(exceptions, "MaxConnectionsError", None)
    if isinstance(found, type) and issubclass(found, exceptions.ConnectionError):
        return found

    class MaxConnectionsError(exceptions.ConnectionError):
        """No connection of the pool came free in time (this process's load)."""

    return MaxConnectionsError


def _ran_out(pool: Any, exc: BaseException) -> None:
    """Raise :func:`pool_exhausted`'s error (from ``exc``; a sync cluster node's pool:
    :func:`node_pool_full`'s, from that) when ``exc`` is the blocking ``pool``'s wait for a
    free connection running out (a bare ``ConnectionError`` raised from the wait's
    ``queue.Empty``, sync, or ``TimeoutError``, async); else nothing."""
    from redis.exceptions import ConnectionError

    waited = exc.__cause__ or exc.__context__
    if type(exc) is ConnectionError and isinstance(
        waited, (queue.Empty, TimeoutError, asyncio.TimeoutError)
    ):
        full = pool_exhausted()(
            f"no connection of the pool came free in pool_timeout ({pool.timeout:g} s): all "
            f"{pool.max_connections} (max_connections) in use"
        )
        full.__cause__ = exc
        if getattr(pool, "node_of_cluster", False):
            raise node_pool_full()(str(full)) from full
        raise full


@functools.cache
def waiting_pool(asynchronous: bool) -> type[Any]:
    """redis-py's blocking pool (sync, or ``asynchronous``) whose wait for a free connection,
    when it runs out, raises :func:`pool_exhausted`'s error."""
    if asynchronous:
        import redis.asyncio

        class AsyncWaitingPool(redis.asyncio.BlockingConnectionPool):
            async def get_connection(self, *args: Any, **options: Any) -> Any:
                try:
                    return await super().get_connection(*args, **options)  # type: ignore[no-untyped-call]
                except redis.ConnectionError as exc:
                    _ran_out(self, exc)
                    raise

        return AsyncWaitingPool
    import redis

    class WaitingPool(redis.BlockingConnectionPool):
        def get_connection(self, *args: Any, **options: Any) -> Any:
            try:
                return super().get_connection(*args, **options)  # type: ignore[no-untyped-call]
            except redis.ConnectionError as exc:
                _ran_out(self, exc)
                raise

    return WaitingPool


def bound_async_cluster(client: Any) -> None:
    """Make the connections of an async cluster client (not connected yet) and of the nodes
    it discovers :func:`sends_bounded` (its class takes no pool or connection class)."""
    for kwargs in (client.connection_kwargs, client.nodes_manager.connection_kwargs):
        if "connection_class" in kwargs:
            kwargs["connection_class"] = sends_bounded(kwargs["connection_class"], True)
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = sends_bounded(node.connection_class, True)
