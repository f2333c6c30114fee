"""An in-memory vector index: unit vectors in a numpy matrix, searched by cosine similarity.

Rows are stored as float16 (half the memory bandwidth of float32). Below ``exact_below``
rows, a search multiplies the whole matrix. Above that, it first ranks every row by a
128-dimensional random projection kept in float32 (a quarter of the work), then scores the
best ``candidates`` rows exactly: the projection keeps cosine similarities to within about
0.1, far less than the gap between a paraphrase (0.6 and up) and unrelated text (about 0.1).

Rows are never moved on delete: a freed row is reused by the next insert.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from .._lazy import np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["Match", "VectorIndex"]

_SKETCH_DIMENSIONS = 128


@dataclass(frozen=True)
class Match:
    """One search result: the entry id and its cosine similarity to the query."""

    entry_id: str
    similarity: float


@lru_cache(maxsize=8)
def _projection(dimension: int) -> npt.NDArray[np.float32]:
    """A fixed random projection to the sketch dimensions (shared by every index)."""
    gaussian = np.random.default_rng(20261129).standard_normal((dimension, _SKETCH_DIMENSIONS))
    scaled: npt.NDArray[np.float32] = (gaussian / np.sqrt(_SKETCH_DIMENSIONS)).astype(np.float32)
    return scaled


class VectorIndex:
    """Cosine top-k search over unit vectors, keyed by entry id (see the module docs)."""

    def __init__(self, dimension: int, *, exact_below: int = 256, candidates: int = 64) -> None:
        self.dimension = dimension
        self._exact_below = exact_below
        self._candidates = candidates
        self._vectors = np.zeros((16, dimension), dtype=np.float16)
        self._sketch = np.zeros((16, _SKETCH_DIMENSIONS), dtype=np.float32)
        self._live = np.zeros(16, dtype=bool)
        self._ids: list[str | None] = [None] * 16
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self._end = 0
        self._projection = _projection(dimension)
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
            self._sketch[row] = vector @ self._projection
            self._live[row] = True

    def remove(self, entry_id: str) -> None:
        """Forget ``entry_id`` (no-op when absent)."""
        with self._lock:
            row = self._rows.pop(entry_id, None)
            if row is not None:
                self._live[row] = False
                self._ids[row] = None
                self._free.append(row)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._rows.clear()
            self._free.clear()
            self._live[:] = False
            self._ids = [None] * len(self._ids)
            self._end = 0

    def _grow(self) -> int:
        if self._end == len(self._ids):
            size = len(self._ids) * 2
            self._vectors = np.resize(self._vectors, (size, self.dimension))
            self._sketch = np.resize(self._sketch, (size, _SKETCH_DIMENSIONS))
            live = np.zeros(size, dtype=bool)
            live[: self._end] = self._live[: self._end]
            self._live = live
            self._ids.extend([None] * (size - self._end))
        self._end += 1
        return self._end - 1

    def search(self, vector: npt.NDArray[np.float32], k: int = 4) -> list[Match]:
        """The ``k`` most similar live entries, best first."""
        with self._lock:
            end = self._end
            if not self._rows:
                return []
            if len(self._rows) < self._exact_below:
                rows = np.arange(end)
            else:
                rough = self._sketch[:end] @ (vector @ self._projection)
                rough[~self._live[:end]] = -np.inf
                take = min(self._candidates, end)
                rows = np.argpartition(rough, -take)[-take:]
            scores = self._vectors[rows].astype(np.float32) @ vector
            scores[~self._live[rows]] = -np.inf
            take = min(k, len(rows))
            best = np.argpartition(scores, -take)[-take:]
            best = best[np.argsort(-scores[best])]
            return [
                Match(self._ids[int(rows[i])] or "", float(scores[i]))
                for i in best
                if np.isfinite(scores[i])
            ]
