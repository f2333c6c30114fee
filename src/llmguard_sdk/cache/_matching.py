"""The semantic half of a lookup: the nearest earlier queries of a partition, and the
checks (false-hit guards, ambiguity margin, verifier) that each must pass to be served.

Private: :class:`~llmguard_sdk.cache.ResponseCache` inherits it.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache

from .._state.steps import run
from .._state.stores import Store, hash_id
from ..errors import ProviderError
from ._local import _LocalIndexes
from ._recent import RecentEmbeddings, embedding_time
from ._served import served_hit
from .backends import CacheBackend, RedisCacheBackend
from .calibrate import Scorer
from .entry import CacheEntry, CacheHit, CacheStats
from .guards import AGREED_ALLOWANCE, Verifier, guard_rejection, strict_agreement
from .index import Match, Probe
from .keys import CacheKeys
from .monitor import FalseHitMonitor

__all__ = ["fresh"]

logger = logging.getLogger("llmguard_sdk")

_NEAR_MISS_BAND = 0.1
_CANDIDATES = 4  # nearest entries read per semantic search
# hash_id of the tenants, users and (partition, context) pairs that come again
_id_hash = lru_cache(maxsize=4096)(hash_id)


def fresh(entry: CacheEntry, now: float, newer_than: float | None = None) -> bool:
    """Whether ``entry`` is served fresh at ``now``: before its ``fresh_until``, and stored at
    ``newer_than`` or later (a call's ``max_age``; ``None``: whenever)."""
    return entry.fresh_until > now and (newer_than is None or entry.created_at >= newer_than)


class _Unserved(Exception):
    """A read or search of the semantic lookup that the store did not serve."""


class _SemanticMatching:
    """The semantic search and its checks, written against the cache's parts (set by
    :class:`~llmguard_sdk.cache.ResponseCache`'s constructor)."""

    state: Store
    namespace: str
    threshold: float
    margin: float
    verify_band: float
    guards: bool
    strict: bool
    verifier: Verifier | None
    monitor: FalseHitMonitor | None
    stats: CacheStats
    _backend: CacheBackend
    _server: RedisCacheBackend | None
    _local: _LocalIndexes
    _recent: RecentEmbeddings
    _served_by: str  # the name its hits carry (see _served.cache_name)

    def _semantic(
        self,
        keys: CacheKeys,
        *,
        stale: bool,
        deadline: float | None = None,
        newer_than: float | None = None,
    ) -> CacheHit | None:
        """The closest earlier query's answer that passes every check, or None. A candidate
        whose query this process knows is checked by the guards before it is read. Below the
        threshold, only a request the strict guards read as the same one (within
        :data:`~llmguard_sdk.cache.guards.AGREED_ALLOWANCE`) is served. Callers check that the
        cache is semantic and the query not blank; ``deadline``: see :class:`CacheOptions`;
        ``newer_than``: a fresh entry stored before this instant is not served. A ``stale``
        search counts no near miss or rejection: the lookup before it counted its candidates
        (a call whose routes failed counted each twice). A read or server search the store
        did not serve is a miss, counted in ``stats.errors`` (stale searches too)."""
        try:
            return self._search(keys, stale=stale, deadline=deadline, newer_than=newer_than)
        except _Unserved:  # (the other reads would not be served either)
            return None

    def _search(
        self,
        keys: CacheKeys,
        *,
        stale: bool,
        deadline: float | None,
        newer_than: float | None,
    ) -> CacheHit | None:
        """:meth:`_semantic`, raising :class:`_Unserved`."""
        now = time.time()
        try:
            probe = self._recent.embedded(keys.query, embedding_time(deadline)).probe
        except ProviderError as exc:  # an endpoint down or slow: a miss, not a failed call
            logger.warning("response cache: the embedder failed (%s); a semantic miss", exc)
            return None
        except Exception:
            logger.exception("response cache: the embedder failed; a semantic miss")
            return None
        matches = self._candidates(self._index_key(keys), probe)
        threshold = self.threshold
        if self.monitor is not None:
            threshold += self.monitor.threshold_raise(self.namespace)
        floor = threshold - AGREED_ALLOWANCE if self.strict and self.guards else threshold
        counted = self.stats if not stale else CacheStats()  # (a stale search's: dropped)
        if matches and threshold - _NEAR_MISS_BAND <= matches[0].similarity < threshold:
            counted._add("near_misses")  # the best candidate fell just short (served or not)
        for match in matches:
            if match.similarity < floor:
                return None
            below = match.similarity < threshold
            known = self._local.queries.get(match.entry_id)
            if known is not None:
                if self.guards:
                    reason = self._guard(keys.query, known)
                    if reason is not None:
                        counted._reject(reason)
                        return None
                if below and not strict_agreement(keys.query, known):
                    continue
            entry = self._candidate(match.entry_id)
            if entry is None:  # expired or evicted meanwhile: try the next one
                continue
            if not stale and not fresh(entry, now, newer_than):
                continue
            if below and known is None and not strict_agreement(keys.query, entry.query):
                continue  # (a known query was judged before the read)
            refusal = self._refusal(keys.query, entry, match.similarity, matches)
            if refusal is not None:
                counted._reject(refusal)
                return None
            return served_hit("semantic", entry, match.similarity, self._served_by)
        return None

    def _candidates(self, index_key: str, probe: Probe) -> list[Match]:
        """One partition's nearest entries, best first: from the local index or the server
        (:class:`_Unserved` when it did not serve the search, counted in ``stats.errors``)."""
        if self._server is not None:
            found = run(self._server.served_search_steps(index_key, probe.vector, _CANDIDATES))
            if found is None:
                self.stats._add("errors")
                raise _Unserved
            return found
        return self._local.search(index_key, probe, _CANDIDATES)

    def _guard(self, query: str, cached: str) -> str | None:
        """The guards' reason to refuse (a scoring verifier judges key-term swaps itself)."""
        # a runtime-checkable Protocol's isinstance costs microseconds: test for None first
        substitutions = self.verifier is None or not isinstance(self.verifier, Scorer)
        return guard_rejection(query, cached, strict=self.strict, key_terms=substitutions)

    def _refusal(
        self, query: str, entry: CacheEntry, similarity: float, matches: list[Match]
    ) -> str | None:
        if self.guards:
            reason = self._guard(query, entry.query)
            if reason is not None:
                return reason
        if self.margin:
            for other in matches:
                if other.entry_id != entry.entry_id and other.similarity > similarity - self.margin:
                    rival = self._read(other.entry_id, touch=False)
                    if rival is not None and rival.response.get("text") != entry.response.get(
                        "text"
                    ):
                        return "ambiguous"
        if self.verifier is not None and similarity < self.threshold + self.verify_band:
            try:
                if not self.verifier(query, entry.query):
                    return "verifier"
            except Exception:
                logger.exception("cache verifier failed; refusing the match")
                return "verifier"
        return None

    def _candidate(self, entry_id: str) -> CacheEntry | None:
        """A semantic candidate's entry (its query kept); ``None`` when it is gone, forgotten
        too (a read the store did not serve raises, see :meth:`_read`)."""
        entry = self._read(entry_id)
        if entry is None:
            self._local.forget(entry_id)
            return None
        self._local.know(entry.entry_id, entry.query)
        return entry

    def _read(self, entry_id: str, *, touch: bool = True) -> CacheEntry | None:
        """The live entry ``entry_id`` names, marked as recently used unless not ``touch``
        (where the backend can read without, its ``peek``: a rival read to judge a hit is
        not used); :class:`_Unserved` when the store did not serve the read (counted in
        ``stats.errors``: a miss then says nothing, the entry may well be there)."""
        read = getattr(self._backend, "read_steps", None)
        if read is not None:
            found: tuple[CacheEntry | None, bool] = run(read(entry_id, touch=touch))
        else:
            get = self._backend.get if touch else getattr(self._backend, "peek", None)
            found = (get or self._backend.get)(entry_id), True
        if not found[1]:
            self.stats._add("errors")
            raise _Unserved
        return found[0]

    def _index_key(self, keys: CacheKeys) -> str:
        return _id_hash(keys.partition + keys.context)
