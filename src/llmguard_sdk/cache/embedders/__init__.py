"""Embedders turn texts into unit vectors for the semantic cache, behind one protocol.

* :class:`HashingEmbedder` (the default): no model, no download, numpy only. Words (lightly
  stemmed), word pairs and character n-grams are hashed into a fixed number of dimensions;
  each word is weighted by how rare it is, read off the rank of its token in tiktoken's
  ``cl100k_base`` table (byte-pair ranks follow corpus frequency: " the" is token 279, rare
  words take several tokens), so function words count for little without any fitting.
* :class:`OpenAIEmbedder`: any OpenAI-compatible ``/v1/embeddings`` endpoint, over httpx.
* :class:`LlamaCppEmbedder`: any GGUF *embedding* model through llama-cpp-python.
* :class:`BertEmbedder` (module :mod:`~llmguard_sdk.cache.embedders.bert`): a
  sentence-transformers BERT model (all-MiniLM-L6-v2 and its like) run in numpy.
* :class:`HybridEmbedder`: several embedders side by side, weighted; a sentence model beside
  the hashing embedder ranks near-duplicates better than either alone
  (:meth:`HybridEmbedder.minilm`).

An embedder may carry a ``default_threshold`` attribute: the similarity a
:class:`~llmguard_sdk.cache.ResponseCache` asks for when it is given no threshold.

A chat model's embeddings are poor at similarity (the bundled SmolLM2 is one): the SDK never
uses one as an embedder by default.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from .base import DEFAULT_THRESHOLD, Embedder, normalise, suggested_threshold
from .bert import BertEmbedder
from .hashing import HashingEmbedder
from .hybrid import HybridEmbedder
from .llamacpp import LlamaCppEmbedder
from .openai import OpenAIEmbedder

__all__ = [
    "DEFAULT_THRESHOLD",
    "BertEmbedder",
    "Embedder",
    "HashingEmbedder",
    "HybridEmbedder",
    "LlamaCppEmbedder",
    "OpenAIEmbedder",
    "normalise",
    "suggested_threshold",
]
