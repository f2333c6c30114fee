"""The stores: where shared state lives (this process's memory, or Redis), and the key
scheme every Redis-backed stage uses (see :mod:`llmguard_sdk.store`, which re-exports the
store classes users name).

Private. redis is imported when a Redis store is built, never before.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import parse_qs, unquote, urlsplit

from .._loops import PerLoop
from ..errors import ConfigurationError
from . import turns
from .background import Background
from .connections import bound_async_cluster, bounded_pool, sent_once, waiting_pool
from .health import Outage, RedisHealth
from .scripts import RedisScripts, lua
from .urls import (
    CLUSTER_QUERY_OPTIONS,
    CLUSTER_SCHEMES,
    FLAGS,
    MAX_CONNECTIONS,
    MAX_SOCKET_TIMEOUT,
    POOL_OPTIONS,
    QUERY_OPTIONS,
    REDIS_SCHEMES,
    TLS_OPTIONS,
    TLS_QUERY_OPTIONS,
    check_query,
    check_url_options,
    database_of,
    is_number,
    is_whole,
    redacted_url,
)

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = [
    "MemoryStore",
    "Outage",
    "RedisClusterStore",
    "RedisHealth",
    "RedisScripts",
    "RedisStore",
    "Store",
    "hash_id",
    "lua",
    "open_store",
    "redis_errors",
    "sweep_every",
]

logger = logging.getLogger("llmguard_sdk")
_SAFE_PART = re.compile(r"^[A-Za-z0-9_.-]+$")


@functools.cache
def redis_errors() -> tuple[type[Exception], ...]:
    """What a Redis operation raises when Redis (standalone or Cluster) cannot serve it, for
    ``except redis_errors():`` (redis is imported at the first call)."""
    import redis
    from redis.exceptions import RedisClusterException

    return (redis.RedisError, RedisClusterException)


@functools.lru_cache(maxsize=4096)  # the ids of the tenants, users ... seen lately
def hash_id(value: str) -> str:
    """A short, stable digest of an id (tenant, user ...) for use inside keys."""
    return hashlib.blake2b(value.encode("utf-8"), digest_size=8).hexdigest()


class Store:
    """Base of the state stores; it owns the key scheme."""

    kind: Literal["memory", "redis"]

    def __init__(self, key_prefix: str = "llmguard") -> None:
        if not isinstance(key_prefix, str) or not _SAFE_PART.match(key_prefix.replace(":", "")):
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


def sweep_every(seconds: object, name: str = "journal_sweep_every_s") -> float | None:
    """The spend journal's sweep interval as given (``None``: the default), a positive
    finite number of seconds, else a :class:`ConfigurationError` naming ``name``."""
    if seconds is None:
        return None
    if not (isinstance(seconds, (int, float)) and is_number(seconds) and 0 < seconds < math.inf):
        raise ConfigurationError(  # (NaN is no number of seconds either)
            f"{name} must be a positive finite number of seconds (or None), got {seconds!r:.80}"
        )
    return float(seconds)


class RedisStore(Store):
    """State shared through Redis by every process that uses the same URL and prefix.

    Args:
        url: ``redis://[user:password@]host:port/db``, ``rediss://`` for TLS, or ``unix://``.
            Its query may set ``socket_timeout``, ``socket_connect_timeout``, ``timeout``
            (``pool_timeout``), ``max_connections`` (over the keywords), ``db``,
            ``health_check_interval``, ``socket_keepalive``, ``client_name``, ``username``,
            ``password`` and, for ``rediss://``, ``ssl_cert_reqs``, ``ssl_ca_certs``,
            ``ssl_certfile``, ``ssl_keyfile``, ``ssl_check_hostname`` (a cluster URL: the
            first four, and the ``ssl_*`` ones); any other option is a
            :class:`ConfigurationError`.
        key_prefix: prefix of every key the SDK writes.
        socket_timeout: seconds any single Redis operation may take (short by design: a slow
            Redis must not stall LLM calls; at most 3600). An async one (on a single Redis
            or a cluster) takes it on the event loop's on-time clock (its clock less how
            late it ran: a busy loop's lag is waited out), at most ten times it in all.
        max_connections: the most connections a pool opens (1 to 10,000; on a cluster, per
            node); more callers wait for one, at most ``pool_timeout``.
        pool_timeout: seconds a round trip waits at most for a free connection when all
            ``max_connections`` are in use (at most 3600; default: one attempt on Redis,
            ``socket_connect_timeout`` + ``socket_timeout``). Async round trips take turns,
            first come, first served, and wait while connections keep coming free (none in
            ``pool_timeout`` on the on-time clock, none of them waiting for Redis: stuck),
            at most ten times ``pool_timeout``. A round trip that gets none
            is decided without Redis (as while Redis is down, for that decision only), but
            Redis is not paused: a full pool is this process's own load, not an outage
            (warned of at most once a minute, naming ``max_connections`` to raise).
        local_share: while Redis cannot be reached, each process enforces this share of every
            shared limit on its own (rate limits, fail-open budgets, the retry budget's
            floor): with N processes, at most N times this share gets through.
        journal_dir: the directory of the budgets' spend journal (spend recorded while Redis
            was unreachable, replayed when it answers again); default: a per-user cache
            directory.
        journal_sweep_every_s: how often (seconds, a positive number) each process looks
            in the journal directory for the journals of processes that died, adopts them
            and replays them into Redis (``None``: every 30 s). A fleet of many workers
            that share the directory may look less often (each look lists the directory);
            one that wants a crashed worker's spend in Redis sooner, more often.

            .. versionadded:: 0.2.0
        retry_pause: the first pause after Redis failed (it doubles while failures go on,
            up to 30 s).
    """

    kind: Literal["memory", "redis"] = "redis"
    cluster = False
    resends = False  # whether the client may send a command again when its reply was lost

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "llmguard",
        socket_timeout: float = 0.5,
        max_connections: int = 50,
        pool_timeout: float | None = None,
        local_share: float = 0.25,
        journal_dir: str | None = None,
        retry_pause: float = 1.0,
        journal_sweep_every_s: float | None = None,
    ) -> None:
        super().__init__(key_prefix)
        if not isinstance(url, str):
            raise ConfigurationError(f"a Redis store's url must be a string, got {url!r}")
        self._check_url(url)
        waits = {"socket_timeout": socket_timeout}
        if pool_timeout is not None:  # (None: one attempt, see _pool_options)
            waits["pool_timeout"] = pool_timeout
        for name, seconds in waits.items():
            if not (is_number(seconds) and 0 < seconds <= MAX_SOCKET_TIMEOUT):
                raise ConfigurationError(
                    f"{name} must be a number of seconds in (0, {MAX_SOCKET_TIMEOUT:g}]"
                )
        if not (is_whole(max_connections) and 1 <= max_connections <= MAX_CONNECTIONS):
            raise ConfigurationError(
                f"max_connections must be a whole number in [1, {MAX_CONNECTIONS}]"
            )
        if not (is_number(local_share) and 0 < local_share <= 1):
            raise ConfigurationError("local_share must be in (0, 1]")
        if not (is_number(retry_pause) and 0 < retry_pause <= 30):
            raise ConfigurationError("retry_pause must be in (0, 30] seconds")
        if not (journal_dir is None or isinstance(journal_dir, (str, os.PathLike))):
            raise ConfigurationError(f"journal_dir must be a path or None, got {journal_dir!r}")
        self.url = url
        self.local_share = float(local_share)
        self.journal_dir = journal_dir
        self.journal_sweep_every_s = sweep_every(journal_sweep_every_s)
        self._options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_timeout,
            "max_connections": max_connections,
            "health_check_interval": 30,
            **({} if pool_timeout is None else {"timeout": pool_timeout}),  # (the URL's wins)
        }
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        self._aclients = PerLoop(self._new_async_client)  # (each closed at its loop's end)
        self._background = Background()
        self._setup()
        self._turns = PerLoop(self._new_turns)
        attempt = self._options["socket_connect_timeout"] + self._options["socket_timeout"]
        times = {"attempt_seconds": float(attempt), "wait_seconds": self.pool_timeout}
        self.health = RedisHealth(float(retry_pause), **times)  # (a connection, then an answer)

    def _check_url(self, url: str) -> None:
        if urlsplit(url).scheme not in REDIS_SCHEMES:
            raise ConfigurationError(
                "store must be 'memory', a redis://, rediss:// or unix:// URL, or a "
                f"redis+cluster:// URL, got {redacted_url(url)!r}"
            )

    def _setup(self) -> None:
        # No command is sent twice: redis-py's retry re-sent a command (a whole pipeline)
        # whose reply was lost, running its scripts (a reserve, an acquire) twice. A lost
        # reply is a Redis failure as any other; a pooled socket that the server closed (a
        # restart) is replaced by the pool before a command is written to it, and one that
        # went dead while idle fails its health-check PING, which goes once more on a fresh
        # connection (see connections.py).
        from redis.connection import parse_url

        parts = urlsplit(self.url)
        known = {**QUERY_OPTIONS, **(TLS_QUERY_OPTIONS if parts.scheme == "rediss" else {})}
        try:  # more callers than connections wait for one (bounded), not "Redis down"
            if parts.scheme != "unix":  # (its path: the socket's)
                database_of(parts)
            check_query(parts.query, known)
            self._take_url_options(parse_url(self.url))  # type: ignore[no-untyped-call]
            options = {**self._pool_options(), **sent_once(self.url, asynchronous=False)}
            self._pool = waiting_pool(False).from_url(self.url, **options)
        except ValueError as exc:
            raise ConfigurationError(f"bad Redis URL {redacted_url(self.url)!r}: {exc}") from None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(url={redacted_url(self.url)!r}, key_prefix={self.key_prefix!r})"
        )

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
        import redis

        return redis.Redis(connection_pool=self._pool)

    @property
    def aclient(self) -> redis.asyncio.Redis:
        """The async Redis client of the running event loop (one per loop)."""
        return self._aclients.get()

    def _take_url_options(self, url_options: dict[str, Any]) -> None:
        """The pool options of the URL's query win over the keywords (after the same
        checks): the one path by which a standalone and a cluster store settle them."""
        check_url_options(url_options)
        self._options.update({k: url_options[k] for k in POOL_OPTIONS if k in url_options})

    @property
    def pool_timeout(self) -> float:
        """Seconds a round trip waits at most for a free connection (see the class docs).

        .. versionadded:: 0.2.0
        """
        return cast(float, self._pool_options()["timeout"])

    def _pool_options(self) -> dict[str, Any]:
        """The options of every connection pool (standalone, or each cluster node's): a
        caller waits for a free connection at most ``pool_timeout`` (``timeout``), by default
        one attempt (a connection, then an answer)."""
        attempt = self._options["socket_connect_timeout"] + self._options["socket_timeout"]
        return {"timeout": attempt, **self._options}

    def _new_async_client(self) -> redis.asyncio.Redis:
        import redis.asyncio

        options = {**self._pool_options(), **sent_once(self.url, asynchronous=True)}
        pool = waiting_pool(True).from_url(self.url, **options)
        client = redis.asyncio.Redis(connection_pool=pool)
        client.auto_close_connection_pool = True  # (Redis.from_pool, from redis 5.0.1 on)
        return client

    @property
    def resend_seconds(self) -> int:
        """How long the reply of a script that changes state is kept for a command sent
        again (see :mod:`._state.once`): 0 (nothing kept) when the client sends each command
        once; else ten attempts' worth (a connection, then an answer), at least 10 s. The
        client's re-sends (a pipeline's commands one by one, a retry of each after a new
        slot map, redirections) stop one attempt before it runs out (connections.py)."""
        if not self.resends:
            return 0
        attempt = float(self._options["socket_connect_timeout"] + self._options["socket_timeout"])
        return max(10, math.ceil(10 * attempt))

    def ping(self) -> bool:
        """True when Redis answers; False (never an exception) when it does not."""
        try:
            return bool(self.client.ping())
        except redis_errors():
            return False

    @property
    def background(self) -> Background:
        """The store's background work (the budgets' journal sweep), which :meth:`close`
        stops.

        .. versionadded:: 0.2.0
        """
        return self._background

    def close(self) -> None:
        """Close the sync connection pool, after stopping the background work on the store
        (the budgets' journal sweep: no further sweep uses it) and waiting for a sweep under
        way to end its round trip (at most ``pool_timeout`` plus one attempt, a connection
        then an answer, plus 1 s)."""
        health = self.health
        waited = self._background.stop(health.wait_seconds + health.attempt_seconds + 1.0)
        if not waited:
            logger.warning("%r closed while a journal sweep still waited for Redis", self)
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        self._disconnect()

    def _disconnect(self) -> None:
        self._pool.disconnect()

    def _new_turns(self) -> turns.Turns:
        options = self._options
        return turns.Turns(
            options["max_connections"],
            self.pool_timeout,
            options["socket_connect_timeout"],
            options["socket_timeout"],
            self.health,
        )

    def async_round_trip(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Held around each async round trip: one of ``max_connections`` turns of the running
        event loop, waited for (FIFO) while turns keep coming free (see
        :mod:`._state.turns`), so no round trip waits in redis-py's pool (a cluster's async
        nodes would refuse more than ``max_connections`` rather than wait); its waits for
        Redis inside are bounded on the loop's on-time clock (a cluster node's: each send
        and each answer)."""
        return self._turns.get()()

    async def aclose(self) -> None:
        """Close the running loop's async client, then the sync pool (:meth:`close`: it
        waits, bounded, for a journal sweep under way, on this thread)."""
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

    .. versionadded:: 0.2.0
    """

    cluster = True
    resends = True  # redis-py's cluster client and its pipeline re-send (see _state.once)

    def _check_url(self, url: str) -> None:
        if urlsplit(url).scheme not in CLUSTER_SCHEMES:
            raise ConfigurationError(
                f"a cluster store needs a redis+cluster:// URL, got {redacted_url(url)!r}"
            )

    def _setup(self) -> None:
        parts = urlsplit(self.url)
        hosts = parts.netloc.rpartition("@")[2]
        nodes: list[tuple[str, int]] = []
        for item in hosts.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not (port.isascii() and port.isdigit() and int(port) <= 65535):
                raise ConfigurationError(
                    f"bad Redis Cluster URL {redacted_url(self.url)!r}: nodes are host:port"
                )
            nodes.append((host.strip("[]"), int(port)))
        from redis.connection import parse_url

        tls = TLS_QUERY_OPTIONS if parts.scheme == "rediss+cluster" else {}
        try:  # the query's pool options, as a standalone store takes them
            if database_of(parts) != 0:
                raise ValueError("Redis Cluster has only database 0")
            check_query(parts.query, {**CLUSTER_QUERY_OPTIONS, **tls})
            query = parse_url(f"redis://localhost/?{parts.query}")  # type: ignore[no-untyped-call]
            self._take_url_options(query)
        except ValueError as exc:
            raise ConfigurationError(
                f"bad Redis Cluster URL {redacted_url(self.url)!r}: {exc}"
            ) from None
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
                if name in TLS_OPTIONS:
                    options[name] = values[-1]
                elif name == "ssl_check_hostname":
                    options[name] = FLAGS[values[-1].strip().lower()]

    def _cluster_options(self) -> dict[str, Any]:
        return {
            **self._pool_options(),
            "retry": _cluster_retry(asynchronous=False),
            "dynamic_startup_nodes": True,
        }

    def _connect(self) -> redis.Redis:
        import redis
        import redis.cluster
        from redis.exceptions import RedisClusterException

        (host, port), *others = self._nodes
        nodes = [
            redis.cluster.ClusterNode(other, other_port)  # type: ignore[no-untyped-call]
            for other, other_port in others
        ]
        options = self._cluster_options()
        scheme = "rediss" if options.pop("ssl", False) else "redis"
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            # The url= form is the one where redis-py builds each node's pool from
            # connection_pool_class: blocking pools, whose callers beyond max_connections
            # wait (at most socket_timeout) as on a single Redis, not "Too many connections"
            client = redis.RedisCluster(
                url=f"{scheme}://{address}",
                startup_nodes=nodes,
                connection_pool_class=bounded_pool(),  # (whose writes are bounded)
                **options,
            )
        except RedisClusterException as exc:  # no node answered: as a connection error
            raise redis.ConnectionError(f"Redis Cluster unreachable: {exc}") from exc
        return cast(redis.Redis, client)  # the same command API as redis.Redis

    def _new_async_client(self) -> redis.asyncio.Redis:
        import redis.asyncio
        import redis.asyncio.cluster

        nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in self._nodes]
        options = {**self._cluster_options(), "retry": _cluster_retry(asynchronous=True)}
        options.pop("timeout")  # no pool to wait for: async_round_trip()'s turns instead
        client = redis.asyncio.RedisCluster(startup_nodes=nodes, **options)
        bound_async_cluster(client)  # its re-sends bounded (see connections.py)
        return cast(redis.asyncio.Redis, client)  # connects on its first command

    def _disconnect(self) -> None:
        pass  # the cluster client owns its node pools; close() released them


def _cluster_retry(*, asynchronous: bool) -> Any:
    """A cluster client's retry: one (a refreshed slot map after a failover), no backoff (the
    store's own breaker paces a dead cluster); asyncio's for the async client (redis-py 8
    warns of a sync one passed to an asyncio client)."""
    from redis.backoff import NoBackoff

    if asynchronous:
        from redis.asyncio.retry import Retry as AsyncRetry

        return AsyncRetry(NoBackoff(), 1)
    from redis.retry import Retry

    return Retry(NoBackoff(), 1)


def open_store(spec: str | Store, *, key_prefix: str = "llmguard", **options: Any) -> Store:
    """A store from ``"memory"``, a Redis URL (``redis+cluster://`` for Redis Cluster), or an
    existing :class:`Store`; ``options`` go to :class:`RedisStore`."""
    if isinstance(spec, Store):
        return spec
    if not isinstance(spec, str):
        raise ConfigurationError(
            f"store must be 'memory', a Redis URL or a Store, got {type(spec).__name__}"
        )
    if spec.strip().lower() == "memory":
        return MemoryStore(key_prefix)
    url = spec.strip()
    if urlsplit(url).scheme in CLUSTER_SCHEMES:
        return RedisClusterStore(url, key_prefix=key_prefix, **options)
    return RedisStore(url, key_prefix=key_prefix, **options)
