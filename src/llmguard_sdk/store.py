"""Where shared state lives: in this process's memory, or in Redis.

Every Redis-backed stage (rate limits, breakers, budgets, caches, retry budgets) gets its
connection and its key names from here, so the key scheme has one home:

``{prefix}:{kind}:{{{tag}}}:{part}:{part}...``

``kind`` names the stage (``rl``, ``cb``, ``budget``, ...). ``tag`` is the Redis Cluster hash
tag: the keys of one atomic decision share it, so one Lua script can touch them all on one
slot. Tenant and user ids never appear in clear: :func:`hash_id` turns them into short,
stable digests.

A ``redis+cluster://host:port[,host:port...]`` URL (``rediss+cluster://`` for TLS) opens a
:class:`RedisClusterStore`: the same stages on Redis Cluster, each script sent to the node
that serves its keys' slot, MOVED and ASK redirections followed by the client.

Each stage's decision is also a *step* (a generator that yields the Lua script
:class:`Command` it needs and receives the answer); a :class:`Batch` runs the steps of many
stages together, one pipeline per round, so a guarded call waits for Redis twice: once
before its provider call and once after (see :mod:`llmguard_sdk.pipeline`).

Connections are opened lazily, with short socket timeouts, so a Redis that is down when the
application starts does not stop it from starting. Every store has one :class:`RedisHealth`,
a breaker around Redis itself: after a failure every stage leaves Redis alone for a while
(growing while the failures go on), so a dead or hung Redis costs no waiting per call.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import anyio.to_thread
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoScriptError, RedisClusterException
from redis.retry import Retry

from ._loops import PerLoop
from .errors import ConfigurationError

__all__ = [
    "REDIS_ERRORS",
    "Batch",
    "Call",
    "Command",
    "MemoryStore",
    "Outage",
    "Outcome",
    "Pause",
    "RedisClusterStore",
    "RedisHealth",
    "RedisScripts",
    "RedisStore",
    "Step",
    "Store",
    "arun",
    "delegate",
    "done",
    "hash_id",
    "open_store",
    "run",
    "start",
    "work",
]

logger = logging.getLogger("llmguard_sdk")
_SAFE_PART = re.compile(r"^[A-Za-z0-9_.-]+$")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

REDIS_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, RedisClusterException)
"""What a Redis operation raises when Redis (standalone or Cluster) cannot serve it."""


def hash_id(value: str) -> str:
    """A short, stable digest of an id (tenant, user ...) for use inside keys."""
    return hashlib.blake2b(value.encode("utf-8"), digest_size=8).hexdigest()


class Store:
    """Base of the state stores; it owns the key scheme."""

    kind: Literal["memory", "redis"]

    def __init__(self, key_prefix: str = "llmguard") -> None:
        if not key_prefix or not _SAFE_PART.match(key_prefix.replace(":", "")):
            raise ConfigurationError(f"key_prefix {key_prefix!r} must be letters, digits, _.-:")
        self.key_prefix = key_prefix

    def key(self, kind: str, tag: str, *parts: str) -> str:
        """The key for stage ``kind``, hash tag ``tag`` and further ``parts``.

        ``tag`` and ``parts`` must be safe key text (letters, digits, ``_.-``); pass user
        supplied ids through :func:`hash_id` first.
        """
        for piece in (kind, tag, *parts):
            if not _SAFE_PART.match(piece):
                raise ValueError(f"unsafe key part {piece!r}: hash it with hash_id() first")
        return ":".join((self.key_prefix, kind, "{" + tag + "}", *parts))

    def close(self) -> None:
        """Release connections (nothing to do for memory)."""

    async def aclose(self) -> None:
        """Release async connections (nothing to do for memory)."""


class MemoryStore(Store):
    """State lives in this process only; the default."""

    kind: Literal["memory", "redis"] = "memory"

    def __repr__(self) -> str:
        return "MemoryStore()"


class RedisHealth:
    """The breaker around Redis itself, shared by every stage of one store.

    After a failure, Redis is left alone for ``base`` seconds; each failure of the first
    attempt after such a pause doubles it (up to ``cap``, jittered), and a failure long after
    the last pause starts again from ``base``. While it is down, stages decide locally, so a
    dead Redis costs one connection attempt (or one socket timeout) per pause, not per call.

    .. versionadded:: 0.3.0
    """

    def __init__(self, base: float = 1.0, cap: float = 30.0) -> None:
        if not (0 < base <= cap):
            raise ConfigurationError("Redis retry pauses need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.failures = 0
        self.outages = 0  # outages so far (a failure long after the last pause starts one)
        self.down_until = 0.0
        self._pause = 0.0

    def up(self) -> bool:
        """Whether Redis may be tried now."""
        return time.monotonic() >= self.down_until

    def failed(self) -> float:
        """Redis just failed: pause it; returns the pause in seconds."""
        now = time.monotonic()
        if now < self.down_until:  # another caller already paused it
            return self.down_until - now
        probing = self.failures and now - self.down_until < max(self._pause, self.base)
        self.failures = self.failures + 1 if probing else 1
        if self.failures == 1:
            self.outages += 1
        pause = min(self.cap, self.base * 2 ** (self.failures - 1))
        self._pause = pause * (0.8 + 0.4 * random.random())
        self.down_until = now + self._pause
        return self._pause


class RedisStore(Store):
    """State shared through Redis by every process that uses the same URL and prefix.

    Args:
        url: ``redis://[user:password@]host:port/db``, ``rediss://`` for TLS, or ``unix://``.
        key_prefix: prefix of every key the SDK writes.
        socket_timeout: seconds any single Redis operation may take (short by design: a slow
            Redis must not stall LLM calls).
        local_share: while Redis cannot be reached, each process enforces this share of every
            shared limit on its own (rate limits, fail-open budgets, the retry budget's
            floor): with N processes, at most N times this share gets through.
        journal_dir: the directory of the budgets' spend journal (spend recorded while Redis
            was unreachable, replayed when it answers again); default: a per-user cache
            directory.
        retry_pause: the first pause after Redis failed (it doubles while failures go on,
            up to 30 s).
    """

    kind: Literal["memory", "redis"] = "redis"
    cluster = False

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "llmguard",
        socket_timeout: float = 0.5,
        max_connections: int = 50,
        local_share: float = 0.25,
        journal_dir: str | None = None,
        retry_pause: float = 1.0,
    ) -> None:
        super().__init__(key_prefix)
        self._check_url(url)
        if not (isinstance(socket_timeout, (int, float)) and socket_timeout > 0):
            raise ConfigurationError("socket_timeout must be positive")
        if not (isinstance(local_share, (int, float)) and 0 < local_share <= 1):
            raise ConfigurationError("local_share must be in (0, 1]")
        if not (isinstance(retry_pause, (int, float)) and 0 < retry_pause <= 30):
            raise ConfigurationError("retry_pause must be in (0, 30] seconds")
        self.url = url
        self.local_share = float(local_share)
        self.journal_dir = journal_dir
        self.health = RedisHealth(base=float(retry_pause))
        self._options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_timeout,
            "max_connections": max_connections,
            "health_check_interval": 30,
        }
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        self._aclients = PerLoop(self._new_async_client)
        self._setup()

    def _check_url(self, url: str) -> None:
        if urlsplit(url).scheme not in _REDIS_SCHEMES:
            raise ConfigurationError(
                "store must be 'memory', a redis://, rediss:// or unix:// URL, or a "
                f"redis+cluster:// URL, got {_redacted(url)!r}"
            )

    def _setup(self) -> None:
        # One immediate retry on a broken connection (a pooled socket of a Redis that has
        # restarted), none on a timeout: a slow Redis must not cost two timeouts.
        self._options["retry"] = Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
        try:
            self._pool = redis.ConnectionPool.from_url(self.url, **self._options)
        except ValueError as exc:
            raise ConfigurationError(f"bad Redis URL {_redacted(self.url)!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={_redacted(self.url)!r}, key_prefix={self.key_prefix!r})"

    @property
    def client(self) -> redis.Redis:
        """The sync Redis client (connection pool shared by every stage)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._connect()
                client = self._client
        return client

    def _connect(self) -> redis.Redis:
        return redis.Redis(connection_pool=self._pool)

    @property
    def aclient(self) -> redis.asyncio.Redis:
        """The async Redis client of the running event loop (one per loop)."""
        return self._aclients.get()

    def _new_async_client(self) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(self.url, **self._options)

    def ping(self) -> bool:
        """True when Redis answers; False (never an exception) when it does not."""
        try:
            return bool(self.client.ping())
        except REDIS_ERRORS:
            return False

    def close(self) -> None:
        """Close the sync connection pool."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        self._disconnect()

    def _disconnect(self) -> None:
        self._pool.disconnect()

    async def aclose(self) -> None:
        """Close the async client and the sync pool."""
        aclient = self._aclients.pop_current()
        if aclient is not None:
            await aclient.aclose()
        self.close()


class RedisClusterStore(RedisStore):
    """State shared through a Redis Cluster: ``redis+cluster://host:port[,host:port...]``.

    Takes the options of :class:`RedisStore`. The nodes listed are where the client starts;
    it discovers the others and which slots each serves. Each Lua script runs on the node of
    its keys' slot (every key of one decision shares a hash tag); MOVED and ASK redirections
    are followed by the client. The client is created on first use, so an unreachable
    cluster does not stop the application from starting.

    .. versionadded:: 0.3.0
    """

    cluster = True

    def _check_url(self, url: str) -> None:
        if urlsplit(url).scheme not in _CLUSTER_SCHEMES:
            raise ConfigurationError(
                f"a cluster store needs a redis+cluster:// URL, got {_redacted(url)!r}"
            )

    def _setup(self) -> None:
        parts = urlsplit(self.url)
        hosts = parts.netloc.rpartition("@")[2]
        nodes: list[tuple[str, int]] = []
        for item in hosts.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ConfigurationError(
                    f"bad Redis Cluster URL {_redacted(self.url)!r}: nodes are host:port"
                )
            nodes.append((host.strip("[]"), int(port)))
        if parts.path.strip("/") not in ("", "0"):
            raise ConfigurationError("Redis Cluster has only database 0")
        self._nodes = nodes
        options = self._options
        options.pop("health_check_interval", None)
        if parts.username:
            options["username"] = unquote(parts.username)
        if parts.password:
            options["password"] = unquote(parts.password)
        if parts.scheme == "rediss+cluster":
            options["ssl"] = True
            for name, values in parse_qs(parts.query).items():
                if name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
                    options[name] = values[-1]

    def _cluster_options(self) -> dict[str, Any]:
        # One retry (a refreshed slot map after a failover), no backoff: the store's own
        # breaker paces a dead cluster.
        return {**self._options, "retry": Retry(NoBackoff(), 1), "dynamic_startup_nodes": True}

    def _connect(self) -> redis.Redis:
        nodes = [
            redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]
            for host, port in self._nodes
        ]
        try:
            client = redis.RedisCluster(startup_nodes=nodes, **self._cluster_options())
        except RedisClusterException as exc:  # no node answered: as a connection error
            raise redis.ConnectionError(f"Redis Cluster unreachable: {exc}") from exc
        return cast(redis.Redis, client)  # the same command API as redis.Redis

    def _new_async_client(self) -> redis.asyncio.Redis:
        nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in self._nodes]
        options = self._cluster_options()
        options.pop("max_connections", None)
        client = redis.asyncio.RedisCluster(
            startup_nodes=nodes, max_connections=self._options["max_connections"], **options
        )
        return cast(redis.asyncio.Redis, client)  # connects on its first command

    def _disconnect(self) -> None:
        pass  # the cluster client owns its node pools; close() released them


class RedisScripts:
    """Lua scripts of one backend, registered on the store's sync client on first use, and
    once per event loop's async client (creating no connection before a script runs)."""

    def __init__(self, store: RedisStore, *sources: str) -> None:
        self._store = store
        self._sources = sources
        self._shas = [hashlib.sha1(s.encode("utf-8")).hexdigest() for s in sources]
        self._sync: tuple[redis.Redis, list[Script]] | None = None
        self._async: weakref.WeakKeyDictionary[redis.asyncio.Redis, list[AsyncScript]] = (
            weakref.WeakKeyDictionary()
        )

    def sync(self, index: int) -> Script:
        """Script number ``index`` for the sync client."""
        client = self._store.client
        registered = self._sync
        if registered is None or registered[0] is not client:
            registered = self._sync = (client, [client.register_script(s) for s in self._sources])
        return registered[1][index]

    def aio(self, index: int) -> AsyncScript:
        """Script number ``index`` for the running event loop's async client."""
        client = self._store.aclient
        scripts = self._async.get(client)
        if scripts is None:
            scripts = self._async[client] = [client.register_script(s) for s in self._sources]
        return scripts[index]

    def command(self, index: int, keys: Sequence[str], args: Sequence[Any] = ()) -> Command:
        """Script number ``index`` with ``keys`` and ``args``, as a :class:`Command` for a
        :class:`Batch` (nothing is sent yet)."""
        return Command(
            self._store, self._sources[index], self._shas[index], tuple(keys), tuple(args)
        )


class Outage:
    """One stage's view of its store's :class:`RedisHealth`: while Redis is paused the stage
    decides locally, and it says so once per outage (``instead`` says how).

    Without a store (``store=None``), the outage is this object's own, ``seconds`` long.
    """

    def __init__(
        self,
        what: str,
        instead: str,
        store: RedisStore | None = None,
        *,
        seconds: float = 5.0,
    ) -> None:
        self.what = what
        self.instead = instead
        self.health = store.health if store is not None else RedisHealth(seconds, seconds)
        self._logged = 0  # the outage last logged

    def up(self) -> bool:
        """Whether Redis may be tried now."""
        return self.health.up()

    def failed(self, exc: BaseException) -> None:
        """Redis just failed: pause it (for every stage of the store) and log once."""
        pause = self.health.failed()
        if self._logged != self.health.outages:
            self._logged = self.health.outages
            logger.warning(
                "%s: Redis unavailable (%s); %s, trying Redis again in %.1f s",
                self.what,
                exc,
                self.instead,
                pause,
            )


# -- decisions as steps, run together ---------------------------------------------------------

T = TypeVar("T")

Step: TypeAlias = Generator[Any, Any, T]
"""One decision of a stage, written as a generator: it yields what it needs (a
:class:`Command`, a tuple of them, a :class:`Pause` or a :class:`Call`), receives the answer
(a Redis error is thrown into it) and returns its result. :class:`Batch` runs many at once."""


@dataclass(frozen=True)
class Command:
    """One Lua script call of a decision: EVALSHA of ``source`` on ``store``, with ``keys``
    (one hash tag) and ``args``. Built by :meth:`RedisScripts.command`."""

    store: RedisStore
    source: str
    sha: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` before the step goes on (bounded by the step itself)."""

    seconds: float


@dataclass(frozen=True)
class Call:
    """Work outside Redis with a sync and an async way to do it (a memory backend's method
    and its async twin; blocking work, run in a worker thread by async code)."""

    sync: Callable[[], Any]
    aio: Callable[[], Awaitable[Any]]


def work(fn: Callable[[], T]) -> Call:
    """A :class:`Call` for blocking work: inline in sync code, in a worker thread in async."""

    async def in_thread() -> T:
        return await anyio.to_thread.run_sync(fn)

    return Call(fn, in_thread)


def done(value: T) -> Step[T]:
    """A step that needs nothing: it returns ``value``."""
    return value
    yield  # pragma: no cover - makes this a generator


def delegate(owner: object, name: str, *args: Any, **kwargs: Any) -> Step[Any]:
    """The step of ``owner.name(*args, **kwargs)``: its ``name_steps`` when it has one (the
    Redis backends); the call itself, made now, when ``name`` is in the owner's
    ``inline_steps`` (memory backends' methods that never wait); else a :class:`Call` of
    ``name`` and its async twin ``aname`` (backends of the application's own)."""
    kind = _KINDS.get((type(owner), name))
    if kind is None:
        kind = _KINDS[(type(owner), name)] = (
            "steps"
            if hasattr(owner, f"{name}_steps")
            else "inline"
            if name in getattr(owner, "inline_steps", ())
            else "call"
        )
    if kind == "steps":
        made: Step[Any] = getattr(owner, f"{name}_steps")(*args, **kwargs)
        return made
    if kind == "inline":  # in-process state that never waits
        return done(getattr(owner, name)(*args, **kwargs))
    return _called(owner, name, args, kwargs)


_KINDS: dict[tuple[type, str], str] = {}  # how delegate() runs a method of a class


def _called(owner: object, name: str, args: Any, kwargs: Any) -> Step[Any]:
    return (
        yield Call(
            lambda: getattr(owner, name)(*args, **kwargs),
            lambda: getattr(owner, f"a{name}")(*args, **kwargs),
        )
    )


def start(step: Step[T]) -> tuple[bool, Any, Step[T]]:
    """Run ``step`` up to its first request: ``(True, value, step)`` when it ended without
    one (in-process state, decided in place), else ``(False, None, rest)`` where ``rest``
    goes on from that request when a :class:`Batch` runs it."""
    try:
        request = step.send(None)
    except StopIteration as finished:
        return True, finished.value, step
    return False, None, _going_on(step, request)


def _going_on(step: Step[T], request: Any) -> Step[T]:
    try:
        while True:
            try:
                reply = yield request
            except Exception as exc:  # a Redis error the batch throws in
                request = step.throw(exc)
            else:
                request = step.send(reply)
    except StopIteration as finished:
        value: T = finished.value
        return value
    finally:
        step.close()


@dataclass
class Outcome:
    """How one step of a :class:`Batch` ended: its ``value``, or the ``error`` it raised."""

    value: Any = None
    error: BaseException | None = None

    def result(self) -> Any:
        """The value, or the error raised."""
        if self.error is not None:
            raise self.error
        return self.value


class Batch:
    """Runs decision steps together, round by round: in each round every step's Redis
    commands go out in **one pipeline per store** (EVALSHA; a script Redis lacks is loaded
    and its commands sent again) and the longest :class:`Pause` is waited; a :class:`Call`
    is made as soon as a step asks for it. On Redis Cluster the pipeline writes each node's
    commands before reading any answer, so one round costs one round trip of latency however
    many nodes it touches.

    A Redis failure is thrown into every step whose commands it hit (each falls back the
    way its stage does); a step's own exception ends that step only (:class:`Outcome`).
    """

    def __init__(self, steps: Iterable[Step[Any]] = ()) -> None:
        self.steps: list[Step[Any]] = list(steps)

    def add(self, step: Step[Any]) -> int:
        """Add a step; returns its index in the outcomes."""
        self.steps.append(step)
        return len(self.steps) - 1

    def __len__(self) -> int:
        return len(self.steps)

    def run(self) -> list[Outcome]:
        """Run every step to its end with blocking I/O."""
        outcomes = [Outcome() for _ in self.steps]
        live: dict[int, Any] = {}
        try:
            for index in range(len(self.steps)):
                self._advance(index, None, None, live, outcomes)
            while live:
                replies = self._round(live)
                following: dict[int, Any] = {}
                for index in live:
                    self._advance(index, *replies[index], following, outcomes)
                live = following
        except BaseException:
            self._abandon(live)
            raise
        return outcomes

    async def arun(self) -> list[Outcome]:
        """Async twin of :meth:`run`."""
        outcomes = [Outcome() for _ in self.steps]
        live: dict[int, Any] = {}
        try:
            for index in range(len(self.steps)):
                await self._aadvance(index, None, None, live, outcomes)
            while live:
                replies = await self._around(live)
                following: dict[int, Any] = {}
                for index in live:
                    await self._aadvance(index, *replies[index], following, outcomes)
                live = following
        except BaseException:
            self._abandon(live)
            raise
        return outcomes

    # -- the steps' side ---------------------------------------------------------------------

    def _advance(
        self,
        index: int,
        value: Any,
        error: BaseException | None,
        live: dict[int, Any],
        outcomes: list[Outcome],
    ) -> None:
        """Resume step ``index`` with its answer until it needs Redis (or a pause) or ends;
        a :class:`Call` it asks for is made at once (no round trip to wait for)."""
        step = self.steps[index]
        while True:
            try:
                request = step.throw(error) if error is not None else step.send(value)
            except StopIteration as finished:
                outcomes[index].value = finished.value
                return
            except Exception as exc:
                outcomes[index].error = exc
                return
            if not isinstance(request, Call):
                live[index] = request
                return
            try:
                value, error = request.sync(), None
            except Exception as exc:
                value, error = None, exc

    async def _aadvance(
        self,
        index: int,
        value: Any,
        error: BaseException | None,
        live: dict[int, Any],
        outcomes: list[Outcome],
    ) -> None:
        """Async twin of :meth:`_advance`."""
        step = self.steps[index]
        while True:
            try:
                request = step.throw(error) if error is not None else step.send(value)
            except StopIteration as finished:
                outcomes[index].value = finished.value
                return
            except Exception as exc:
                outcomes[index].error = exc
                return
            if not isinstance(request, Call):
                live[index] = request
                return
            try:
                value, error = await request.aio(), None
            except Exception as exc:
                value, error = None, exc

    def _abandon(self, live: dict[int, Any]) -> None:
        for index in live:
            self.steps[index].close()

    # -- one round ---------------------------------------------------------------------------

    @staticmethod
    def _sort(
        live: dict[int, Any],
    ) -> tuple[dict[RedisStore, list[tuple[int, int, Command]]], float]:
        commands: dict[RedisStore, list[tuple[int, int, Command]]] = {}
        pause = 0.0
        for index, request in live.items():
            if isinstance(request, Command):
                commands.setdefault(request.store, []).append((index, -1, request))
            elif isinstance(request, tuple):
                for position, command in enumerate(request):
                    commands.setdefault(command.store, []).append((index, position, command))
            elif isinstance(request, Pause):
                pause = max(pause, request.seconds)
            else:
                raise TypeError(f"a step yielded {request!r}, not a Command, Pause or Call")
        return commands, pause

    @staticmethod
    def _gather(
        live: dict[int, Any], answers: dict[tuple[int, int], Any]
    ) -> dict[int, tuple[Any, BaseException | None]]:
        replies: dict[int, tuple[Any, BaseException | None]] = {}
        for index, request in live.items():
            if isinstance(request, Command):
                answer = answers[(index, -1)]
                failed = answer if isinstance(answer, Exception) else None
                replies[index] = (None, failed) if failed is not None else (answer, None)
            elif isinstance(request, tuple):
                found = [answers[(index, position)] for position in range(len(request))]
                failure = next((a for a in found if isinstance(a, Exception)), None)
                replies[index] = (None, failure) if failure is not None else (tuple(found), None)
            else:  # a pause
                replies[index] = (None, None)
        return replies

    def _round(self, live: dict[int, Any]) -> dict[int, tuple[Any, BaseException | None]]:
        commands, pause = self._sort(live)
        answers: dict[tuple[int, int], Any] = {}
        for store, items in commands.items():
            for (index, position, _), answer in zip(
                items, _execute(store, [c for _, _, c in items]), strict=True
            ):
                answers[(index, position)] = answer
        if pause > 0:
            time.sleep(pause)
        return self._gather(live, answers)

    async def _around(self, live: dict[int, Any]) -> dict[int, tuple[Any, BaseException | None]]:
        commands, pause = self._sort(live)
        answers: dict[tuple[int, int], Any] = {}
        for store, items in commands.items():
            found = await _aexecute(store, [c for _, _, c in items])
            for (index, position, _), answer in zip(items, found, strict=True):
                answers[(index, position)] = answer
        if pause > 0:
            await anyio.sleep(pause)
        return self._gather(live, answers)


def run(step: Step[T]) -> T:
    """Run one step with blocking I/O; its result (or its exception)."""
    value: T = Batch([step]).run()[0].result()
    return value


async def arun(step: Step[T]) -> T:
    """Async twin of :func:`run`."""
    value: T = (await Batch([step]).arun())[0].result()
    return value


def _pack(pipe: Any, commands: Sequence[Command], client: Any, cluster: bool) -> None:
    for command in commands:
        options: dict[str, Any] = {}
        if cluster and command.keys:  # its node, from the client's slot map (no lookup sent)
            options["target_nodes"] = client.get_node_from_key(command.keys[0])
        pipe.execute_command(
            "EVALSHA", command.sha, len(command.keys), *command.keys, *command.args, **options
        )


def _missing(replies: Sequence[Any]) -> list[int]:
    return [index for index, reply in enumerate(replies) if isinstance(reply, NoScriptError)]


def _execute(store: RedisStore, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one pipeline; each answer, or the exception in its place."""
    try:
        client = store.client
        pipe = client.pipeline(transaction=False)
        _pack(pipe, commands, client, store.cluster)
        replies = list(pipe.execute(raise_on_error=False))
        missing = _missing(replies)
        if missing:  # Redis restarted or flushed its scripts: load them, send those again
            for source in {commands[index].source for index in missing}:
                client.script_load(source)
            pipe = client.pipeline(transaction=False)
            _pack(pipe, [commands[index] for index in missing], client, store.cluster)
            for index, reply in zip(missing, pipe.execute(raise_on_error=False), strict=True):
                replies[index] = reply
        return replies
    except Exception as exc:  # Redis failed as a whole: every command gets the error
        return [exc] * len(commands)


async def _aexecute(store: RedisStore, commands: Sequence[Command]) -> list[Any]:
    """Async twin of :func:`_execute`."""
    try:
        client = store.aclient
        if store.cluster:  # the slot map (fetched once, on first use)
            await cast(redis.asyncio.RedisCluster, client).initialize()
        pipe = client.pipeline(transaction=False)
        _pack(pipe, commands, client, store.cluster)
        replies = list(await pipe.execute(raise_on_error=False))
        missing = _missing(replies)
        if missing:
            for source in {commands[index].source for index in missing}:
                await client.script_load(source)
            pipe = client.pipeline(transaction=False)
            _pack(pipe, [commands[index] for index in missing], client, store.cluster)
            again = await pipe.execute(raise_on_error=False)
            for index, reply in zip(missing, again, strict=True):
                replies[index] = reply
        return replies
    except Exception as exc:
        return [exc] * len(commands)


def open_store(spec: str | Store, *, key_prefix: str = "llmguard", **options: Any) -> Store:
    """A store from ``"memory"``, a Redis URL (``redis+cluster://`` for Redis Cluster), or an
    existing :class:`Store`; ``options`` go to :class:`RedisStore`."""
    if isinstance(spec, Store):
        return spec
    if spec.strip().lower() == "memory":
        return MemoryStore(key_prefix)
    url = spec.strip()
    if urlsplit(url).scheme in _CLUSTER_SCHEMES:
        return RedisClusterStore(url, key_prefix=key_prefix, **options)
    return RedisStore(url, key_prefix=key_prefix, **options)


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
