"""Choosing a similarity threshold from labelled pairs (``llmguard cache calibrate``).

A pairs file holds one JSON object per line: two texts and whether a cached answer for one
may answer the other, e.g. ``{"query": "...", "cached": "...", "duplicate": true}`` (``a`` /
``b`` / ``label`` are accepted too). :func:`calibrate` scores every pair with the embedder and
the false-hit guards, sweeps the threshold, and picks the lowest one whose precision meets
the target (the most hits at that precision).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._lazy import np
from ..errors import ConfigurationError
from .embedders import Embedder, HashingEmbedder
from .guards import guard_rejection

__all__ = ["CalibrationRow", "Pair", "calibrate", "read_pairs"]


@dataclass(frozen=True)
class Pair:
    """Two texts and whether one's answer may serve the other."""

    query: str
    cached: str
    duplicate: bool


@dataclass(frozen=True)
class CalibrationRow:
    """The outcome at one threshold: hits that were right (tp) and wrong (fp), missed (fn)."""

    threshold: float
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        """Share of accepted pairs that were duplicates (1.0 when none was accepted)."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        """Share of duplicate pairs accepted."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0


def read_pairs(path: str | Path) -> list[Pair]:
    """Read a pairs file (see the module docs); a bad line raises ConfigurationError."""
    pairs = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                query = item.get("query", item.get("a"))
                cached = item.get("cached", item.get("b"))
                label = item.get("duplicate", item.get("label"))
            except (json.JSONDecodeError, AttributeError):
                raise ConfigurationError(f"{path}:{number}: not a JSON object") from None
            if not isinstance(query, str) or not isinstance(cached, str):
                raise ConfigurationError(f"{path}:{number}: needs two texts (query, cached)")
            if not isinstance(label, (bool, int)):
                raise ConfigurationError(f"{path}:{number}: needs duplicate: true/false")
            pairs.append(Pair(query, cached, bool(label)))
    if not pairs:
        raise ConfigurationError(f"{path}: no pairs")
    return pairs


def calibrate(
    pairs: Sequence[Pair],
    *,
    embedder: Embedder | None = None,
    guards: bool = True,
    thresholds: Iterable[float] | None = None,
) -> list[CalibrationRow]:
    """One :class:`CalibrationRow` per threshold (0.30 to 0.95 by 0.025 unless given)."""
    embedder = embedder or HashingEmbedder()
    left = embedder.embed([p.query for p in pairs])
    right = embedder.embed([p.cached for p in pairs])
    similarity = np.einsum("ij,ij->i", left, right)
    passes = np.array(
        [not guards or guard_rejection(p.query, p.cached) is None for p in pairs], dtype=bool
    )
    duplicate = np.array([p.duplicate for p in pairs], dtype=bool)
    steps = thresholds if thresholds is not None else np.arange(0.30, 0.951, 0.025)
    rows = []
    for threshold in steps:
        accepted = passes & (similarity >= threshold)
        rows.append(
            CalibrationRow(
                threshold=round(float(threshold), 4),
                tp=int((accepted & duplicate).sum()),
                fp=int((accepted & ~duplicate).sum()),
                fn=int((~accepted & duplicate).sum()),
            )
        )
    return rows


def pick_threshold(rows: Sequence[CalibrationRow], precision: float) -> CalibrationRow | None:
    """The lowest threshold whose precision reaches ``precision`` (None if none does)."""
    meeting = [r for r in rows if r.precision >= precision and r.tp > 0]
    return min(meeting, key=lambda r: r.threshold) if meeting else None
