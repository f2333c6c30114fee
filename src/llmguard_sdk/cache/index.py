"""An in-memory vector index: unit vectors in a numpy matrix, searched by cosine similarity.

Rows are stored as float16 (half the memory bandwidth of float32). Below ``exact_below``
rows, a search multiplies the whole matrix. From there on, the index also keeps a 256-bit
sketch of each row (the signs of a fixed random projection, SimHash: 32 bytes a row): a
search first ranks every row by the Hamming distance of its sketch to the query's (an XOR
and a bit count over 32 bytes a row instead of reading the 2 KB row), then scores the best
``candidates`` rows exactly. The share of differing bits estimates the angle between two
vectors to within about 0.1 radian, far less than the gap between a paraphrase (similarity
0.6 and up) and unrelated text (about 0.1).

Memory: an index holds nothing but its rows until it grows. It starts with room for one row
and grows by doubling up to 256 rows, then by a sixteenth, so a partition with one entry
costs its vector and a few hundred bytes, and a large one about 3 % of slack. Rows are never
moved on delete: a freed row is reused by the next insert.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from .._lazy import np

if TYPE_CHECKING:
    import numpy.typing as npt

_Row = TypeVar("_Row", bound="np.generic")

__all__ = ["Match", "VectorIndex"]

_SKETCH_BITS = 256
_SKETCH_WORDS = _SKETCH_BITS // 64
_DOUBLING_UNTIL = 256


@dataclass(frozen=True)
class Match:
    """One search result: the entry id and its cosine similarity to the query."""

    entry_id: str
    similarity: float


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
    """The number of bits in which each row of ``sketches`` differs from ``query``."""
    differ = np.bitwise_xor(sketches, query)
    if hasattr(np, "bitwise_count"):  # numpy 2
        # Each row's four per-word counts (at most 64 each) as the bytes of one uint32,
        # added in two steps inside the word: four times faster than a sum along the rows.
        counts = np.bitwise_count(differ).view(np.uint32).ravel()
        pairs = (counts & 0x00FF00FF) + ((counts >> 8) & 0x00FF00FF)
        return (pairs & 0xFFFF) + (pairs >> 16)
    table = _bit_counts()
    return table[differ.view(np.uint8)].reshape(len(differ), -1).sum(axis=1, dtype=np.int32)


def _nearest(distance: Any, take: int) -> Any:
    """The rows of the ``take`` smallest distances (small whole numbers): a count of each
    distance finds the cut-off, rows under it are taken and ties at it fill the rest (five
    times faster than ``argpartition`` at 100k rows)."""
    counts = np.bincount(distance, minlength=_SKETCH_BITS + 2)
    cutoff = int(np.searchsorted(np.cumsum(counts), take))
    closer = np.flatnonzero(distance < cutoff)
    tied = np.flatnonzero(distance == cutoff)[: take - len(closer)]
    return np.concatenate([closer, tied])


@lru_cache(maxsize=1)
def _bit_counts() -> npt.NDArray[np.uint8]:
    bits: npt.NDArray[np.uint8] = np.unpackbits(
        np.arange(256, dtype=np.uint8)[:, None], axis=1
    ).sum(axis=1, dtype=np.uint8)
    return bits


def _grown(size: int) -> int:
    return size * 2 if size < _DOUBLING_UNTIL else size + size // 16


def _extended(array: npt.NDArray[_Row], size: int) -> npt.NDArray[_Row]:
    """``array`` with rows of zeros added up to ``size`` rows (a new array)."""
    grown = np.zeros((size, *array.shape[1:]), dtype=array.dtype)
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
        self._sketch: npt.NDArray[np.uint64] | None = None  # built once the index is large
        self._live = np.zeros(1, dtype=bool)
        self._ids: list[str | None] = [None]
        self._rows: dict[str, int] = {}
        self._free: list[int] | None = None
        self._end = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._rows

    def add(self, entry_id: str, vector: npt.NDArray[np.float32]) -> None:
        """Insert or replace the vector of ``entry_id``."""
        with self._lock:
            row = self._rows.get(entry_id)
            if row is None:
                row = self._free.pop() if self._free else self._grow()
                self._rows[entry_id] = row
                self._ids[row] = entry_id
            self._vectors[row] = vector
            self._live[row] = True
            if self._sketch is not None:
                self._sketch[row] = _sketches(vector[None, :])[0]
            elif len(self._rows) >= self._exact_below:
                self._build_sketch()

    def remove(self, entry_id: str) -> None:
        """Forget ``entry_id`` (no-op when absent)."""
        with self._lock:
            row = self._rows.pop(entry_id, None)
            if row is not None:
                self._live[row] = False
                self._ids[row] = None
                if self._free is None:
                    self._free = []
                self._free.append(row)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._rows.clear()
            self._free = None
            self._live[:] = False
            self._ids = [None] * len(self._ids)
            self._end = 0

    def _build_sketch(self) -> None:
        sketch = np.zeros((len(self._ids), _SKETCH_WORDS), dtype=np.uint64)
        sketch[: self._end] = _sketches(_widened(self._vectors[: self._end]))
        self._sketch = sketch

    def _grow(self) -> int:
        if self._end == len(self._ids):
            size = _grown(len(self._ids))
            # New arrays of the exact size (np.resize would keep a larger one alive behind).
            self._vectors = _extended(self._vectors, size)
            if self._sketch is not None:
                self._sketch = _extended(self._sketch, size)
            self._live = _extended(self._live, size)
            self._ids.extend([None] * (size - self._end))
        self._end += 1
        return self._end - 1

    def search(self, vector: npt.NDArray[np.float32], k: int = 4) -> list[Match]:
        """The ``k`` most similar live entries, best first."""
        with self._lock:
            end = self._end
            if not self._rows:
                return []
            holes = bool(self._free)  # rows freed and not reused yet: masked out
            if self._sketch is None or len(self._rows) < self._exact_below:
                rows = np.arange(end)
            else:
                distance = _hamming(self._sketch[:end], _sketches(vector[None, :])[0])
                if holes:
                    distance[~self._live[:end]] = _SKETCH_BITS + 1
                rows = _nearest(distance, min(self._candidates, end))
            scores = _widened(self._vectors[rows]) @ vector
            if holes:
                scores[~self._live[rows]] = -np.inf
            take = min(k, len(rows))
            best = np.argpartition(scores, -take)[-take:]
            best = best[np.argsort(-scores[best])]
            ids = self._ids
            return [
                Match(ids[int(rows[i])] or "", similarity)
                for i in best.tolist()
                if math.isfinite(similarity := float(scores[i]))
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
