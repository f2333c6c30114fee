"""The embeddings of the last few queries of a cache: the store after a missed lookup neither
embeds the same question again nor computes its sketch again."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

from .._lazy import np
from .._state.bounds import SHARE, ahead_of
from ..errors import ConfigurationError
from .embedders import Embedder
from .embedders.base import embed_within
from .entry import decode_vector, encode_vector
from .index import Probe

__all__ = ["STALE_FLOOR_S", "RecentEmbeddings", "embedding_time", "lookup_by", "stale_by"]

_KEPT_CHARS = 2048  # a longer query is remembered under its digest, not its text
# of what is left of a call's deadline, for what a lookup waits on (an embedder, Redis)
_LOOKUP_SHARE = SHARE
STALE_FLOOR_S = 0.25
"""The least a stale lookup (stale-if-error, after the routes failed) may wait for its store
however little of the call's deadline is left: a few round trips to Redis (a new
connection, a script loaded again, the read) even across zones, where the call has most
likely spent its deadline on the routes already, and short next to what it waited then."""


def embedding_time(deadline: float | None) -> float | None:
    """The most seconds the embedding may wait: half of what is left before ``deadline`` (a
    :func:`time.monotonic` instant; the other half is the provider's, on a miss)."""
    return None if deadline is None else (deadline - time.monotonic()) * _LOOKUP_SHARE


def lookup_by(deadline: float | None) -> float | None:
    """Until when a lookup waits for a shared store (a :func:`time.monotonic` instant): half
    of what is left before ``deadline``, as the embedding (``None``: no deadline)."""
    return ahead_of(deadline)


def stale_by(deadline: float | None) -> float | None:
    """Until when a stale lookup waits for a shared store (a :func:`time.monotonic` instant):
    as :func:`lookup_by`, half of what is left before ``deadline`` (the rest is a local
    route's that stands in, or the degraded answer's), but :data:`STALE_FLOOR_S` at least,
    past the deadline if need be: a stale answer is the call's last chance of one (``None``:
    no deadline, the store's own timeouts)."""
    if deadline is None:
        return None
    now = time.monotonic()
    return now + max((deadline - now) * _LOOKUP_SHARE, STALE_FLOOR_S)


class _Embedded:
    """A recent query's probe (its vector, ready to search and to add) and the vector as an
    entry stores it (float16, base64), encoded once."""

    __slots__ = ("_encoded", "probe")

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self._encoded: str | None = None

    def encoded(self) -> str:
        """:func:`~llmguard_sdk.cache.entry.encode_vector` of the vector (computed once)."""
        if self._encoded is None:
            self._encoded = encode_vector(self.probe.half)
        return self._encoded


class RecentEmbeddings:
    """The last ``size`` queries' embeddings by ``embedder`` (thread-safe)."""

    def __init__(self, embedder: Embedder, size: int = 256) -> None:
        self._embedder = embedder
        self._size = size
        self._recent: OrderedDict[str | bytes, _Embedded] = OrderedDict()
        self._lock = threading.Lock()

    def embedded(self, query: str, timeout: float | None = None) -> _Embedded:
        """The query's embedding, remembered (:class:`ConfigurationError` when the embedder's
        vector is not of its declared dimension); ``timeout``: the most seconds an embedder that
        takes one may wait (see :func:`~llmguard_sdk.cache.embedders.base.embed_within`)."""
        key = _key(query)
        with self._lock:
            embedded = self._recent.get(key)
            if embedded is not None:
                return embedded
        vector = np.asarray(embed_within(self._embedder, [query], timeout)[0], dtype=np.float32)
        if vector.shape != (self._embedder.dimension,):
            raise ConfigurationError(
                f"embedder {self._embedder.name!r} returned a vector of shape {vector.shape}, "
                f"not of its dimension {self._embedder.dimension}"
            )
        embedded = _Embedded(Probe(vector))
        with self._lock:
            self._recent[key] = embedded
            if len(self._recent) > self._size:
                self._recent.popitem(last=False)
        return embedded

    def stored_probe(self, query: str, vector: str) -> Probe:
        """What the local index adds for an entry of ``query`` holding ``vector`` (encoded):
        the probe this process's lookup made for the same vector where there is one (its
        float16 vector and its sketch are not computed again), else the entry's vector."""
        with self._lock:
            embedded = self._recent.get(_key(query))
        if embedded is not None and embedded.encoded() == vector:
            return embedded.probe
        return Probe(decode_vector(vector))


def _key(query: str) -> str | bytes:
    """What a query is remembered under: its text, or the digest of a long one (256 pasted
    documents would otherwise be held whole; bytes, never equal to a query's text)."""
    if len(query) <= _KEPT_CHARS:
        return query
    return hashlib.blake2b(query.encode("utf-8", "surrogatepass"), digest_size=16).digest()
