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

A store's round trips wait their turn (:class:`RoundTrips`): at most ``max_connections`` at
once, a caller waiting at most ``pool_timeout`` for a turn (in order, on an event loop), so no
round trip waits inside redis-py's pools; a wait that runs out raises redis-py's
``MaxConnectionsError``, as a pool whose wait runs out does here (:func:`waiting_pool`, in
place of a bare "No connection available." ``ConnectionError``): this process's own load,
which stages do not take for Redis down (:func:`.health.crowded`). So is a timeout of an async
connection that came well after it was due (:class:`_AsyncOnTime`): the event loop was
blocked (by other tasks' work), so the socket was not read when the answer may have been
there; a connection attempt is made once more (nothing was written yet), a read or a write
raises :func:`loop_blocked`'s error.

Private. redis is imported when a store's pool is built, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import anyio

from .._loops import PerLoop

if TYPE_CHECKING:
    from .stores import RedisStore

__all__ = [
    "RoundTrips",
    "bound_async_cluster",
    "bounded_pool",
    "late",
    "loop_blocked",
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
    failed health check is tried once more on a fresh connection (and, async, whose
    timeouts on a blocked event loop are no verdict on Redis)."""
    if asynchronous:
        return type(base.__name__, (_AsyncCheckedAgain, _AsyncOnTime, base), {})
    return type(base.__name__, (_CheckedAgain, base), {})


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
    whose writes :func:`resends_bounded` stops (and, async, whose timeouts on a blocked event
    loop are no verdict on Redis)."""
    mixin = _AsyncBoundedSends if asynchronous else _BoundedSends
    if issubclass(base, mixin):  # (bounded already)
        return cast(type[Any], base)
    if asynchronous:
        return type(base.__name__, (mixin, _AsyncOnTime, base), {})
    return type(base.__name__, (mixin, base), {})


class _BoundedSends:
    """Mixed into a sync redis-py connection class (see :func:`resends_bounded`)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _check_write()
        parent: Any = super()
        parent.send_packed_command(command, check_health)


class _AsyncBoundedSends:
    """Mixed into an async redis-py connection class: :class:`_BoundedSends`'s twin."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _check_write()
        parent: Any = super()
        await parent.send_packed_command(command, check_health)


@functools.cache
def bounded_pool() -> type[Any]:
    """:func:`waiting_pool`, whose connections are :func:`sends_bounded` (the pool class of
    a sync cluster client's nodes)."""
    import redis

    class BoundedPool(waiting_pool(False)):  # type: ignore[misc]
        def __init__(self, connection_class: Any = redis.Connection, **options: Any) -> None:
            bounded = sends_bounded(connection_class, False)
            super().__init__(connection_class=bounded, **options)

    return BoundedPool


def _ran_out(pool: Any, exc: BaseException) -> None:
    """Raise ``MaxConnectionsError`` (from ``exc``) when ``exc`` is the blocking ``pool``'s
    wait for a free connection running out (redis-py raises a bare ``ConnectionError``)."""
    from redis.exceptions import ConnectionError, MaxConnectionsError

    waited = exc.__cause__ or exc.__context__  # (sync: queue.Empty; async: a TimeoutError)
    if type(exc) is ConnectionError and isinstance(waited, (queue.Empty, asyncio.TimeoutError)):
        raise MaxConnectionsError(
            f"no Redis connection came free in {pool.timeout:g} s "
            f"(all {pool.max_connections} of the pool in use)"
        ) from exc


@functools.cache
def waiting_pool(asynchronous: bool) -> type[Any]:
    """redis-py's blocking pool (sync, or ``asynchronous``) whose wait for a free connection,
    when it runs out, raises ``MaxConnectionsError`` (this process's load, not Redis down)."""
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


# -- a timeout on a blocked event loop ---------------------------------------------------------


def late(started: float, timeout: float | None) -> bool:
    """Whether a wait that began at ``started`` (monotonic) and timed out after ``timeout``
    seconds ended well after it was due: the event loop was blocked when the timeout fell
    due (by more than a quarter of it, at most 0.25 s), so the wait says nothing of Redis."""
    if not timeout:
        return False
    return time.monotonic() - started > timeout + min(timeout / 4, 0.25)


@functools.cache
def loop_blocked() -> type[Exception]:
    """The error of a Redis read or write whose timeout came while this process's event
    loop was blocked (a ``TimeoutError`` of redis-py's): not counted against Redis."""
    from redis.exceptions import TimeoutError

    class LoopBlockedError(TimeoutError):
        """A Redis wait that timed out while the event loop was blocked (see :func:`late`)."""

    return LoopBlockedError


def _blocked(exc: BaseException, timeout: float | None) -> Exception:
    return loop_blocked()(
        f"{str(exc) or 'timed out'} after {timeout:g} s, but the event loop was blocked when "
        "it fell due (this process's load): the answer may have been there"
    )


class _AsyncOnTime:
    """Mixed into an async redis-py connection class: a timeout that came well after it was
    due (:func:`late`) is no verdict on Redis. A connection attempt is made once more
    (nothing was written; a fresh attempt on a loop that runs again; a second late one
    raises :func:`loop_blocked`'s error); a read or a write raises it at once (the command may
    have run, so it is not sent again)."""

    socket_timeout: float | None
    socket_connect_timeout: float | None

    async def _connect(self) -> None:
        parent: Any = super()
        for attempt in (1, 2):
            started = time.monotonic()
            try:
                await parent._connect()
                return
            except asyncio.TimeoutError as exc:
                if not late(started, self.socket_connect_timeout):
                    raise
                if attempt == 2:  # (redis-py wraps it in a ConnectionError: its cause)
                    raise _blocked(exc, self.socket_connect_timeout) from exc

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        from redis.exceptions import TimeoutError

        parent: Any = super()
        started = time.monotonic()
        try:
            await parent.send_packed_command(command, check_health)
        except TimeoutError as exc:
            if type(exc) is TimeoutError and late(started, self.socket_timeout):
                raise _blocked(exc, self.socket_timeout) from exc
            raise

    async def read_response(self, *args: Any, **options: Any) -> Any:
        from redis.exceptions import TimeoutError

        parent: Any = super()
        started = time.monotonic()
        try:
            return await parent.read_response(*args, **options)
        except TimeoutError as exc:  # (a timeout the caller passes returns None instead)
            if type(exc) is TimeoutError and late(started, self.socket_timeout):
                raise _blocked(exc, self.socket_timeout) from exc
            raise


# -- the round trips' turns --------------------------------------------------------------------


class RoundTrips:
    """The round trips of ``store`` under way at once: at most its ``max_connections`` (on a
    cluster: connections per node, one per node a round trip touches), so none waits inside
    redis-py's pools (whose waiters an async pool serves out of turn, and an async cluster
    node does not wait: "Too many connections"). A caller waits at most ``pool_timeout`` for
    its turn (in order on an event loop: one turn per event loop's client), then raises
    ``MaxConnectionsError``; a round trip whose turn came after Redis was paused (a failure
    while it waited) is not sent."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self.slots: int = store._options["max_connections"]
        self.seconds: float = store._options["timeout"]
        self._threads: tuple[int, threading.BoundedSemaphore] | None = None
        self._lock = threading.Lock()
        self._loops = PerLoop(lambda: anyio.Semaphore(self.slots))

    def _thread_slots(self) -> threading.BoundedSemaphore:
        taken = self._threads
        if taken is None or taken[0] != os.getpid():  # (a forked child: turns of its own)
            with self._lock:
                taken = self._threads
                if taken is None or taken[0] != os.getpid():
                    taken = self._threads = (os.getpid(), threading.BoundedSemaphore(self.slots))
        return taken[1]

    def _taken(self, acquired: bool, release: Callable[[], object]) -> None:
        """Go on with a turn ``acquired`` (given back by ``release``); raise when none came
        in ``pool_timeout`` (``MaxConnectionsError``), or Redis was paused meanwhile."""
        if not acquired:
            from redis.exceptions import MaxConnectionsError

            raise MaxConnectionsError(
                f"no turn for a Redis round trip came in pool_timeout ({self.seconds:g} s): "
                f"max_connections ({self.slots}) round trips under way"
            )
        health = self._store.health
        if health.failures and time.monotonic() < health.down_until:
            release()
            from redis.exceptions import ConnectionError

            raise ConnectionError("Redis was paused (it failed) while this round trip waited")

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Around a blocking round trip (see the class docs)."""
        slots = self._thread_slots()
        self._taken(slots.acquire(timeout=self.seconds), slots.release)
        try:
            yield
        finally:
            slots.release()

    @contextlib.asynccontextmanager
    async def aturn(self) -> AsyncIterator[None]:
        """Around an async round trip (see the class docs; a batch shields it, as the round
        trip: what it carries, a give-back among it, is sent)."""
        slots = self._loops.get()
        with anyio.move_on_after(self.seconds) as waiting:
            await slots.acquire()
        self._taken(not waiting.cancelled_caught, slots.release)
        try:
            yield
        finally:
            slots.release()


def bound_async_cluster(client: Any) -> None:
    """Make the connections of an async cluster client (not connected yet) and of the nodes
    it discovers :func:`sends_bounded` (its class takes no pool or connection class)."""
    for kwargs in (client.connection_kwargs, client.nodes_manager.connection_kwargs):
        if "connection_class" in kwargs:
            kwargs["connection_class"] = sends_bounded(kwargs["connection_class"], True)
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = sends_bounded(node.connection_class, True)
