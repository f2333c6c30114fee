"""The Redis backend of the response cache: entries shared by every process, with an LRU, a
change stream and, with Redis 8, server-side vector sets (see
:mod:`llmguard_sdk.cache.backends`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from .._lazy import np

if TYPE_CHECKING:
    import numpy.typing as npt

from .._state.steps import Command, Step, answer, bounded, run
from .._state.stores import Outage, RedisScripts, RedisStore, hash_id, redis_errors
from ..errors import ConfigurationError, StoreUnavailableError
from ._changes import Change, change_of, text
from .entry import CacheEntry, decode_vector
from .index import Match

__all__ = ["RedisCacheBackend"]

_LUA = resources.files(__package__).joinpath("lua")
_PUT = _LUA.joinpath("put.lua").read_text(encoding="utf-8")
_GET = _LUA.joinpath("get.lua").read_text(encoding="utf-8")
_CLEAR = _LUA.joinpath("clear.lua").read_text(encoding="utf-8")
_READ = _LUA.joinpath("read.lua").read_text(encoding="utf-8")
_SEARCH = _LUA.joinpath("search.lua").read_text(encoding="utf-8")
_LIVE = _LUA.joinpath("live.lua").read_text(encoding="utf-8")
_VECTORS = _LUA.joinpath("vectors.lua").read_text(encoding="utf-8")
_DELETE = _LUA.joinpath("delete.lua").read_text(encoding="utf-8")
_PROBE = "return redis.call('VCARD', KEYS[1])"  # (an error without vector sets)
_BATCH = 1000  # change-stream messages read at once
_CLEAR_PAGE = 1000  # entries (or fields of the vector-set hash) a clear deletes per script
# vectors a clear frees per script at most (Redis frees one in about 3 us; a set larger than
# this goes in a script of its own)
_CLEAR_VECTORS = 5000
# entries a store evicts at most (a namespace far over max_entries shrinks over the next stores)
_EVICT_AT_ONCE = 64
_BATCHES = 4  # reads of the change stream a sync makes at most
_LIVE_PAGE = 500  # live entries read at once when the stream was trimmed past the cursor
_LIVE_PAGES = 4  # pages of live entries a sync reads at most
_NO_VECTOR_SETS = (
    "vector_search='server' needs a Redis with vector sets (VADD / VSIM, Redis 8 or later); "
    "the server answered: {}"
)

_OTHER_KIND = (
    "response cache namespace {namespace!r}: its entries' vectors are kept by "
    "vector_search={marked!r} caches ({where}), and a vector_search={mine!r} cache can find "
    "none of them by similarity; {remedy}"
)
_WHERE = {
    "server": "in the Redis server's vector sets",
    "local": "in the entries and the change stream, for each process's own index",
}
_REMEDY = (
    "use another namespace for vector_search={mine!r} (the old one expires with its entries), "
    "or stop every process of the other kind and clear the namespace first (ResponseCache(..., "
    "vector_search={marked!r}).clear())"
)
_OTHER_KIND_REPLY = re.compile(r"LLMGUARD-VECTORS (server|local)")

# Redis's answer to a command it does not have: "unknown command 'VADD'", and from a script
# "Unknown Redis command called from script" (Lua script, before Redis 7)
_UNKNOWN_COMMAND = re.compile(r"unknown (redis )?command", re.IGNORECASE)

logger = logging.getLogger("llmguard_sdk")


class RedisCacheBackend:
    """Entries as JSON strings with a TTL, an LRU sorted set and a change stream, in Redis.

    Keys: ``{prefix}:cache:{<namespace hash>}:e:<id>`` (an entry), ``...:lru`` (ids, least
    recently used first), ``...:uses`` (the LRU's clock), ``...:log`` (the change stream)
    and ``...:vectors`` (where the entries' vectors are kept, ``local`` or ``server``: a
    namespace keeps them one way, see :meth:`check_vectors_kept`); one hash tag per
    namespace, so every script runs on one Redis Cluster slot. Each key expires with the
    longest-lived entry written to it (a namespace left idle leaves nothing behind; a
    reader whose log expired forgets what it indexed from it). When Redis
    cannot be reached, reads are misses and writes are dropped for a few seconds (logged once).
    The stream keeps the last ``max(1000, 2 x max_entries)`` changes or so; a process that
    starts after it lost some (or falls that far behind) loads the live entries instead, a
    few pages per sync (each sync goes out with a call's opening round trip).

    With ``vector_search=True`` the vectors go to the server's vector sets alone (not into
    the entries' JSON; an entry an earlier version wrote with its vector is read all the
    same): ``...:v:<index key>`` is one partition's vector set (``VADD`` ... ``NOQUANT``: an
    approximate, HNSW search with exact float32 scores) and ``...:vix`` maps entry ids to
    their partition, so eviction and :meth:`clear` remove them.
    An entry that expired leaves its vector set when a search meets it or a read of its key
    finds it gone. The change stream
    then carries no vectors (nothing reads them: no process keeps a local index).

    Constructing one sends nothing to Redis. Its first read or write checks the server first
    (:meth:`check_vector_search` with ``vector_search``, :meth:`check_vectors_kept` with
    ``semantic``) and raises their :class:`ConfigurationError`; until Redis answers a check,
    each read or write tries it again (one refused raises again: a namespace cleared since
    is free).
    """

    def __init__(
        self,
        store: RedisStore,
        namespace: str,
        max_entries: int,
        *,
        vector_search: bool = False,
        semantic: bool = False,
        max_entry_bytes: int | None = None,
    ) -> None:
        self._store = store
        self._largest = max_entry_bytes  # an entry larger (as written) is not stored
        self._unchecked = {"vector sets"} if vector_search else set()
        if semantic:
            self._unchecked.add("vectors kept")
        tag = hash_id(namespace)
        self.vector_search = vector_search
        self._vector_sets = store.key("cache", tag, "v") + ":"
        self._vector_index = store.key("cache", tag, "vix")
        self._namespace = namespace
        self._vectors_kept = store.key("cache", tag, "vectors")  # 'server' / 'local' (put.lua)
        self._other_kind_logged = False
        self._script_failed = False
        self._entry_prefix = store.key("cache", tag, "e") + ":"
        self._lru = store.key("cache", tag, "lru")
        self._log = store.key("cache", tag, "log")
        self._uses = store.key("cache", tag, "uses")
        self._max = max_entries
        self._stream_length = max(1000, 2 * max_entries)
        self._scripts = RedisScripts(
            store, _PUT, _GET, _CLEAR, _READ, _SEARCH, _LIVE, _VECTORS, _PROBE, _DELETE
        )
        self._cursor = "0-0"
        self._loading: str | None = None  # the last score a load of the live entries read
        self._outage = Outage("response cache", "serving misses", store)

    def get_steps(self, entry_id: str) -> Step[CacheEntry | None]:
        """:meth:`get` as a step of a :class:`~llmguard_sdk._state.steps.Batch`."""
        entry, _ = yield from self.read_steps(entry_id)
        return entry

    def read_steps(
        self, entry_id: str, by: float | None = None, *, touch: bool = True
    ) -> Step[tuple[CacheEntry | None, bool]]:
        """:meth:`get_steps`, and whether Redis served the read (False: Redis away, paused
        after a failure, refusing the command, or no answer by ``by``, a
        :func:`time.monotonic` instant (see :mod:`llmguard_sdk._state.bounds`); the entry is
        then ``None``). ``touch=False``: not marked as recently used (:meth:`peek`)."""
        if not self._outage.up():
            return None, False
        try:
            yield from self._checked_steps(by)
            raw = yield self._command(
                by,
                1,
                [
                    self._entry_prefix + entry_id,
                    self._lru,
                    self._uses,
                    self._log,
                    self._vector_index,
                ],
                [entry_id, self._stream_length, self._vector_sets, "" if touch else "peek"],
            )
        except redis_errors() as exc:
            self._outage.failed(exc)
            return None, False
        if raw is None:
            return None, True
        entry = _readable(raw[0])
        if entry is None:
            return None, True
        entry = _on_this_clock(entry, int(raw[1]))
        return (entry if entry.stale_until > time.time() else None), True

    def put_steps(self, entry: CacheEntry, by: float | None = None) -> Step[list[str] | None]:
        """:meth:`put` as a step of a :class:`~llmguard_sdk._state.steps.Batch`: ``None``
        when Redis is away (paused, or the write failed, or no answer came by ``by``, as for
        :meth:`read_steps`) and nothing was written (or, past ``by``, perhaps it was);
        ``[entry.entry_id]`` (not kept) for an entry larger than ``max_entry_bytes`` as it
        would be written (its JSON, and its vector): not written, and the older entry under
        its key deleted, as the memory backend drops it (a refresh whose new answer is too
        large would have left the old one served)."""
        ttl_ms = max(1, int((entry.stale_until - time.time()) * 1000))
        # The vector goes to the server's vector set (alone: not into the entry's JSON too,
        # 2.7 KB an entry that nothing reads), or into the entry and the stream for local
        # indexes (a process loading the live entries reads it from the entry).
        server_vector, stream_vector, left_out = b"", entry.vector or "", None
        if self.vector_search:
            stream_vector = ""
            if entry.vector:
                server_vector = decode_vector(entry.vector).astype(np.float32).tobytes()
                left_out = {"vector"}
        stored = entry.model_dump_json(exclude=left_out).encode("utf-8")
        if self._largest is not None and len(stored) + len(server_vector) > self._largest:
            yield from self._dropped_steps(entry.entry_id, by)
            return [entry.entry_id]
        if not self._outage.up():
            return None
        try:
            yield from self._checked_steps(by)
            evicted = yield self._command(
                by,
                0,
                [
                    self._entry_prefix + entry.entry_id,
                    self._lru,
                    self._log,
                    self._uses,
                    self._vector_index,
                    self._vectors_kept,
                ],
                [
                    entry.entry_id,
                    stored,
                    ttl_ms,
                    self._max,
                    self._entry_prefix,
                    entry.index_key,
                    stream_vector,
                    entry.stale_until,
                    self._stream_length,
                    self._vector_sets,
                    server_vector,
                    _EVICT_AT_ONCE,
                ],
            )
        except redis_errors() as exc:
            self._failed(exc)
            return None
        return [text(item) for item in evicted]

    def search_steps(
        self, index_key: str, vector: npt.NDArray[np.float32], k: int
    ) -> Step[list[Match]]:
        """The ``k`` entries of partition ``index_key`` nearest to ``vector``, searched on
        the server (``VSIM``), best first; expired entries are dropped on the way."""
        return (yield from self.served_search_steps(index_key, vector, k)) or []

    def served_search_steps(
        self, index_key: str, vector: npt.NDArray[np.float32], k: int
    ) -> Step[list[Match] | None]:
        """:meth:`search_steps`, ``None`` where Redis did not serve the search (as for
        :meth:`read_steps`)."""
        if not self._outage.up():
            return None
        try:
            found = yield self._scripts.command(
                4,
                [self._vector_sets + index_key, self._vector_index],
                [vector.astype(np.float32).tobytes(), k, self._entry_prefix],
            )
        except redis_errors() as exc:
            self._failed(exc)
            return None
        # VSIM scores are (1 + cosine) / 2.
        return [
            Match(text(found[i]), 2.0 * float(found[i + 1]) - 1.0) for i in range(0, len(found), 2)
        ]

    def search(self, index_key: str, vector: npt.NDArray[np.float32], k: int) -> list[Match]:
        """See :meth:`search_steps`."""
        return run(self.search_steps(index_key, vector, k))

    def check_vector_search(self) -> bool:
        """Whether the server has vector sets; raises :class:`ConfigurationError` when it
        answers without them (its "unknown command" reply), returns False when it cannot
        be reached or answers with another error (CLUSTERDOWN, BUSY ...: then a script that
        fails for want of them later logs an error, and the cache misses)."""
        try:
            run(self._vector_sets_steps())
        except redis_errors():
            return False
        return True

    def check_vectors_kept(self) -> None:
        """Raise :class:`ConfigurationError` when the namespace's live entries keep their
        vectors the other way (``vector_search="server"`` / ``"local"``): this cache could
        find none of them by similarity, and its stores would be refused. Nothing is checked
        while Redis cannot be reached (a store refused later is logged once)."""
        try:
            run(self._vectors_kept_steps())
        except redis_errors():
            return

    def _checked_steps(self, by: float | None = None) -> Step[None]:
        """The checks a first read or write makes (see the class docs); each is done once it
        passes. A Redis error is the caller's to handle (the check stays due)."""
        if "vector sets" in self._unchecked:
            yield from self._vector_sets_steps(by)
            self._unchecked.discard("vector sets")
        if "vectors kept" in self._unchecked:
            yield from self._vectors_kept_steps(by)
            self._unchecked.discard("vectors kept")

    def _vector_sets_steps(self, by: float | None = None) -> Step[None]:
        """:meth:`check_vector_search` as steps. Only the server's "unknown command" reply
        says it lacks vector sets; any other Redis error (an error reply too: CLUSTERDOWN or
        TRYAGAIN during a failover, MASTERDOWN, BUSY ...) is raised as it is, for the caller
        to take as an outage (a miss; the check stays due)."""
        try:
            yield self._command(by, 7, [self._vector_sets + "probe"])
        except redis_errors() as exc:
            if _unknown_command(exc):
                raise ConfigurationError(_NO_VECTOR_SETS.format(exc)) from None
            raise

    def _vectors_kept_steps(self, by: float | None = None) -> Step[None]:
        """:meth:`check_vectors_kept` as steps (a Redis error raised as it is)."""
        marked = yield self._command(
            by, 6, [self._vectors_kept, self._vector_index, self._lru], [self._entry_prefix]
        )
        marked = text(marked or "")
        if marked in _WHERE and marked != self._kind:
            raise ConfigurationError(self._other_kind(marked))

    def _command(
        self, by: float | None, index: int, keys: Sequence[str], args: Sequence[Any] = ()
    ) -> Command:
        """Script ``index``'s command, its answer waited for until ``by`` at most."""
        return bounded(self._scripts.command(index, keys, args), by)

    @property
    def _kind(self) -> str:
        return "server" if self.vector_search else "local"

    def _other_kind(self, marked: str) -> str:
        """Why this cache's vectors cannot go where the namespace keeps them."""
        mine = self._kind
        return _OTHER_KIND.format(
            namespace=self._namespace,
            marked=marked,
            mine=mine,
            where=_WHERE[marked],
            remedy=_REMEDY.format(mine=mine, marked=marked),
        )

    def _failed(self, exc: Exception) -> None:
        """Redis failed a write or a search. With server-side search, a script calling an
        unknown command is the server lacking vector sets, not an outage: logged once, and
        every lookup misses (the script fails before it writes); other stages on the store
        carry on. A store refused because the namespace keeps its vectors the other way is
        logged once (nothing was written). Any other failure is the store's (:class:`Outage`:
        Redis out of memory is paused, a key of another kind logged as a refusal)."""
        other = _OTHER_KIND_REPLY.search(str(exc))
        if other is not None:
            if not self._other_kind_logged:
                self._other_kind_logged = True
                logger.error(self._other_kind(other[1]) + "; not storing")
            return
        if self.vector_search and _unknown_command(exc):
            if not self._script_failed:
                self._script_failed = True
                logger.error(_NO_VECTOR_SETS.format(exc) + "; serving misses")
            return
        self._outage.failed(exc)

    def changes_steps(self, by: float | None = None) -> Step[list[Change]]:
        """:meth:`changes` as a step of a :class:`~llmguard_sdk._state.steps.Batch`: up to
        ``_BATCHES`` round trips of a thousand changes (a longer backlog is read on by the
        next syncs). When changes after the cursor were trimmed from the stream (a process
        started after more changes than the stream keeps), the live entries themselves are
        loaded instead, ``_LIVE_PAGES`` pages a sync, then the stream is read on from where
        it stood when the load began: a sync is in a call's opening batch, and a hundred
        thousand entries loaded at once would hold that call for seconds."""
        if not self._outage.up():
            return []
        found: list[Change] = []
        try:
            if self._loading is not None:  # a load under way: its next pages first
                yield from self._live_steps(found, by)
                if self._loading is not None:
                    return found
            reloaded = False
            for _ in range(_BATCHES):
                trimmed, last, messages, server_ms = yield self._command(
                    by, 3, [self._log], [self._cursor, _BATCH]
                )
                if trimmed and reloaded:  # trimmed again meanwhile: the next sync reads on
                    return found
                if trimmed:
                    found.append(Change("clear"))
                    self._cursor, self._loading, reloaded = text(last), "-inf", True
                    yield from self._live_steps(found, by)
                    if self._loading is not None:
                        return found
                    continue
                now = time.time()  # (this host's clock, read with the server's)
                for message_id, fields in messages:
                    self._cursor = text(message_id)
                    data = dict(zip(fields[::2], fields[1::2], strict=True))
                    found.append(change_of(data, self._cursor, int(server_ms), now))
                if len(messages) < _BATCH:
                    return found
        except redis_errors() as exc:
            self._outage.failed(exc)
        return found

    def _live_steps(self, found: list[Change], by: float | None = None) -> Step[None]:
        """Up to ``_LIVE_PAGES`` pages of the live entries, from where the load stands
        (``_loading``, the last score read; ``None`` once every page was read), added to
        ``found`` as puts page by page (a Redis failure keeps what was read)."""
        for _ in range(_LIVE_PAGES):
            score, entries, read, lives = yield self._command(
                by, 5, [self._lru], [self._loading, _LIVE_PAGE, self._entry_prefix]
            )
            for raw, left_ms in zip(entries, lives, strict=True):
                entry = _readable(raw)
                if entry is not None and entry.vector is not None:
                    until = _on_this_clock(entry, int(left_ms)).stale_until
                    found.append(
                        Change("put", entry.entry_id, entry.index_key, entry.vector, until)
                    )
            self._loading = None if read < _LIVE_PAGE else text(score)
            if self._loading is None:
                return

    def get(self, entry_id: str) -> CacheEntry | None:
        """See :class:`CacheBackend`."""
        return run(self.get_steps(entry_id))

    def peek(self, entry_id: str) -> CacheEntry | None:
        """:meth:`get`, not marked as recently used (the cache reads a rival entry so, to
        judge a hit ambiguous: compared is not used).

        .. versionadded:: 0.2.0"""
        return run(self.read_steps(entry_id, touch=False))[0]

    def put(self, entry: CacheEntry) -> list[str] | None:
        """See :class:`CacheBackend`."""
        return run(self.put_steps(entry))

    def clear(self) -> None:
        """See :class:`CacheBackend` (tried even while other operations wait out a pause).
        The namespace goes a bounded step at a time, one script each (a few milliseconds:
        one script over 100k entries held Redis for half a second, past a socket timeout):
        with server-side search, the vector sets first, ``_CLEAR_PAGE`` fields of the hash
        naming them a step and ``_CLEAR_VECTORS`` vectors freed at most (a larger set goes
        alone: Redis frees a vector set in one go); then the entries, ``_CLEAR_PAGE`` a step,
        least recently used first; the last step logs the clear. Entries written meanwhile go
        too, up to a bound of steps past which the rest go in one script."""
        try:
            for _ in self._clear_steps():
                pass
        except redis_errors() as exc:
            self._outage.failed(exc)
            raise StoreUnavailableError(
                f"the response cache was not cleared (or only partly): {self._outage.why(exc)}"
            ) from exc

    def _delete_command(self, entry_id: str, by: float | None = None) -> Command:
        """The script that deletes ``entry_id`` (its vector and its LRU place too, logged
        for the other processes), its answer waited for until ``by`` at most."""
        keys = [self._entry_prefix + entry_id, self._lru, self._log, self._vector_index]
        return self._command(by, 8, keys, [entry_id, self._stream_length, self._vector_sets])

    def _dropped_steps(self, entry_id: str, by: float | None) -> Step[None]:
        """Delete ``entry_id`` where an answer to its request could not be written (a
        failure is the store's, as a write's: the older entry may then stay)."""
        if not self._outage.up():
            return
        try:
            yield self._delete_command(entry_id, by)
        except redis_errors() as exc:
            self._failed(exc)

    def delete(self, entry_id: str) -> bool:
        """See :class:`CacheBackend` (tried even while other operations wait out a pause)."""
        try:
            return bool(run(answer(self._delete_command(entry_id))))
        except redis_errors() as exc:
            self._outage.failed(exc)
            raise StoreUnavailableError(
                f"the cached answer was not deleted: {self._outage.why(exc)}"
            ) from exc

    def _clear_steps(self) -> Iterator[int]:
        """Run :meth:`clear`'s scripts one by one, yielding after each how many entries (or
        hash fields) it deleted."""
        # (the LRU and the hash hold max_entries or so each; a step frees 5 pages' vectors)
        steps = 4 * (self._max // _CLEAR_PAGE) + 6
        cursor = "0"
        for step in range(steps + 1):
            keys = [self._lru, self._log, self._uses, self._vector_index, self._vectors_kept]
            args = [
                self._entry_prefix,
                self._stream_length,
                self._vector_sets,
                _CLEAR_PAGE if step < steps else 0,
                text(cursor),
                _CLEAR_VECTORS,
            ]
            deleted, done, cursor = run(answer(self._scripts.command(2, keys, args)))
            yield int(deleted)
            if done:
                return

    def changes(self) -> list[Change]:
        """Read the change stream from where this process stopped (loads everything at first)."""
        return run(self.changes_steps())


def _unknown_command(exc: Exception) -> bool:
    """Whether ``exc`` is Redis answering that a command (a script's) does not exist."""
    import redis

    return isinstance(exc, redis.ResponseError) and _UNKNOWN_COMMAND.search(str(exc)) is not None


def _readable(raw: bytes | str) -> CacheEntry | None:
    """The entry stored as ``raw``, or None (logged) when this version cannot read it: one
    written in another shape (a newer SDK sharing the namespace during a rolling upgrade)
    is a miss, not an error of the call."""
    try:
        return CacheEntry.model_validate_json(raw)
    except ValueError as exc:  # (pydantic's ValidationError is one)
        logger.warning("response cache: an entry this version cannot read is a miss: %s", exc)
        return None


def _on_this_clock(entry: CacheEntry, left_ms: int) -> CacheEntry:
    """``entry`` with its times moved onto this host's clock: it is written with the writer's
    timestamps, and Redis keeps it until ``stale_until`` by the writer's clock (its PTTL,
    ``left_ms``, says how long that still is). Another host's clock can be minutes off; a
    difference of a second or less is left as it is."""
    if left_ms < 0:  # (no expiry: not one of ours)
        return entry
    shift = time.time() + left_ms / 1000.0 - entry.stale_until
    if abs(shift) <= 1.0:
        return entry
    return entry.model_copy(
        update={
            "created_at": entry.created_at + shift,
            "fresh_until": entry.fresh_until + shift,
            "stale_until": entry.stale_until + shift,
        }
    )
