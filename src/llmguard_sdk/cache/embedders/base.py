"""The :class:`Embedder` protocol, the default threshold and unit-length vectors."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from ..._lazy import np

__all__ = ["DEFAULT_THRESHOLD", "Embedder", "normalise", "suggested_threshold"]

if TYPE_CHECKING:
    import numpy.typing as npt

    Vectors: TypeAlias = npt.NDArray[np.float32]

DEFAULT_THRESHOLD = 0.55
"""The zero-configuration similarity threshold of the default
:class:`~llmguard_sdk.cache.HashingEmbedder` (see ``bench/semantic_cache.py`` for the whole
sweep on GPTCache's public benchmark)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors (one row per text) of a fixed dimension.

    ``name`` identifies the embedder and its settings: entries embedded by another embedder
    are never compared with this one's vectors.
    """

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length float32 vectors, shape ``(len(texts), dimension)``."""
        ...


def suggested_threshold(embedder: Embedder) -> float:
    """The threshold ``embedder`` suggests (its ``default_threshold``), else
    :data:`DEFAULT_THRESHOLD`."""
    suggested = getattr(embedder, "default_threshold", None)
    if isinstance(suggested, numbers.Real) and not isinstance(suggested, bool):
        return float(suggested)
    return DEFAULT_THRESHOLD


def normalise(vectors: Vectors) -> Vectors:
    """Scale each row to unit length (rows of zeros stay zero)."""
    # np.linalg.norm's own sum for rows (the same values), without its checks per call
    norms = np.sqrt(np.add.reduce(vectors * vectors, axis=1, keepdims=True))
    norms[norms == 0] = 1.0
    unit: Vectors = (vectors / norms).astype(np.float32, copy=False)
    return unit
