"""This process's semantic indexes: one :class:`VectorIndex` per partition, made on the
first entry (a partition costs nothing before it has one) and dropped with its last.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from .entry import decode_vector
from .index import Match, Probe, VectorIndex

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .backends import Change

__all__: list[str] = []

_KNOWN_QUERY_CHARS = 2048  # longer queries are not kept in memory (the entry is read instead)


class _Partition(VectorIndex):
    """A partition's index that knows its key (entries point at it, not at a key string)."""

    __slots__ = ("key",)

    def __init__(self, key: str, dimension: int) -> None:
        super().__init__(dimension)
        self.key = key


class _LocalIndexes:
    """Partition -> index, entry -> partition and (for a shared store) entry -> query, the
    query kept so the guards can refuse a candidate without a round trip."""

    def __init__(self, dimension: int, *, keep_queries: bool) -> None:
        self.dimension = dimension
        self.keep_queries = keep_queries
        self.indexes: dict[str, _Partition] = {}
        self.index_of: dict[str, _Partition] = {}
        self.queries: dict[str, str] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.indexes)

    def search(
        self, index_key: str, vector: npt.NDArray[np.float32] | Probe, k: int
    ) -> list[Match]:
        """The ``k`` nearest entries of one partition, best first."""
        index = self.indexes.get(index_key)
        return index.search(vector, k=k) if index is not None else []

    def remember(
        self, entry_id: str, index_key: str, vector: npt.NDArray[np.float32] | Probe
    ) -> None:
        """Index ``vector`` as ``entry_id`` of partition ``index_key``."""
        with self._lock:
            index = self.indexes.get(index_key)
            if index is None:
                index = self.indexes[index_key] = _Partition(index_key, self.dimension)
            index.add(entry_id, vector)
            self.index_of[entry_id] = index

    def know(self, entry_id: str, query: str) -> None:
        """Keep an indexed entry's query (short ones, shared stores only)."""
        if self.keep_queries and len(query) <= _KNOWN_QUERY_CHARS:
            with self._lock:
                if entry_id in self.index_of:
                    self.queries[entry_id] = query

    def forget(self, entry_id: str) -> None:
        """Drop ``entry_id`` (its partition's index too when it was the last)."""
        with self._lock:
            self.queries.pop(entry_id, None)
            index = self.index_of.pop(entry_id, None)
            if index is not None:
                index.remove(entry_id)
                if not len(index) and self.indexes.get(index.key) is index:
                    del self.indexes[index.key]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self.indexes.clear()
            self.index_of.clear()
            self.queries.clear()

    def apply(self, changes: list[Change]) -> None:
        """Apply other processes' changes (puts of live entries, deletes, clears)."""
        now = time.time()
        for change in changes:
            if change.op == "put" and change.vector and change.stale_until > now:
                vector = decode_vector(change.vector)
                if vector.shape == (self.dimension,):
                    self.remember(change.entry_id, change.index_key, vector)
            elif change.op == "del":
                self.forget(change.entry_id)
            elif change.op == "clear":
                self.clear()
