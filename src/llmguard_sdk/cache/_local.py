"""This process's semantic indexes: one :class:`VectorIndex` per partition of two entries or
more, dropped with its last entry (a partition costs nothing before its first entry).

A partition of one entry (a small tenant's) has no index of its own: its vector is a row of
a :class:`_RowPool`, fixed blocks of rows shared by the cache's one-entry partitions. An
index of its own would hold that vector in a 2 KB block of the C heap; tens of thousands of
them, each allocated between a call's short-lived blocks, fragment the heap (measured: about
0.4 KB lost per partition besides the index's own few hundred bytes). The partition gets its
index when its second entry arrives.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

from .._lazy import np
from .entry import decode_vector
from .index import Match, Probe, VectorIndex

if TYPE_CHECKING:
    import numpy.typing as npt

    from .backends import Change

__all__: list[str] = []

_KNOWN_QUERY_CHARS = 2048  # longer queries are not kept in memory (the entry is read instead)
_POOL_BLOCK_ROWS = 256  # rows per block of a _RowPool (512 KB at 1,024 dimensions)


class _Partition(VectorIndex):
    """A partition's index that knows its key (entries point at it, not at a key string)."""

    __slots__ = ("key",)

    def __init__(self, key: str, dimension: int) -> None:
        super().__init__(dimension)
        self.key = key


class _RowPool:
    """Rows of float16 vectors in blocks of :data:`_POOL_BLOCK_ROWS` (never moved, so a row's
    number stays valid; a freed row is reused by the next one taken). Not thread-safe: its
    owner's lock is held around each call."""

    __slots__ = ("_blocks", "_dimension", "_end", "_free")

    def __init__(self, dimension: int) -> None:
        self._dimension = dimension
        self._blocks: list[npt.NDArray[np.float16]] = []
        self._end = 0
        self._free: list[int] = []

    def take(self, vector: npt.NDArray[np.floating[Any]]) -> int:
        """A new row holding ``vector``: its number."""
        if self._free:
            row = self._free.pop()
        else:
            row, self._end = self._end, self._end + 1
            if row == len(self._blocks) * _POOL_BLOCK_ROWS:
                block = np.zeros((_POOL_BLOCK_ROWS, self._dimension), dtype=np.float16)
                self._blocks.append(block)
        self._block(row)[0] = vector
        return row

    def put(self, row: int, vector: npt.NDArray[np.floating[Any]]) -> None:
        """Overwrite ``row`` with ``vector``."""
        self._block(row)[0] = vector

    def read(self, row: int) -> npt.NDArray[np.float16]:
        """A copy of ``row`` as a one-row matrix."""
        copy: npt.NDArray[np.float16] = self._block(row).copy()
        return copy

    def release(self, row: int) -> None:
        """Free ``row`` for reuse."""
        self._free.append(row)

    def _block(self, row: int) -> npt.NDArray[np.float16]:
        at = row % _POOL_BLOCK_ROWS
        return self._blocks[row // _POOL_BLOCK_ROWS][at : at + 1]


class _Single:
    """A partition of one entry: the entry and the row of the pool holding its vector."""

    __slots__ = ("entry_id", "key", "row")

    def __init__(self, key: str, entry_id: str, row: int) -> None:
        self.key = key
        self.entry_id = entry_id
        self.row = row


class _LocalIndexes:
    """Partition -> index, entry -> partition and (for a shared store) entry -> query, the
    query kept so the guards can refuse a candidate without a round trip."""

    def __init__(self, dimension: int, *, keep_queries: bool) -> None:
        self.dimension = dimension
        self.keep_queries = keep_queries
        self.indexes: dict[str, _Partition | _Single] = {}
        self.index_of: dict[str, _Partition | _Single] = {}
        self._pool = _RowPool(dimension)
        self.queries: dict[str, str] = {}
        self._lock = threading.Lock()
        # held while a sync reads the change stream and applies it (one sync at a time, so the
        # stream's parts are applied in order; a sync that finds it held skips)
        self.syncing = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.indexes)

    def search(
        self, index_key: str, vector: npt.NDArray[np.float32] | Probe, k: int
    ) -> list[Match]:
        """The ``k`` nearest entries of one partition, best first."""
        index = self.indexes.get(index_key)
        if isinstance(index, _Single):
            with self._lock:  # read while the row is still this entry's (not promoted)
                index = self.indexes.get(index_key)
                if isinstance(index, _Single):
                    entry_id, row = index.entry_id, self._pool.read(index.row)
            if isinstance(index, _Single):
                probe = vector if isinstance(vector, Probe) else Probe(vector)
                similarity = float(probe.scores(row)[0])
                return [Match(entry_id, similarity)] if math.isfinite(similarity) else []
        return index.search(vector, k=k) if index is not None else []

    def remember(
        self, entry_id: str, index_key: str, vector: npt.NDArray[np.float32] | Probe
    ) -> None:
        """Index ``vector`` as ``entry_id`` of partition ``index_key``."""
        raw = vector.half if isinstance(vector, Probe) else vector
        with self._lock:
            index = self.indexes.get(index_key)
            if index is None:
                single = _Single(index_key, entry_id, self._pool.take(raw))
                self.indexes[index_key] = self.index_of[entry_id] = single
                return
            if isinstance(index, _Single):
                if index.entry_id == entry_id:
                    self._pool.put(index.row, raw)
                    return
                index = self._promoted(index)
            index.add(entry_id, vector)
            self.index_of[entry_id] = index

    def _promoted(self, single: _Single) -> _Partition:
        """The index that replaces a one-entry partition when a second entry arrives."""
        index = _Partition(single.key, self.dimension)
        index.add(single.entry_id, self._pool.read(single.row)[0])
        self._pool.release(single.row)
        self.indexes[single.key] = self.index_of[single.entry_id] = index
        return index

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
            if index is None:
                return
            if isinstance(index, _Single):  # its one entry: the partition goes with it
                self._pool.release(index.row)
            else:
                index.remove(entry_id)
                if len(index):
                    return
            if self.indexes.get(index.key) is index:
                del self.indexes[index.key]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self.indexes.clear()
            self.index_of.clear()
            self.queries.clear()
            self._pool = _RowPool(self.dimension)

    def apply(self, changes: list[Change]) -> None:
        """Apply other processes' changes (puts of live entries, deletes, clears)."""
        now = time.time()
        for change in changes:
            if change.op == "put" and change.vector and change.stale_until > now:
                try:
                    vector = decode_vector(change.vector)
                except ValueError:  # (not base64 of float16: another version's, say)
                    continue
                if vector.shape == (self.dimension,):
                    self.remember(change.entry_id, change.index_key, vector)
            elif change.op == "del":
                self.forget(change.entry_id)
            elif change.op == "clear":
                self.clear()
