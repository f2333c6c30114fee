"""Embeddings from a GGUF embedding model on llama.cpp."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..._lazy import np
from ...errors import ConfigurationError
from .base import normalise

if TYPE_CHECKING:
    from .base import Vectors

__all__ = ["LlamaCppEmbedder"]


class LlamaCppEmbedder:
    """Embeddings from a GGUF embedding model (e.g. a bge or nomic-embed GGUF) on llama.cpp.

    Needs the ``local`` extra (llama-cpp-python). Do not point it at a chat model: their
    embeddings are poor at similarity.

    Args:
        model_path: the GGUF file.
        n_threads: CPU threads llama.cpp uses (default: llama-cpp-python's).
        llama_options: passed on to ``llama_cpp.Llama`` (mean pooling unless
            ``pooling_type`` says otherwise).
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
        from ...providers.local import load_llama

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
