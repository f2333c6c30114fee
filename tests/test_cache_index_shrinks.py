"""A partition's index kept the rows of its largest size: tenants busy in turn, each keeping
a question or two once the others' stores evicted the rest, held their peak's rows each, so
a cache of 600 entries held the rows of every partition that ever filled it (12.3 MB for
1.2 MB of vectors), past any ``max_entries`` or ``max_bytes``. An index whose live rows
fall to a quarter is compacted, and searches it as before."""

from __future__ import annotations

import numpy as np
import pytest

from llmguard_sdk.cache import ResponseCache, VectorIndex
from llmguard_sdk.context import Scope
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from tests.test_cache_index import _brute_force, _unit

ENTRIES = 600
TENANTS = 10


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="m")


def _index_bytes(cache: ResponseCache) -> int:
    """The bytes of the vectors (and sketches) every partition's index holds."""
    held = 0
    for index in cache._local.indexes.values():
        if isinstance(index, VectorIndex):
            held += index._vectors.nbytes
            held += index._sketch.nbytes if index._sketch is not None else 0
    return held


def test_tenants_busy_in_turn_leave_no_peak_rows_behind() -> None:
    cache = ResponseCache(max_entries=ENTRIES, max_bytes=None)
    row = 2 * cache.embedder.dimension  # float16
    for tenant in range(TENANTS):
        scope = Scope(tenant=f"tenant{tenant}")
        for i in range(ENTRIES - 2 * TENANTS):
            question = f"question {i} of tenant {tenant} about the weather in city{i}"
            cache.store(_ask(question), ChatResponse(text="a", finish_reason="stop"), scope)
        for earlier in range(tenant + 1):  # each tenant keeps asking its first question
            question = f"question 0 of tenant {earlier} about the weather in city0"
            assert cache.lookup(_ask(question), Scope(tenant=f"tenant{earlier}")) is not None
    assert len(cache._local.index_of) == ENTRIES
    # was 12.3 MB of rows and sketches for 600 entries of 2 KB (now 1.9 MB)
    assert _index_bytes(cache) < 2 * ENTRIES * row


@pytest.mark.parametrize("exact_below", [16, 1000])  # sketched and not
def test_a_compacted_index_finds_what_a_brute_force_search_finds(exact_below: int) -> None:
    rng = np.random.default_rng(exact_below)
    index = VectorIndex(64, exact_below=exact_below, candidates=1000)
    live: dict[str, np.ndarray] = {}
    for i in range(400):
        live[str(i)] = _unit(rng, 64)
        index.add(str(i), live[str(i)])
    for i in range(400):
        if i % 7:
            del live[str(i)]
            index.remove(str(i))
    assert len(index) == len(live)
    assert len(index._vectors) <= 4 * len(live)  # compacted (was over 400 rows)
    for i in range(400, 430):  # added after the compaction, some of them removed again
        live[str(i)] = _unit(rng, 64)
        index.add(str(i), live[str(i)])
        if i % 3 == 0:
            del live[str(i)]
            index.remove(str(i))
    index.add("0", live["0"])  # replaced in place
    assert "1" not in index
    assert "7" in index
    for _ in range(20):
        query = _unit(rng, 64)
        expected = _brute_force(live, query, 4)
        found = index.search(query, k=4)
        assert [m.entry_id for m in found] == [entry_id for entry_id, _ in expected]
        for match, (_, similarity) in zip(found, expected, strict=True):
            assert match.similarity == pytest.approx(similarity, abs=1e-3)
