"""An in-memory vector index: unit vectors in a numpy matrix, searched by cosine similarity.

Rows are stored as float16 (half the memory bandwidth of float32). Below ``exact_below``
rows, a search multiplies the whole matrix. From there on, the index also keeps a 256-bit
sketch of each row (the signs of a fixed random projection, SimHash: 32 bytes a row): a
search first ranks every row by the Hamming distance of its sketch to the query's (an XOR
and a bit count over 32 bytes a row instead of reading the 2 KB row), then scores the best
``candidates`` rows exactly. The share of differing bits estimates the angle between two
vectors to within about 0.1 radian, far less than the gap between a paraphrase (similarity
0.6 and up) and unrelated text (about 0.1).

A query is a :class:`Probe`: a sparse one (the hashing embedder's vectors have about 160
nonzero dimensions of 1024) is scored over its nonzero dimensions only, and its sketch is
computed once, so the store that follows a missed lookup reuses it.

Memory: an index holds nothing but its rows until it grows. It starts with room for one row
and grows by doubling up to 256 rows, then by a sixteenth, so a partition with one entry
costs its vector and a few hundred bytes, and a large one about 3 % of slack. A small index
finds an entry's row by scanning its row ids (no id -> row dict below 9 rows), has no mask
of live rows until its first delete, and shares one of a fixed set of locks with other
indexes. A freed row is reused by the next insert; once no more than a quarter of an
index's rows (past 64) are live, the live ones move into arrays of their size (a partition
that once held thousands of entries and keeps a few holds a few rows, not its peak).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._lazy import np

if TYPE_CHECKING:
    import numpy.typing as npt

_Row = TypeVar("_Row", bound="np.generic")

__all__ = ["Match", "Probe", "VectorIndex"]

_SKETCH_BITS = 256
_SKETCH_WORDS = _SKETCH_BITS // 64
_DOUBLING_UNTIL = 256
_SPARSE_SHARE = 2  # a probe with at most half of its dimensions nonzero is scored sparsely
_SORTED_UP_TO = 32_768  # rows up to which _nearest sorts the distances (past it: counts them)
_ROW_MAP_FROM = 9  # rows from which an index keeps an id -> row dict (below: a scan of its ids)
# an index of more rows than this whose live rows fell to a quarter of them is compacted
_COMPACT_FROM = 64
# Indexes share these locks (one each, in turn): a lock per index would cost each one-entry
# partition 56 bytes; no code holds one index's lock while it takes another's.
_LOCKS = tuple(threading.Lock() for _ in range(64))
_next_lock = itertools.count()


@dataclass(frozen=True)
class Match:
    """One search result: the entry id and its cosine similarity to the query."""

    entry_id: str
    similarity: float


class Probe:
    """A vector prepared for :meth:`VectorIndex.search` and :meth:`VectorIndex.add`.

    When at most half of its dimensions are nonzero, a search reads and scores the
    rows over those dimensions only. Its sketch (see the module docs) is computed on first
    use and kept, so one probe searched and then added costs one projection; ``known_sketch``
    is it when it was computed.

    .. versionadded:: 0.2.0
    """

    __slots__ = ("_half", "_nonzero", "_sketch", "_values", "vector")

    def __init__(
        self, vector: npt.NDArray[np.float32], sketch: npt.NDArray[np.uint64] | None = None
    ) -> None:
        """``sketch``: the one :meth:`sketch` returns, where a probe of the same vector (as
        stored) already computed it."""
        self.vector: npt.NDArray[np.float32] = np.asarray(vector, dtype=np.float32)
        self._values: npt.NDArray[np.float32] | None = None  # found on first use
        self._nonzero: npt.NDArray[np.intp] | None = None
        self._sketch = sketch
        self._half: npt.NDArray[np.float16] | None = None

    @property
    def half(self) -> npt.NDArray[np.float16]:
        """The vector as the index stores it (float16, little-endian), computed once."""
        if self._half is None:
            self._half = self.vector.astype("<f2")
        return self._half

    @property
    def nonzero(self) -> npt.NDArray[np.intp] | None:
        """The nonzero dimensions of a sparse vector (``None``: a dense one)."""
        self._sparse()
        return self._nonzero

    @property
    def values(self) -> npt.NDArray[np.float32]:
        """The vector's values at :attr:`nonzero` (all of them for a dense one)."""
        return self._sparse()

    def _sparse(self) -> npt.NDArray[np.float32]:
        if self._values is None:
            nonzero = self.vector.nonzero()[0]
            if len(nonzero) * _SPARSE_SHARE <= len(self.vector):
                self._nonzero = nonzero
                self._values = self.vector[nonzero]
            else:
                self._values = self.vector
        return self._values

    @property
    def known_sketch(self) -> npt.NDArray[np.uint64] | None:
        """The sketch if it was computed (else ``None``)."""
        return self._sketch

    def sketch(self) -> npt.NDArray[np.uint64]:
        """The sketch of the vector as the index stores it (float16): 4 words."""
        if self._sketch is None:
            values = self._sparse()
            projection = _projection(len(self.vector))
            if self._nonzero is not None:
                projection = projection.take(self._nonzero, axis=0)
            stored = values.astype(np.float16).astype(np.float32)
            self._sketch = np.packbits((stored @ projection) > 0).view(np.uint64)
        return self._sketch

    def scores(self, rows: npt.NDArray[np.float16]) -> npt.NDArray[np.float32]:
        """The dot product of each of ``rows`` (float16, 2-d) with the vector."""
        values = self._sparse()
        if self._nonzero is not None:
            rows = rows.take(self._nonzero, axis=1)
        scores: npt.NDArray[np.float32] = _widened(rows) @ values
        return scores


@lru_cache(maxsize=8)
def _projection(dimension: int) -> npt.NDArray[np.float32]:
    """A fixed random projection to the sketch's bits (shared by every index)."""
    gaussian = np.random.default_rng(20261129).standard_normal((dimension, _SKETCH_BITS))
    projection: npt.NDArray[np.float32] = gaussian.astype(np.float32)
    return projection


def _sketches(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """The 256-bit sketch of each row of ``vectors`` (2-d), as 4 words a row."""
    signs = (vectors @ _projection(vectors.shape[1])) > 0
    packed: npt.NDArray[np.uint64] = (
        np.packbits(signs, axis=1).view(np.uint64).reshape(len(vectors), _SKETCH_WORDS)
    )
    return packed


def _hamming(sketches: npt.NDArray[np.uint64], query: npt.NDArray[np.uint64]) -> Any:
    """The number of bits (uint16) in which each row of ``sketches`` differs from ``query``.

    ``sketches`` is stored word by word (Fortran order): each word's column is XORed with
    one number, three times faster than broadcasting a row of four words."""
    differ = np.bitwise_xor(sketches.T, query[:, None])
    if hasattr(np, "bitwise_count"):  # numpy 2: counts of at most 64 a word, added as uint8
        counts = np.bitwise_count(differ)
        return np.add(counts[0] + counts[1], counts[2] + counts[3], dtype=np.uint16)
    table = _bit_counts()
    per_byte = table[np.ascontiguousarray(differ.T).view(np.uint8)]
    return per_byte.reshape(len(sketches), -1).sum(axis=1, dtype=np.uint16)


def _nearest(distance: Any, take: int) -> Any:
    """The rows of the ``take`` smallest distances, in row order: those under the ``take``-th
    smallest, then ties at it in row order.

    Up to :data:`_SORTED_UP_TO` rows, a stable sort (numpy's radix sort of 16-bit values: one
    call, measured faster there than the counting below, most of all in a call whose data
    left the CPU's caches); past it, the ``take``-th smallest is read off a count of each
    distance (small whole numbers: one pass, where a partial sort slows down on many equal
    values and a sort's passes grow with the rows)."""
    if len(distance) <= _SORTED_UP_TO:
        return np.sort(np.argsort(distance, kind="stable")[:take])
    cutoff = int(np.searchsorted(np.bincount(distance).cumsum(), take))
    closer = np.flatnonzero(distance < cutoff)
    tied = np.flatnonzero(distance == cutoff)[: take - len(closer)]
    return np.sort(np.concatenate([closer, tied]))


@lru_cache(maxsize=1)
def _bit_counts() -> npt.NDArray[np.uint8]:
    bits: npt.NDArray[np.uint8] = np.unpackbits(
        np.arange(256, dtype=np.uint8)[:, None], axis=1
    ).sum(axis=1, dtype=np.uint8)
    return bits


def _grown(size: int) -> int:
    return size * 2 if size < _DOUBLING_UNTIL else size + size // 16


def _extended(
    array: npt.NDArray[_Row], size: int, order: Literal["C", "F"] = "C"
) -> npt.NDArray[_Row]:
    """``array`` with rows of zeros added up to ``size`` rows (a new array)."""
    grown = np.zeros((size, *array.shape[1:]), dtype=array.dtype, order=order)
    grown[: len(array)] = array
    return grown


class VectorIndex:
    """Cosine top-k search over unit vectors, keyed by entry id (see the module docs)."""

    __slots__ = (
        "_candidates",
        "_end",
        "_exact_below",
        "_free",
        "_ids",
        "_live",
        "_lock",
        "_rows",
        "_sketch",
        "_vectors",
        "dimension",
    )

    def __init__(self, dimension: int, *, exact_below: int = 256, candidates: int = 64) -> None:
        self.dimension = dimension
        self._exact_below = exact_below
        self._candidates = candidates
        self._vectors = np.zeros((1, dimension), dtype=np.float16)
        # built once the index is large; (rows, 4) words in Fortran order (see _hamming)
        self._sketch: npt.NDArray[np.uint64] | None = None
        # which rows are live: None until the first delete (until then every row below _end)
        self._live: npt.NDArray[np.bool_] | None = None
        self._ids: list[str | None] = [None]
        self._rows: dict[str, int] | None = None  # built from _ROW_MAP_FROM rows on
        self._free: list[int] | None = None
        self._end = 0
        self._lock = _LOCKS[next(_next_lock) % len(_LOCKS)]

    def __len__(self) -> int:
        return self._end - len(self._free or ())

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and self._row_of(entry_id) is not None

    def _row_of(self, entry_id: str) -> int | None:
        """The row of ``entry_id`` (``None``: absent)."""
        if self._rows is not None:
            return self._rows.get(entry_id)
        try:
            return self._ids.index(entry_id, 0, self._end)
        except ValueError:
            return None

    def add(self, entry_id: str, vector: npt.NDArray[np.float32] | Probe) -> None:
        """Insert or replace the vector of ``entry_id`` (a :class:`Probe` already searched
        brings its sketch along)."""
        if isinstance(vector, Probe):  # its float16 vector: stored without a conversion
            probe: Probe | None = vector
            raw: npt.NDArray[Any] = vector.half
        else:
            probe, raw = None, vector
        with self._lock:
            row = self._row_of(entry_id)
            if row is None:
                row = self._free.pop() if self._free else self._grow()
                self._ids[row] = entry_id
                if self._rows is not None:
                    self._rows[entry_id] = row
                elif self._end >= _ROW_MAP_FROM:
                    ids = self._ids[: self._end]
                    self._rows = {known: at for at, known in enumerate(ids) if known is not None}
            self._vectors[row] = raw
            if self._live is not None:
                self._live[row] = True
            if self._sketch is not None:
                self._sketch[row] = (probe or Probe(raw)).sketch()
            elif len(self) >= self._exact_below:
                self._build_sketch()

    def remove(self, entry_id: str) -> None:
        """Forget ``entry_id`` (no-op when absent)."""
        with self._lock:
            row = self._row_of(entry_id)
            if row is not None:
                if self._rows is not None:
                    del self._rows[entry_id]
                if self._live is None:
                    self._live = np.zeros(len(self._ids), dtype=bool)
                    self._live[: self._end] = True
                self._live[row] = False
                self._ids[row] = None
                if self._free is None:
                    self._free = []
                self._free.append(row)
                if len(self._ids) > _COMPACT_FROM and len(self) * 4 <= len(self._ids):
                    self._compact()

    def _compact(self) -> None:
        """(Under the lock.) Move the live rows to the front of arrays sized for them as
        :meth:`add` grows them, the sketch dropped below ``exact_below`` (built again there)."""
        rows = [row for row in range(self._end) if self._ids[row] is not None]
        count = len(rows)
        size = max(1, _grown(count))
        self._vectors = _extended(self._vectors.take(rows, axis=0), size)
        if self._sketch is not None and count >= self._exact_below:
            self._sketch = _extended(self._sketch.take(rows, axis=0), size, order="F")
        else:
            self._sketch = None
        ids = [self._ids[row] for row in rows]
        self._ids = [*ids, *[None] * (size - count)]
        self._rows = None
        if count >= _ROW_MAP_FROM:
            self._rows = {known: at for at, known in enumerate(ids) if known is not None}
        self._live = None
        self._free = None
        self._end = count

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._rows = None
            self._free = None
            self._live = None
            self._ids = [None] * len(self._ids)
            self._end = 0

    def _build_sketch(self) -> None:
        sketch = np.zeros((len(self._ids), _SKETCH_WORDS), dtype=np.uint64, order="F")
        sketch[: self._end] = _sketches(_widened(self._vectors[: self._end]))
        self._sketch = sketch

    def _grow(self) -> int:
        if self._end == len(self._ids):
            size = _grown(len(self._ids))
            # Arrays of the exact size (np.resize would keep a larger one alive behind). The
            # rows are enlarged in place where numpy can (a realloc: the C library moves a
            # large block's pages without copying them), else copied.
            try:
                self._vectors.resize((size, self.dimension), refcheck=True)
            except ValueError:  # referenced elsewhere
                self._vectors = _extended(self._vectors, size)
            if self._sketch is not None:
                self._sketch = _extended(self._sketch, size, order="F")
            if self._live is not None:
                self._live = _extended(self._live, size)
            self._ids.extend([None] * (size - self._end))
        self._end += 1
        return self._end - 1

    def search(self, vector: npt.NDArray[np.float32] | Probe, k: int = 4) -> list[Match]:
        """The ``k`` most similar live entries, best first (pass a :class:`Probe` to
        reuse its sketch in a later :meth:`add`)."""
        probe = vector if isinstance(vector, Probe) else Probe(vector)
        with self._lock:
            end = self._end
            if not len(self):
                return []
            live = self._live if self._free else None  # rows freed and not reused: masked out
            if self._sketch is None or len(self) < self._exact_below:
                rows = np.arange(end)
                scores = probe.scores(self._vectors[:end])
            else:
                distance = _hamming(self._sketch[:end], probe.sketch())
                if live is not None:
                    distance[~live[:end]] = _SKETCH_BITS + 1
                rows = _nearest(distance, min(self._candidates, end))
                scores = probe.scores(self._vectors.take(rows, axis=0))
            if live is not None:
                scores[~live[rows]] = -np.inf
            take = min(k, len(rows))
            best = np.argpartition(scores, -take)[-take:]
            best = best[np.argsort(-scores[best])]
            ids = self._ids
            return [
                Match(ids[row] or "", similarity)
                for row, similarity in zip(rows[best].tolist(), scores[best].tolist(), strict=True)
                if math.isfinite(similarity)
            ]


@lru_cache(maxsize=1)
def _half_to_single() -> npt.NDArray[np.float32]:
    """Every float16 bit pattern's float32 value (256 KB): a table lookup widens rows about
    twice as fast as ``astype`` where numpy converts element by element."""
    table: npt.NDArray[np.float32] = (
        np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    )
    return table


def _widened(rows: npt.NDArray[np.float16]) -> npt.NDArray[np.float32]:
    """float16 ``rows`` as float32 (the same values)."""
    widened: npt.NDArray[np.float32] = np.take(_half_to_single(), rows.view(np.uint16))
    return widened
