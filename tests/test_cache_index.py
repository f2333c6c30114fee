"""The in-memory vector index: memory that grows with the partition, searches that stay
right across the switch to the projected (sketch) search."""

from __future__ import annotations

import numpy as np

from llmguard_sdk.cache import MemoryCacheBackend, ResponseCache, VectorIndex
from llmguard_sdk.context import Scope
from llmguard_sdk.models import ChatRequest, ChatResponse, Message


def _unit(rng: np.random.Generator, dimension: int) -> np.ndarray:
    vector = rng.standard_normal(dimension).astype(np.float32)
    return vector / np.linalg.norm(vector)


def test_a_one_entry_index_holds_one_row_and_no_sketch() -> None:
    index = VectorIndex(64)
    index.add("a", _unit(np.random.default_rng(1), 64))
    assert index._vectors.shape == (1, 64)
    assert index._sketch is None
    assert [m.entry_id for m in index.search(index._vectors[0].astype(np.float32))] == ["a"]


def test_search_finds_the_nearest_before_and_after_the_sketch_is_built() -> None:
    rng = np.random.default_rng(2)
    index = VectorIndex(128, exact_below=32, candidates=8)
    vectors = [_unit(rng, 128) for _ in range(300)]
    for i, vector in enumerate(vectors[:20]):
        index.add(str(i), vector)
    assert index._sketch is None
    assert index.search(vectors[7], k=1)[0].entry_id == "7"
    for i, vector in enumerate(vectors[20:], 20):
        index.add(str(i), vector)
    assert index._sketch is not None
    assert len(index._sketch) == len(index._vectors)
    rows = len(index._vectors)
    assert 300 <= rows <= 300 * 1.0625 + 1  # grown by a sixteenth past 256, not doubled
    for probe in (3, 150, 299):
        noisy = vectors[probe] + 0.3 * _unit(rng, 128)
        assert index.search(noisy / np.linalg.norm(noisy), k=1)[0].entry_id == str(probe)
    index.remove("150")
    assert all(m.entry_id != "150" for m in index.search(vectors[150], k=4))
    index.add("new", vectors[150])  # reuses the freed row
    assert len(index._vectors) == rows
    assert index.search(vectors[150], k=1)[0].entry_id == "new"


def test_the_memory_backend_keeps_entries_without_their_vector() -> None:
    cache = ResponseCache(max_entries=10)
    request = ChatRequest(messages=[Message(role="user", content="how do I reset my password")])
    entry = cache.entry_for(request, ChatResponse(text="Use the link.", finish_reason="stop"))
    assert entry is not None
    assert entry.vector is not None
    backend = MemoryCacheBackend(10)
    backend.put(entry)
    stored = backend.get(entry.entry_id)
    assert stored is not None
    assert stored.vector is None
    assert stored.chat_response().text == "Use the link."
    assert stored.query == entry.query


def test_an_emptied_partition_leaves_no_index_behind() -> None:
    cache = ResponseCache(max_entries=2)
    answer = ChatResponse(text="x", finish_reason="stop")
    for tenant in ("a", "b", "c"):  # the third store evicts tenant a's only entry
        request = ChatRequest(messages=[Message(role="user", content=f"question of {tenant}")])
        cache.store(request, answer, Scope(tenant=tenant))
    assert len(cache._local.indexes) == 2
