"""The :class:`Embedder` protocol, the default threshold and unit-length vectors."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from ..._lazy import np

__all__ = [
    "DEFAULT_THRESHOLD",
    "Embedder",
    "embed_within",
    "finite_number",
    "normalise",
    "suggested_threshold",
    "takes_timeout",
    "whole_number",
]

if TYPE_CHECKING:
    import numpy.typing as npt

    Vectors: TypeAlias = npt.NDArray[np.float32]

DEFAULT_THRESHOLD = 0.675
"""The zero-configuration similarity threshold of the default
:class:`~llmguard_sdk.cache.HashingEmbedder`: the lowest at which the default cache's served
semantic hits reach precision 0.95 by the lower 95 % Wilson bound on every development set
large enough to show it (the STS benchmark's 5,156 labelled pairs: precision 0.970, bound
0.960, where 0.55 gave 0.902), with no wrong hit on the bundled question sets
(``bench/_devsets.py``). Short requests that the strict guards read as the same request are
served down to :data:`~llmguard_sdk.cache.guards.AGREED_ALLOWANCE` below it, so the bundled
sets keep the recall they had at 0.55. Statements and long texts get fewer hits than at
0.55 (GPTCache's mock file: 683 right and 31 wrong instead of 810 and 39): a wrong answer
costs more than a miss."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors (one row per text) of a fixed dimension.

    ``name`` identifies the embedder and its settings: entries embedded by another embedder
    are never compared with this one's vectors.

    An embedder that waits on something (an endpoint) may take a ``timeout`` keyword in
    ``embed`` (the most seconds it may wait, ``None``: its own default): the cache then
    bounds it by what is left of the call's deadline (see :func:`takes_timeout`).
    """

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length float32 vectors, shape ``(len(texts), dimension)``."""
        ...


@functools.lru_cache(maxsize=64)
def _embed_takes_timeout(kind: type) -> bool:
    try:
        parameters = inspect.signature(getattr(kind, "embed")).parameters  # noqa: B009
    except (AttributeError, TypeError, ValueError):
        return False
    found = parameters.get("timeout")
    return found is not None and found.kind in (found.KEYWORD_ONLY, found.POSITIONAL_OR_KEYWORD)


def takes_timeout(embedder: Embedder) -> bool:
    """Whether ``embedder.embed`` takes a ``timeout`` keyword (seconds it may wait)."""
    return _embed_takes_timeout(type(embedder))


def embed_within(embedder: Embedder, texts: Sequence[str], timeout: float | None) -> Vectors:
    """``embedder.embed(texts)``, waiting at most ``timeout`` seconds where the embedder takes
    a ``timeout`` (one that does not, a local model say, is called as it is)."""
    if timeout is None or not takes_timeout(embedder):
        return embedder.embed(texts)
    vectors: Vectors = embedder.embed(texts, timeout=timeout)  # type: ignore[call-arg]
    return vectors


def finite_number(value: object) -> bool:
    """Whether ``value`` is a finite number (not a bool, not NaN): an option's check."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return real and math.isfinite(value)  # type: ignore[arg-type]


def whole_number(value: object) -> bool:
    """Whether ``value`` is a whole number (an ``int`` or numpy's, not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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
