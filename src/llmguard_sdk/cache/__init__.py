"""Response caching: exact and semantic, tenant-scoped, with false-hit guards.

Use it on its own::

    from llmguard_sdk.cache import ResponseCache

    cache = ResponseCache()                       # or ResponseCache("redis://127.0.0.1:6379/0")
    hit = cache.lookup(request)
    if hit is None:
        response = call_the_model(request)
        cache.store(request, response)

or as a Guard stage: ``Guard(providers, cache=ResponseCache(...))``.

The default embedder needs no model (:class:`HashingEmbedder`), and strict guards keep its
semantic hits right. ``ResponseCache(embedder=HybridEmbedder.minilm(),
verifier=ParaphraseVerifier.minilm())`` (the recommended configuration) adds all-MiniLM-L6-v2,
run in numpy, for more hits at the same precision. ``vector_search="server"`` keeps the
vectors in Redis 8 vector sets instead of every process's memory.

Each name is imported from its module at its first use: a Guard built without a cache does
not import the embedders and the false-hit guards (their word lists and patterns).

.. versionadded:: 0.2.0
"""

from typing import TYPE_CHECKING

from .._exports import lazy_exports

if TYPE_CHECKING:  # (at run time: __getattr__ below imports each at its first read)
    from .backends import CacheBackend, MemoryCacheBackend, RedisCacheBackend
    from .calibrate import (
        CalibrationRow,
        Pair,
        Scorer,
        bundled_pairs,
        calibrate,
        pick_threshold,
        read_pairs,
        wilson_lower_bound,
    )
    from .core import DEFAULT_THRESHOLD, ResponseCache
    from .embedders import (
        BertEmbedder,
        Embedder,
        HashingEmbedder,
        HybridEmbedder,
        LlamaCppEmbedder,
        OpenAIEmbedder,
        suggested_threshold,
    )
    from .entry import CacheEntry, CacheHit, CacheOptions, CacheStats
    from .guards import Verifier, guard_rejection
    from .index import Match, VectorIndex
    from .keys import CacheKeys, canonical_json, request_keys
    from .monitor import FalseHitMonitor, MonitorState
    from .verifier import ParaphraseVerifier

__all__ = [
    "DEFAULT_THRESHOLD",
    "BertEmbedder",
    "CacheBackend",
    "CacheEntry",
    "CacheHit",
    "CacheKeys",
    "CacheOptions",
    "CacheStats",
    "CalibrationRow",
    "Embedder",
    "FalseHitMonitor",
    "HashingEmbedder",
    "HybridEmbedder",
    "LlamaCppEmbedder",
    "Match",
    "MemoryCacheBackend",
    "MonitorState",
    "OpenAIEmbedder",
    "Pair",
    "ParaphraseVerifier",
    "RedisCacheBackend",
    "ResponseCache",
    "Scorer",
    "VectorIndex",
    "Verifier",
    "bundled_pairs",
    "calibrate",
    "canonical_json",
    "guard_rejection",
    "pick_threshold",
    "read_pairs",
    "request_keys",
    "suggested_threshold",
    "wilson_lower_bound",
]

_HOMES = {
    "backends": "CacheBackend MemoryCacheBackend RedisCacheBackend",
    "calibrate": "CalibrationRow Pair Scorer bundled_pairs calibrate pick_threshold read_pairs"
    " wilson_lower_bound",
    "core": "DEFAULT_THRESHOLD ResponseCache",
    "embedders": "BertEmbedder Embedder HashingEmbedder HybridEmbedder LlamaCppEmbedder"
    " OpenAIEmbedder suggested_threshold",
    "entry": "CacheEntry CacheHit CacheOptions CacheStats",
    "guards": "Verifier guard_rejection",
    "index": "Match VectorIndex",
    "keys": "CacheKeys canonical_json request_keys",
    "monitor": "FalseHitMonitor MonitorState",
    "verifier": "ParaphraseVerifier",
}
__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
