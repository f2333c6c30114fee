"""The response cache: exact and semantic lookups, scoped per tenant, with false-hit guards.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
from typing_extensions import Unpack

from .._closing import AsyncCloses, Closes
from .._state.bounds import answered_by
from .._state.steps import Batch, Step, arun, run, work
from .._state.stores import Store, open_store
from ..context import Scope, current_scope
from ..errors import ConfigurationError
from ..models import ChatRequest, ChatResponse
from ._config import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENTRY_BYTES,
    check_call,
    check_matching,
    check_parts,
    check_policy,
    check_scope,
)
from ._local import _LocalIndexes
from ._matching import _id_hash, _SemanticMatching, fresh
from ._recent import RecentEmbeddings, embedding_time, lookup_by, stale_by
from ._served import cache_name, false_hit_here, served_entry, served_hit
from ._storable import cached_form, kept_until, storable
from .backends import Change, MemoryCacheBackend, open_backend
from .calibrate import Pair, Scorer, target_threshold
from .embedders import DEFAULT_THRESHOLD, Embedder, HashingEmbedder, suggested_threshold
from .entry import CacheEntry, CacheHit, CacheOptions, CacheStats
from .guards import Verifier
from .keys import CacheKeys, _joined_tags, request_keys
from .monitor import FalseHitMonitor

__all__ = ["DEFAULT_THRESHOLD", "ResponseCache"]


def _newer_than(max_age: float | None) -> float | None:
    """The earliest ``created_at`` a lookup with ``max_age`` serves (``None``: any)."""
    return None if max_age is None else time.time() - max_age


_RECENT_VECTORS = 256


class ResponseCache(_SemanticMatching, Closes, AsyncCloses):
    """Exact and semantic response cache, in memory or shared through Redis.

    A lookup first tries the **exact** key (the whole canonical request plus its partition),
    then, with ``semantic=True``, the closest earlier query with the same partition and the
    same context (everything but the last user turn) whose cosine similarity reaches
    ``threshold`` and that no false-hit guard refuses (numbers, negation, entities, a single
    key-term swap; see :mod:`llmguard_sdk.cache.guards`). With a ``verifier``, matches scoring
    below ``threshold + verify_band`` are only served when it agrees; a scoring verifier
    (:class:`~llmguard_sdk.cache.ParaphraseVerifier`) checks every match by default, and the
    similarity threshold becomes the recall threshold that picks its candidates.

    Partitions: the tenant, the permissions ``tags`` of a call, ``namespace`` and ``version``
    (bump it to invalidate everything cached under an older prompt template); the end user
    too with ``per_user=True``. Calls for an end user (``scope.user``) are personalised and not
    cached unless ``per_user=True``; calls with ``temperature > 0`` are not cached unless
    ``cache_sampled=True`` (a request that leaves temperature unset is cached). Errors, tool
    calls, truncated, degraded, refused and blank answers, and JSON asked for and not given,
    are never stored.

    Entries are fresh for ``ttl`` seconds, then kept ``stale_ttl`` more seconds for
    stale-if-error reads (:meth:`lookup_stale`, used by the Guard when every route failed).

    Args:
        store: ``"memory"``, a Redis URL (keys under ``key_prefix``), or a ``Store``.
        max_entries: the most entries kept, least recently used evicted first.
        max_bytes: in memory, the most bytes of entries kept too (an entry's stored answer
            and its vector; the least recently used go first); default 256 MiB,
            ``None``: no bound. A Redis cache takes the default and no other
            (:class:`~llmguard_sdk.errors.ConfigurationError`): bound it with
            ``max_entries`` and the server's ``maxmemory``.
        max_entry_bytes: the largest entry stored (its answer's JSON, with its query and
            vector: about the answer's size plus 2 KB); a larger answer is not stored,
            counted in ``stats.too_large``; default 1 MiB (as LiteLLM's in-memory cache
            caps an item), in memory and in Redis; ``None``: no cap.
        embedder: any :class:`~llmguard_sdk.cache.Embedder`; default :class:`HashingEmbedder`.
        threshold: the similarity a semantic match needs; default: the embedder's
            ``default_threshold``, else :data:`DEFAULT_THRESHOLD` (0.675, the hashing
            embedder's).
        target_precision: choose the threshold from labelled pairs instead: the lowest
            whose precision's lower 95 % Wilson bound reaches this target (never below
            ``threshold`` or the embedder's suggestion); with a scoring ``verifier`` (such
            as :class:`~llmguard_sdk.cache.ParaphraseVerifier`), the verifier's threshold.
            :class:`~llmguard_sdk.errors.ConfigurationError` when none does.
        calibration_pairs: the labelled pairs for ``target_precision`` (a JSONL path or
            :class:`~llmguard_sdk.cache.Pair` objects); default: the development sets
            bundled with the package (``hard_questions`` and ``question_framings``).
        strict: the strict guards for short requests (any content word on one side only,
            another word order or another kind of question refuses the match; see
            :func:`~llmguard_sdk.cache.guards.strict_rejection`); default: on unless a
            scoring ``verifier`` decides instead.
        margin: refuse a semantic match when another entry with a different answer scores
            within ``margin`` of it (an ambiguous question); 0 turns the check off.
        guards: ``False``: similarity alone serves a match (no false-hit guard refuses it).
        verify_band: the band above ``threshold`` the ``verifier`` decides (default 0.05).
        sync_interval: seconds between reads of other processes' changes (Redis only).
        vector_search: ``"local"`` (default): every process searches its own in-memory
            index, kept in step through the change stream, no round trip per search;
            ``"server"``: the vectors live in Redis vector sets (Redis 8: ``VADD`` /
            ``VSIM``), one per partition, and each semantic search adds a round trip (the
            ``VSIM``) — for caches too large to hold in every process. Needs a Redis store
            whose server has vector sets (:class:`~llmguard_sdk.errors.ConfigurationError`
            when it answers without them). A namespace keeps its vectors one way: a
            semantic cache of one kind over a namespace whose live entries were stored by
            the other is a :class:`~llmguard_sdk.errors.ConfigurationError` (it could find
            none of them by similarity; use another namespace, or clear it first), and a
            store from a cache of the other kind writes nothing (logged once). Both are
            checked by the cache's first lookup or store, not at construction (which sends
            nothing to Redis); a check that fails raises at each lookup or store until it
            passes.
        monitor: a :class:`~llmguard_sdk.cache.FalseHitMonitor` that re-asks a sample of
            semantic hits in the background and raises this namespace's threshold, or stops
            its semantic hits, when the estimated false-hit rate exceeds its target.

    :meth:`close` (or ``with``; :meth:`aclose` or ``async with`` in async code) stops the
    monitor's background checks and closes the store's connections.
    """

    def __init__(
        self,
        store: str | Store = "memory",
        *,
        namespace: str = "default",
        version: str = "1",
        ttl: float = 3600.0,
        stale_ttl: float = 86400.0,
        max_entries: int = 10_000,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        max_entry_bytes: int | None = DEFAULT_MAX_ENTRY_BYTES,
        semantic: bool = True,
        embedder: Embedder | None = None,
        threshold: float | None = None,
        target_precision: float | None = None,
        calibration_pairs: str | Path | Sequence[Pair] | None = None,
        margin: float = 0.01,
        guards: bool = True,
        strict: bool | None = None,
        verifier: Verifier | None = None,
        verify_band: float | None = None,
        cache_sampled: bool = False,
        per_user: bool = False,
        key_prefix: str = "llmguard",
        sync_interval: float = 0.5,
        vector_search: Literal["local", "server"] = "local",
        monitor: FalseHitMonitor | None = None,
    ) -> None:
        check_policy(
            ttl=ttl, stale_ttl=stale_ttl, max_entries=max_entries, max_bytes=max_bytes,
            max_entry_bytes=max_entry_bytes, namespace=namespace,
            version=version, sync_interval=sync_interval, vector_search=vector_search,
        )  # fmt: skip
        check_matching(threshold, margin, verify_band)
        check_parts(embedder, verifier, monitor, semantic=semantic, guards=guards, strict=strict,
                    cache_sampled=cache_sampled, per_user=per_user)  # fmt: skip
        self.embedder: Embedder = embedder if embedder is not None else HashingEmbedder()
        self.guards = guards
        self.strict = not isinstance(verifier, Scorer) if strict is None else strict
        self.verifier = verifier
        if target_precision is not None:
            threshold = target_threshold(
                target_precision, calibration_pairs, embedder=self.embedder, guards=guards,
                strict=self.strict, verifier=verifier,
                floor=threshold if threshold is not None else suggested_threshold(self.embedder),
            )  # fmt: skip
        if threshold is None:
            threshold = suggested_threshold(self.embedder)
        if verify_band is None:
            verify_band = 2.0 if isinstance(verifier, Scorer) else 0.05
        if not -1.0 <= threshold <= 1.0 or not 0.0 <= margin < 1.0 or not verify_band >= 0:
            raise ConfigurationError(
                "threshold must be in [-1, 1], margin in [0, 1), verify_band >= 0"
            )
        self.state = open_store(store, key_prefix=key_prefix)
        self.namespace, self.version = namespace, version
        self._served_by = cache_name(self.state, namespace)
        self.ttl, self.stale_ttl = ttl, stale_ttl
        self.semantic = semantic
        self.threshold, self.margin, self.verify_band = threshold, margin, verify_band
        self.cache_sampled, self.per_user = cache_sampled, per_user
        self.stats = CacheStats()
        self._sync_interval = sync_interval
        self._synced_at = -float("inf")
        self.vector_search = vector_search
        self.monitor, self._closed = monitor, False
        if monitor is not None:
            monitor.use_embedder(self.embedder)
        self._backend, self._server = open_backend(
            self.state, namespace, max_entries, max_bytes,
            server=vector_search == "server", semantic=semantic, max_entry_bytes=max_entry_bytes,
        )  # fmt: skip
        self._local = _LocalIndexes(
            self.embedder.dimension, keep_queries=not isinstance(self._backend, MemoryCacheBackend)
        )
        self._recent = RecentEmbeddings(self.embedder, _RECENT_VECTORS)

    def __repr__(self) -> str:
        return (
            f"ResponseCache(store={self.state!r}, namespace={self.namespace!r}, "
            f"semantic={self.semantic}, threshold={self.threshold})"
        )

    # -- what may be cached ---------------------------------------------------------------

    def skip_reason(
        self, request: ChatRequest, scope: Scope | None = None, *, cacheable: bool = True
    ) -> str | None:
        """Why this call must not use the cache (``None`` when it may)."""
        check_call(request)
        scope = check_scope(scope or current_scope())
        if not cacheable:
            return "opted_out"
        if request.temperature and not self.cache_sampled:
            return "sampled"
        if scope.user is not None and not self.per_user:
            return "personalised"
        return None

    def keys(
        self, request: ChatRequest, scope: Scope | None = None, tags: Sequence[str] = ()
    ) -> CacheKeys:
        """The partition, exact and context hashes of a call."""
        scope = scope or current_scope()
        check_scope(scope)
        partition = (
            self.namespace,
            self.version,
            _id_hash(scope.tenant) if scope.tenant is not None else "",
            _id_hash(scope.user) if self.per_user and scope.user is not None else "",
            _joined_tags(tags),
            self.embedder.name if self.semantic else "",
        )
        return request_keys(request, partition)

    def call_keys(
        self,
        request: ChatRequest,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> CacheKeys | None:
        """The keys of a call that may use the cache, ``None`` when it must not (see
        :meth:`skip_reason`). Pass them as ``keys=`` to the lookup and to the store of the
        same request, scope and tags: both then use them instead of hashing the request."""
        check_call(request, None, options)
        if self.skip_reason(request, scope, cacheable=options.get("cacheable", True)) is not None:
            return None
        keys = options.get("keys")
        return keys if keys is not None else self.keys(request, scope, options.get("tags", ()))

    # -- lookups ----------------------------------------------------------------------------

    def lookup_steps(
        self,
        request: ChatRequest,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> Step[CacheHit | None]:
        """:meth:`lookup` as a step of a :class:`~llmguard_sdk._state.steps.Batch`: the exact read
        goes out with the batch; after a miss the semantic search runs in this process (in
        a worker thread for async code). Run :meth:`sync_steps` in the same batch first to
        see the other processes' recent entries."""
        keys = self.call_keys(request, scope, **options)
        if keys is None or options.get("refresh", False):
            self.stats._add("skipped")
            return None
        deadline, newer = options.get("deadline"), _newer_than(options.get("max_age"))
        by = lookup_by(deadline)
        entry, served = yield from self._read_steps(keys.exact, by)
        if entry is not None and fresh(entry, time.time(), newer):
            hit = served_hit("exact", entry, 1.0, self._served_by)
        elif not served:  # the store is away: its candidates could not be read either
            hit = None
        elif self.semantic and keys.query.strip() and (self._local or self._server is not None):
            hit = yield work(lambda: self._semantic_by(keys, deadline, by, newer))
        else:
            hit = None
        if hit is not None and hit.kind == "semantic" and self.monitor is not None:
            if not self._closed:  # (a closed cache starts no background check)
                self.monitor.sample(self.namespace, request, hit.response.text or "", scope)
            if not self.monitor.serving(self.namespace):  # checked, not served
                self.stats._add("monitor_refusals")
                hit = None
        counter = "misses" if hit is None else f"{hit.kind}_hits"
        self.stats._add(counter)
        return hit

    def sync_steps(self, deadline: float | None = None) -> Step[None]:
        """Apply the changes other processes made (read at most every ``sync_interval``
        seconds), as a step of a :class:`~llmguard_sdk._state.steps.Batch`; ``deadline``:
        the call's, which bounds the read as it bounds a lookup (see :class:`CacheOptions`)."""
        if not self.semantic or self._server is not None:
            return  # with server-side search there is no local index to keep in step
        if time.monotonic() - self._synced_at < self._sync_interval:
            return
        if not self._local.syncing.acquire(blocking=False):
            return  # another call's sync is under way (its changes are applied in order)
        try:
            self._synced_at = time.monotonic()
            changes: list[Change] = yield from self._backend_step("changes", by=lookup_by(deadline))
            self._local.apply(changes)
        finally:
            self._local.syncing.release()

    def lookup(
        self,
        request: ChatRequest,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> CacheHit | None:
        """The cached answer for this call, or ``None`` (counted in :attr:`stats`)."""
        lookup = self.lookup_steps(request, scope, **options)
        syncing = self.sync_steps(options.get("deadline"))
        hit: CacheHit | None = Batch([syncing, lookup]).run()[1].result()
        return hit

    def lookup_stale(
        self,
        request: ChatRequest,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> CacheHit | None:
        """A fresh *or expired* answer (within ``stale_ttl``), for when every route failed
        (none for a ``refresh``; ``max_age`` not applied; ``deadline``: :class:`CacheOptions`)."""
        keys = self.call_keys(request, scope, **options)
        if keys is None or options.get("refresh", False):
            return None
        hit = self._stale(keys, stale_by(options.get("deadline")))
        if hit is not None:
            self.stats._add("stale_hits")
            if hit.matched == "semantic":
                self.stats._add("stale_semantic_hits")
            return dataclasses.replace(hit, kind="stale")
        return None

    async def alookup(
        self,
        request: ChatRequest,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> CacheHit | None:
        """Async twin of :meth:`lookup` (the embedding and search run in a worker thread)."""
        scope = scope or current_scope()
        lookup = self.lookup_steps(request, scope, **options)
        syncing = self.sync_steps(options.get("deadline"))
        hit: CacheHit | None = (await Batch([syncing, lookup]).arun())[1].result()
        return hit

    async def alookup_stale(
        self,
        request: ChatRequest,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> CacheHit | None:
        """:meth:`lookup_stale` in a worker thread."""
        scope = scope or current_scope()
        return await anyio.to_thread.run_sync(lambda: self.lookup_stale(request, scope, **options))

    def _stale(self, keys: CacheKeys, by: float | None) -> CacheHit | None:
        """A stale lookup's hit, its reads of a shared store (the entry, the other processes'
        changes, the candidates) waiting until ``by`` at most (:func:`stale_by`)."""
        with answered_by(by):
            entry, served = run(self._read_steps(keys.exact, by))
            if entry is not None:
                return served_hit("exact", entry, 1.0, self._served_by)
            if not served:  # the store is away: its candidates could not be read either
                return None
            stopped = self.monitor is not None and not self.monitor.serving(self.namespace)
            if stopped or not self.semantic or not keys.query.strip():
                return None  # (semantic hits the monitor stopped are not served stale either)
            self._sync(by)
            return self._semantic(keys, stale=True, deadline=by)

    # -- stores -----------------------------------------------------------------------------

    def entry_for(
        self,
        request: ChatRequest,
        response: ChatResponse,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> CacheEntry | None:
        """The entry :meth:`store` would write for this call (``None``: not cacheable); the
        embedding is computed here (CPU work, or bounded by ``deadline``: see
        :class:`CacheOptions`), the write is :meth:`put_steps`."""
        check_call(request, response, options)
        if not storable(request, response):
            return None
        keys = self.call_keys(request, scope, **options)
        if keys is None:
            return None
        vector = None
        if self.semantic and keys.query.strip():
            timeout = embedding_time(options.get("deadline"))
            vector = self._recent.embedded(keys.query, timeout).encoded()
        now = time.time()  # after the embedding (a first one can take a second or more)
        fresh, stale = kept_until(response, now, options.get("ttl") or self.ttl, self.stale_ttl)
        return CacheEntry(
            entry_id=keys.exact,
            index_key=self._index_key(keys),
            query=keys.query,
            response=cached_form(response),
            created_at=now,
            fresh_until=fresh,
            stale_until=stale,
            embedder=self.embedder.name if vector is not None else None,
            vector=vector,
        )

    def put_steps(self, entry: CacheEntry, deadline: float | None = None) -> Step[bool]:
        """Write ``entry`` (from :meth:`entry_for`), as a step of a
        :class:`~llmguard_sdk._state.steps.Batch`; whether it was stored (False: not kept
        within ``max_bytes``, or a shared store unreachable, so nothing was written).
        ``deadline``: the call's; a shared store's answer is waited for until then at most."""
        evicted: list[str] | None = yield from self._backend_step("put", entry, by=deadline)
        if evicted is None:  # (Redis away: the write was dropped, logged once per outage)
            self.stats._add("errors")
            return False
        kept = entry.entry_id not in evicted  # (one larger than a byte bound is not)
        if not kept:
            self.stats._add("too_large")
        if entry.vector is not None and self._server is None and kept:
            stored = self._recent.stored_probe(entry.query, entry.vector)
            self._local.remember(entry.entry_id, entry.index_key, stored)
            self._local.know(entry.entry_id, entry.query)
            if (
                isinstance(self._backend, MemoryCacheBackend)
                and entry.entry_id not in self._backend
            ):
                evicted.append(entry.entry_id)  # evicted by another thread before it was indexed
        for entry_id in evicted:
            self._local.forget(entry_id)
        if kept:
            self.stats._add("stores")
        return kept

    def store(
        self,
        request: ChatRequest,
        response: ChatResponse,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> bool:
        """Cache ``response`` for this call; returns whether it was stored: False when it
        may not be (see below), when it is larger than ``max_entry_bytes`` or ``max_bytes``
        (counted in ``stats.too_large``), and when a Redis
        store could not be reached (the answer is then in no store, this process's index
        included).

        Answers with tool calls, truncated (``finish_reason`` other than a natural stop),
        degraded or already-cached answers, refusals, blank answers and answers that are not
        the JSON the request asked for are not stored.
        """
        entry = self.entry_for(request, response, scope, **options)
        return entry is not None and run(self.put_steps(entry, options.get("deadline")))

    async def astore(
        self,
        request: ChatRequest,
        response: ChatResponse,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> bool:
        """Async twin of :meth:`store` (the embedding runs in a worker thread)."""
        scope = scope or current_scope()
        entry = await anyio.to_thread.run_sync(
            lambda: self.entry_for(request, response, scope, **options)
        )
        return entry is not None and await arun(self.put_steps(entry, options.get("deadline")))

    def clear(self) -> None:
        """Delete every entry of this cache's namespace (in every process sharing it).

        Raises :class:`~llmguard_sdk.errors.StoreUnavailableError` when its Redis could not
        be reached: nothing was deleted, there or here (this process's index still matches
        what Redis holds); try again once Redis is back."""
        self._backend.clear()
        self._local.clear()

    async def aclear(self) -> None:
        """:meth:`clear` in a worker thread (a large namespace takes many scripts)."""
        await anyio.to_thread.run_sync(self.clear)

    def invalidate(
        self,
        target: ChatRequest | CacheHit | ChatResponse,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> bool:
        """Delete one cached answer, in every process sharing the cache: it is served
        neither fresh nor stale again, by its key or by similarity (a later answer to the
        same request is stored as usual). ``target`` is an answer served from the cache (the
        :class:`CacheHit` of a lookup, or a Guard's answer, whose ``metadata["cache_entry"]``
        names its entry), or a request: its own entry, the one its exact key names in
        ``scope`` with ``tags`` (a Guard keys a call that names no ``model`` with its first
        route's model). Whether an entry was deleted: False for an answer not from the
        cache. Raises :class:`~llmguard_sdk.errors.StoreUnavailableError` when Redis could
        not be reached (nothing was deleted)."""
        if isinstance(target, ChatRequest):
            check_call(target, None, options)
            entry_id: str | None = self.keys(target, scope, options.get("tags", ())).exact
        else:
            entry_id = served_entry(target)  # (anything else: a RequestValidationError)
        if entry_id is None:
            return False
        deleted = self._backend.delete(entry_id)
        self._local.forget(entry_id)
        return deleted

    async def ainvalidate(
        self,
        target: ChatRequest | CacheHit | ChatResponse,
        scope: Scope | None = None,
        **options: Unpack[CacheOptions],
    ) -> bool:
        """:meth:`invalidate` in a worker thread."""
        scope = scope or current_scope()
        return await anyio.to_thread.run_sync(lambda: self.invalidate(target, scope, **options))

    def report_false_hit(self, hit: CacheHit | ChatResponse) -> bool:
        """Record that a served answer answered the wrong question (feeds ``stats.false_hit_rate``
        and the ``monitor``'s estimate): ``hit`` is a lookup's :class:`CacheHit` or the answer
        a Guard returned (its metadata say how its entry was found, ``cache_matched``, and
        which cache served it, ``cache_served_by``). Whether it counted: not for an answer
        found by its exact key (it answered the same request), nor one another cache served
        (another namespace or in-memory cache judges it), nor one not from the cache. Anything
        else is a :class:`~llmguard_sdk.errors.RequestValidationError`."""
        if not false_hit_here(hit, self._served_by):
            return False
        self.stats._add("false_hits")
        if self.monitor is not None:
            self.monitor.report(self.namespace)
        return True

    # -- the in-memory index ------------------------------------------------------------------

    def _sync(self, deadline: float | None = None) -> None:
        run(self.sync_steps(deadline))

    def _read_steps(
        self, entry_id: str, by: float | None = None
    ) -> Step[tuple[CacheEntry | None, bool]]:
        """The live entry ``entry_id`` names (marked as used), and whether the store served
        the read (one it did not, by ``by`` at the latest, is counted in ``stats.errors``)."""
        read = getattr(self._backend, "read_steps", None)
        if read is not None:
            found: tuple[CacheEntry | None, bool] = yield from read(entry_id, by)
        else:
            found = (yield work(lambda: self._backend.get(entry_id))), True
        if not found[1]:
            self.stats._add("errors")
        return found

    def _semantic_by(
        self, keys: CacheKeys, deadline: float | None, by: float | None, newer: float | None
    ) -> CacheHit | None:
        """A lookup's semantic search: its reads of a shared store (candidates, a server
        search) wait until ``by`` at most; an entry stored before ``newer`` is not served."""
        with answered_by(by):
            return self._semantic(keys, stale=False, deadline=deadline, newer_than=newer)

    def _backend_step(self, name: str, *args: Any, by: float | None = None) -> Step[Any]:
        """The backend's step for ``name`` (a Redis backend's own, its answer waited for
        until ``by`` at most), else its method as blocking work."""
        steps = getattr(self._backend, f"{name}_steps", None)
        if steps is not None:
            return (yield from steps(*args, by))
        method = getattr(self._backend, name)
        return (yield work(lambda: method(*args)))

    def close(self, timeout: float = 5.0) -> None:
        """Stop the monitor's background checks (queued ones are dropped, one under way is
        waited for at most ``timeout`` seconds) and close the store's connections. A closed
        cache still answers (the store reconnects when used) but queues no more checks; the
        embedder is the caller's and stays open (the default one holds nothing)."""
        self._closed = True
        if self.monitor is not None:  # (a monitor shared with another cache restarts there)
            self.monitor.close(timeout)
        self.state.close()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Async twin of :meth:`close`: also closes this event loop's async Redis client."""
        self._closed, monitor = True, self.monitor
        if monitor is not None:
            await anyio.to_thread.run_sync(monitor.close, timeout)
        await self.state.aclose()
