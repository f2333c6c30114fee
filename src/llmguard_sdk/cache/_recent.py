"""The embeddings of the last few queries of a cache: the store after a missed lookup neither
embeds the same question again nor computes its sketch again."""

from __future__ import annotations

import threading
from collections import OrderedDict

from .._lazy import np
from .embedders import Embedder
from .embedders.base import embed_within
from .entry import decode_vector, encode_vector
from .index import Probe

__all__ = ["RecentEmbeddings"]


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
        self._recent: OrderedDict[str, _Embedded] = OrderedDict()
        self._lock = threading.Lock()

    def embedded(self, query: str, timeout: float | None = None) -> _Embedded:
        """The query's embedding, remembered; ``timeout``: the most seconds an embedder that
        takes one may wait (see :func:`~llmguard_sdk.cache.embedders.base.embed_within`)."""
        with self._lock:
            embedded = self._recent.get(query)
            if embedded is not None:
                return embedded
        vector = np.asarray(embed_within(self._embedder, [query], timeout)[0], dtype=np.float32)
        embedded = _Embedded(Probe(vector))
        with self._lock:
            self._recent[query] = embedded
            if len(self._recent) > self._size:
                self._recent.popitem(last=False)
        return embedded

    def stored_probe(self, query: str, vector: str) -> Probe:
        """What the local index adds for an entry of ``query`` holding ``vector`` (encoded):
        the probe this process's lookup made for the same vector where there is one (its
        float16 vector and its sketch are not computed again), else the entry's vector."""
        with self._lock:
            embedded = self._recent.get(query)
        if embedded is not None and embedded.encoded() == vector:
            return embedded.probe
        return Probe(decode_vector(vector))
