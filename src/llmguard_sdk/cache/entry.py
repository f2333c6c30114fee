"""What the response cache stores and reports: entries, hits and counters.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict

from .._lazy import np
from ..models import ChatResponse
from .keys import CacheKeys

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "CacheEntry",
    "CacheHit",
    "CacheOptions",
    "CacheStats",
    "decode_vector",
    "encode_vector",
]


class CacheOptions(TypedDict, total=False):
    """The keywords of :class:`~llmguard_sdk.cache.ResponseCache`'s lookups and stores.

    .. versionadded:: 0.2.0
    """

    tags: Sequence[str]
    """The call's permission tags: only calls with the same tags share entries (``()``)."""
    cacheable: bool
    """``False``: the call neither reads nor writes the cache (``True``)."""
    keys: CacheKeys | None
    """The call's keys from :meth:`~llmguard_sdk.cache.ResponseCache.call_keys`, given to the
    lookup and the store of the same request, scope and tags so that they are computed once
    (``None``: computed from the request)."""
    refresh: bool
    """``True``: the lookup reads nothing (``None``, counted in ``skipped``; the stale lookup
    too) and the store writes as usual: the call's new answer replaces the entry (``False``).

    .. versionadded:: 0.2.0"""
    ttl: float | None
    """Seconds the stored answer is fresh (then ``stale_ttl`` more, as any), instead of the
    cache's ``ttl`` (``None``).

    .. versionadded:: 0.2.0"""
    max_age: float | None
    """Seconds: the lookup serves only an entry stored less long ago (exact or semantic;
    ``None``: any fresh one). The stale lookup after every route failed, a last resort,
    ignores it.

    .. versionadded:: 0.2.0"""
    deadline: float | None
    """The call's deadline, a :func:`time.monotonic` instant: an embedder that takes a
    ``timeout`` (:class:`~llmguard_sdk.cache.OpenAIEmbedder`) waits at most half of what is
    left of it, and a lookup whose embedding times out is a miss; a lookup waits for a Redis
    store at most half of what is left of it too (a miss then, counted in
    ``stats.errors``; Redis is not paused for it), and a store at most all of it (``None``:
    the embedder's and the store's own timeouts). The stale lookup after every route failed
    waits as the lookup does, but a quarter of a second at least, past the deadline if need
    be (:data:`~llmguard_sdk.cache._recent.STALE_FLOOR_S`: a stale answer is the call's last
    chance of one).

    .. versionadded:: 0.2.0
    """


class CacheEntry(BaseModel):
    """One cached answer, stored as JSON (never pickle).

    ``index_key`` is the hash of the partition and the context: semantic candidates are only
    searched among entries with the same one. Times are Unix seconds; the entry is served as
    fresh until ``fresh_until`` and, for stale-if-error reads only, until ``stale_until``.
    """

    model_config = ConfigDict(frozen=True)

    entry_id: str
    index_key: str
    query: str
    response: dict[str, Any]
    created_at: float
    fresh_until: float
    stale_until: float
    embedder: str | None = None
    vector: str | None = None
    """The query's embedding: float16 bytes, base64-encoded."""

    def chat_response(self) -> ChatResponse:
        """The cached answer as a :class:`~llmguard_sdk.ChatResponse`."""
        return ChatResponse.model_validate(self.response)


def encode_vector(vector: npt.NDArray[np.float32] | npt.NDArray[np.float16]) -> str:
    """A vector as base64 of its float16 bytes (compact and JSON-safe)."""
    return base64.b64encode(vector.astype("<f2", copy=False).tobytes()).decode("ascii")


def decode_vector(text: str) -> npt.NDArray[np.float32]:
    """The inverse of :func:`encode_vector`."""
    return np.frombuffer(base64.b64decode(text), dtype="<f2").astype(np.float32)


@dataclass(frozen=True)
class CacheHit:
    """A cached answer chosen for a request.

    ``kind`` is ``"exact"``, ``"semantic"`` or ``"stale"`` (an expired entry served because
    every route failed); ``similarity`` is 1.0 for exact hits. ``matched`` says how the entry
    was found, by the request's exact key or by similarity (a stale hit keeps it).
    ``served_by`` names the cache that served it (see
    :meth:`~llmguard_sdk.cache.ResponseCache.report_false_hit`).
    """

    kind: Literal["exact", "semantic", "stale"]
    entry_id: str
    similarity: float
    response: ChatResponse
    query: str
    matched: Literal["exact", "semantic"] = "semantic"
    served_by: str = ""


_COUNTING = threading.Lock()  # every cache's counters (each update holds it for nanoseconds)


@dataclass
class CacheStats:
    """Counters of one cache since it was built (this process only), updated under a lock
    (a cache serves many threads at once).

    ``near_misses`` counts the best semantic candidates that scored within 0.1 below the
    threshold; ``guard_rejections`` counts candidates above it refused by a false-hit guard
    (by reason; a new dict at each change, so one read can be iterated while lookups go
    on); both are counted by lookups (a stale lookup, after every route failed, counts its
    hit alone); ``false_hits`` counts :meth:`ResponseCache.report_false_hit` calls that
    counted.
    """

    exact_hits: int = 0
    semantic_hits: int = 0
    stale_hits: int = 0
    stale_semantic_hits: int = 0
    """Stale hits whose entry was found by similarity (also in ``stale_hits``)."""
    misses: int = 0
    near_misses: int = 0
    stores: int = 0
    skipped: int = 0
    false_hits: int = 0
    monitor_refusals: int = 0
    """Semantic hits not served because the monitor stopped them (checked in the background
    instead)."""
    too_large: int = 0
    """Answers not stored for their size: larger than ``max_entry_bytes``, or than an
    in-memory cache's whole ``max_bytes``.

    .. versionadded:: 0.2.0"""
    errors: int = 0
    """Lookups (stale ones too) and stores that a shared store did not serve: Redis away,
    paused after a failure, or refusing the command. A lookup is a miss too (in ``misses``),
    a store returns False; a Redis outage shows here, not only as misses and a log line.

    .. versionadded:: 0.2.0"""
    guard_rejections: dict[str, int] = field(default_factory=dict)

    @property
    def false_hit_rate(self) -> float:
        """Reported false hits over the hits found by similarity, fresh and stale (0 when
        there were none; at most 1, even when a hit was reported twice or a report came
        for a hit served before a restart or by another process)."""
        with _COUNTING:
            served = self.semantic_hits + self.stale_semantic_hits
            return min(1.0, self.false_hits / served) if served else 0.0

    def _add(self, counter: str, amount: int = 1) -> None:
        """Add ``amount`` to ``counter`` (a field's name)."""
        with _COUNTING:
            setattr(self, counter, getattr(self, counter) + amount)

    def _reject(self, reason: str) -> None:
        """Count one guard rejection for ``reason``."""
        with _COUNTING:
            counts = self.guard_rejections
            self.guard_rejections = {**counts, reason: counts.get(reason, 0) + 1}
