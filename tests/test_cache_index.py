"""The in-memory vector index: memory that grows with the partition, searches that stay
right across the switch to the projected (sketch) search."""

from __future__ import annotations

import numpy as np
import pytest

from llmguard_sdk._state.steps import run
from llmguard_sdk.cache import HashingEmbedder, MemoryCacheBackend, ResponseCache, VectorIndex
from llmguard_sdk.cache.entry import encode_vector
from llmguard_sdk.cache.index import Probe, _hamming, _nearest, _sketches, _widened
from llmguard_sdk.context import Scope
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.tokens import cl100k_encoding


def _unit(rng: np.random.Generator, dimension: int) -> np.ndarray:
    vector = rng.standard_normal(dimension).astype(np.float32)
    unit: np.ndarray = vector / np.linalg.norm(vector)
    return unit


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
    # any id reads back as it was written (a digest's, or one that JSON must escape)
    for entry_id in ('say "hi"\\ \u00e9\u2028', "ABC123", ""):
        backend.put(entry.model_copy(update={"entry_id": entry_id}))
        again = backend.get(entry_id)
        assert again is not None
        assert again.entry_id == entry_id
        assert again.model_copy(update={"vector": entry.vector, "embedder": entry.embedder}) == (
            entry.model_copy(update={"entry_id": entry_id})
        )


def test_an_emptied_partition_leaves_no_index_behind() -> None:
    cache = ResponseCache(max_entries=2)
    answer = ChatResponse(text="x", finish_reason="stop")
    for tenant in ("a", "b", "c"):  # the third store evicts tenant a's only entry
        request = ChatRequest(messages=[Message(role="user", content=f"question of {tenant}")])
        cache.store(request, answer, Scope(tenant=tenant))
    assert len(cache._local.indexes) == 2


def test_an_entry_evicted_by_another_thread_before_it_was_indexed_leaves_no_vector() -> None:
    """Two threads store into a full in-memory cache: the second one's write evicts the
    first one's entry between that write and its indexing (the steps are interleaved by
    hand here). The evicted entry's vector stayed in the index for good (memory that grew
    under concurrent stores; only a search that met it dropped it)."""
    cache = ResponseCache(max_entries=1)
    answer = ChatResponse(text="x", finish_reason="stop")
    first, second = (
        cache.entry_for(ChatRequest(messages=[Message(role="user", content=text)]), answer)
        for text in ("how do I reset my password", "how do I close my account")
    )
    assert first is not None
    assert second is not None
    interrupted = cache.put_steps(first)
    written = next(interrupted).sync()  # the first thread's write, not yet indexed
    assert run(cache.put_steps(second))  # the second thread's store evicts the first entry
    with pytest.raises(StopIteration):
        interrupted.send(written)
    assert set(cache._local.index_of) == {second.entry_id}


def _sparse_unit(rng: np.random.Generator, dimension: int, nonzero: int) -> np.ndarray:
    vector = np.zeros(dimension, dtype=np.float32)
    vector[rng.choice(dimension, nonzero, replace=False)] = rng.standard_normal(nonzero)
    unit: np.ndarray = vector / np.linalg.norm(vector)
    return unit


def _brute_force(live: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The reference: every live row widened from float16 as the index stores it, scored in
    float64, best first."""
    scored = [
        (entry_id, float(vector.astype(np.float16).astype(np.float64) @ query))
        for entry_id, vector in live.items()
    ]
    return sorted(scored, key=lambda pair: -pair[1])[:k]


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("size", [40, 200])  # below and above exact_below
def test_search_matches_a_brute_force_reference_with_holes(sparse: bool, size: int) -> None:
    """Sparse (scored over their nonzero dimensions) and dense queries, on an exact and a
    sketched index with deleted rows: the same ids and similarities as scoring every row.
    With ``candidates`` above the row count the sketch cannot lose a row, so the results
    must be exactly the reference's; planted near-duplicates must be found with few."""
    rng = np.random.default_rng(size + sparse)
    dimension = 256

    def unit() -> np.ndarray:
        return _sparse_unit(rng, dimension, 24) if sparse else _unit(rng, dimension)

    covering = VectorIndex(dimension, exact_below=64, candidates=256)
    few = VectorIndex(dimension, exact_below=64, candidates=16)
    live: dict[str, np.ndarray] = {}
    for i in range(size):
        vector = unit()
        live[str(i)] = vector
        covering.add(str(i), vector)
        few.add(str(i), Probe(vector))
    for i in range(0, size, 3):  # holes, some of them reused below
        del live[str(i)]
        covering.remove(str(i))
        few.remove(str(i))
    queries = []
    for j in range(size // 10):
        planted = unit()
        queries.append(planted)
        for copy in range(2):  # two near-duplicates of each query
            noisy = planted + 0.25 * unit()
            entry_id = f"p{j}-{copy}"
            live[entry_id] = noisy / np.linalg.norm(noisy)
            covering.add(entry_id, live[entry_id])
            few.add(entry_id, live[entry_id])
    assert (covering._sketch is not None) == (size > 64)
    assert covering._free  # holes remain, masked out
    for query in [*queries, unit(), unit()]:
        expected = _brute_force(live, query, 4)
        for found in (covering.search(query, k=4), covering.search(Probe(query), k=4)):
            assert [m.entry_id for m in found] == [entry_id for entry_id, _ in expected]
            for match, (_, similarity) in zip(found, expected, strict=True):
                assert match.similarity == pytest.approx(similarity, abs=1e-3)
    for j, query in enumerate(queries):
        found = few.search(Probe(query), k=2)
        assert {m.entry_id for m in found} == {f"p{j}-0", f"p{j}-1"}
        for match in found:
            assert match.similarity == pytest.approx(float(live[match.entry_id] @ query), abs=1e-3)


def test_a_probe_scores_sparse_vectors_over_their_nonzero_dimensions() -> None:
    rng = np.random.default_rng(5)
    sparse, dense = Probe(_sparse_unit(rng, 1024, 160)), Probe(_unit(rng, 1024))
    assert sparse.nonzero is not None
    assert len(sparse.nonzero) == 160
    assert dense.nonzero is None
    rows = np.stack([_unit(rng, 1024) for _ in range(8)]).astype(np.float16)
    for probe in (sparse, dense):
        expected = rows.astype(np.float64) @ probe.vector
        np.testing.assert_allclose(probe.scores(rows), expected, atol=1e-5)
        assert probe.sketch() is probe.sketch()  # computed once
        # the sketch of the vector as stored (float16), as the index builds it for its rows
        stored = probe.vector.astype(np.float16)
        np.testing.assert_array_equal(probe.sketch(), _sketches(_widened(stored[None, :]))[0])


def _large_cache() -> ResponseCache:
    cache = ResponseCache(max_entries=1000)
    answer = ChatResponse(text="x", finish_reason="stop")
    for i in range(300):  # past exact_below: the partition's index keeps sketches
        words = f"q{i} " + " ".join(f"w{(i * 7 + j) % 101}" for j in range(8))
        cache.store(ChatRequest(messages=[Message(role="user", content=words)]), answer)
    return cache


def test_the_store_after_a_miss_indexes_the_vector_and_sketch_the_lookup_computed() -> None:
    cache = _large_cache()
    (index,) = cache._local.indexes.values()
    assert isinstance(index, VectorIndex)
    assert index._sketch is not None
    assert index._rows is not None
    request = ChatRequest(messages=[Message(role="user", content="how do I reset my password")])
    assert cache.lookup(request) is None
    probe = cache._recent.embedded("how do I reset my password").probe  # the lookup's
    assert probe._sketch is not None  # the lookup searched the sketches
    assert cache.store(request, ChatResponse(text="Use the link.", finish_reason="stop"))
    row = index._rows[cache.keys(request).exact]
    stored = index._vectors[row]
    np.testing.assert_array_equal(stored, probe.vector.astype(np.float16))
    # the sketch kept is the one a rebuild from the stored row would compute
    np.testing.assert_array_equal(index._sketch[row], _sketches(_widened(stored[None, :]))[0])
    hit = cache.lookup(
        ChatRequest(messages=[Message(role="user", content="how do i reset my password?")])
    )
    assert hit is not None
    assert hit.response.text == "Use the link."


def test_an_entry_with_another_vector_for_a_recent_query_is_indexed_with_its_own() -> None:
    """An entry written elsewhere (another embedding of the same text) is not confused with
    this process's recent probe of that text."""
    cache = _large_cache()
    request = ChatRequest(messages=[Message(role="user", content="how do I reset my password")])
    assert cache.lookup(request) is None
    entry = cache.entry_for(request, ChatResponse(text="Use the link.", finish_reason="stop"))
    assert entry is not None
    other = _unit(np.random.default_rng(9), cache.embedder.dimension)
    assert run(cache.put_steps(entry.model_copy(update={"vector": encode_vector(other)})))
    (index,) = cache._local.indexes.values()
    assert isinstance(index, VectorIndex)
    assert index._rows is not None
    assert index._sketch is not None
    row = index._rows[entry.entry_id]
    np.testing.assert_array_equal(index._vectors[row], other.astype(np.float16))
    np.testing.assert_array_equal(
        index._sketch[row], _sketches(_widened(index._vectors[row][None, :]))[0]
    )


def test_hamming_distances_and_the_nearest_rows_match_plain_references() -> None:
    rng = np.random.default_rng(6)
    sketch = np.asfortranarray(rng.integers(0, 2**63, size=(500, 4), dtype=np.uint64))
    sketch[7] = ~sketch[3]  # every bit differs: 256
    query = sketch[3].copy()
    distance = _hamming(sketch[:400], query)
    expected = [
        sum(bin(int(a) ^ int(b)).count("1") for a, b in zip(row, query, strict=True))
        for row in sketch[:400]
    ]
    assert distance.tolist() == expected
    assert distance[7] == 256
    for size in (400, 40_000):  # a sort, then a count of each distance (past 32,768 rows)
        small = rng.integers(120, 136, size=size).astype(np.uint16)  # many ties
        for take in (1, 17, 64, 400):
            cutoff = np.sort(small)[take - 1]
            closer = np.flatnonzero(small < cutoff)
            tied = np.flatnonzero(small == cutoff)[: take - len(closer)]
            expected = sorted([*closer.tolist(), *tied.tolist()])  # in row order
            assert _nearest(small, take).tolist() == expected


# HashingEmbedder(dimension=64).embed(["Reset my password, please"]) as 0.2.0 computed it:
# stored caches hold such vectors, so a faster embedder must give the same ones.
_PINNED_64 = {
    0: -0.0104558,
    1: 0.04824171,
    3: -0.02145364,
    4: -0.117395,
    5: -0.09648342,
    6: 0.2210713,
    7: 0.1179371,
    8: -0.05869751,
    10: -0.2310719,
    12: -0.05869751,
    13: 0.04824171,
    14: -0.4421425,
    16: 0.05869751,
    18: 0.5029107,
    21: 0.04824171,
    22: -0.1051333,
    23: 0.04824171,
    24: -0.06969535,
    25: -0.1069392,
    26: 0.05869751,
    28: -0.04824171,
    29: 0.1069392,
    31: -0.1069392,
    32: 0.06969535,
    35: 0.1179371,
    36: -0.05869751,
    38: -0.1283929,
    40: -0.1338545,
    41: -0.09648342,
    43: 0.1179371,
    46: 0.06969535,
    49: 0.05869751,
    52: -0.05869751,
    53: -0.4228899,
    55: 0.1051333,
    56: 0.04824171,
    61: -0.04824171,
    62: 0.1748286,
    63: -0.1393907,
}


@pytest.mark.skipif(cl100k_encoding() is None, reason="word rarity needs tiktoken's encoding")
def test_the_hashing_embedder_gives_the_vectors_it_always_gave() -> None:
    embedder = HashingEmbedder(dimension=64)
    texts = ["Reset my password, please", "please reset my password", "Reset my password, please"]
    first = embedder.embed(texts)  # the last text again: words and pairs already known
    vector = first[0]
    assert {int(i): float(vector[i]) for i in np.flatnonzero(vector)} == pytest.approx(
        _PINNED_64, rel=1e-6
    )
    np.testing.assert_array_equal(first[2], vector)
    np.testing.assert_array_equal(HashingEmbedder(dimension=64).embed(texts[1:2])[0], first[1])


@pytest.mark.parametrize("exact_below", [2, 256])  # sketched and exact searches
def test_a_small_index_finds_rows_without_a_dict_and_keeps_the_same_answers(
    exact_below: int,
) -> None:
    """Below nine rows an index finds an entry's row by scanning its ids and has no mask of
    live rows until its first delete; adds, replacements, deletes and reused rows answer as
    the brute-force reference does, before and after the id -> row dict is built."""
    rng = np.random.default_rng(exact_below)
    dimension = 128
    index = VectorIndex(dimension, exact_below=exact_below, candidates=256)
    live: dict[str, np.ndarray] = {}

    def check() -> None:
        assert len(index) == len(live)
        assert all(entry_id in index for entry_id in live)
        assert "absent" not in index
        assert 7 not in index
        for query in [*live.values(), _unit(rng, dimension)]:
            expected = _brute_force(live, query, 3)
            found = index.search(query, k=3)
            assert [m.entry_id for m in found] == [entry_id for entry_id, _ in expected]

    for i in range(6):
        live[str(i)] = _unit(rng, dimension)
        index.add(str(i), live[str(i)])
    assert index._rows is None
    assert index._live is None
    check()
    live["2"] = _unit(rng, dimension)  # a replacement keeps its row
    index.add("2", live["2"])
    for gone in ("0", "4"):
        del live[gone]
        index.remove(gone)
    index.remove("absent")
    assert index._rows is None
    assert index._live is not None
    check()
    for i in range(6, 14):  # reuses the two freed rows, then grows past nine rows
        live[str(i)] = _unit(rng, dimension)
        index.add(str(i), live[str(i)])
    assert index._rows is not None
    check()
    del live["9"]
    index.remove("9")
    check()
    index.clear()
    live.clear()
    assert index.search(_unit(rng, dimension)) == []
    assert len(index) == 0
    index.add("again", _unit(rng, dimension))
    assert index._rows is None
    assert index._live is None
    assert len(index) == 1


def _ask(cache: ResponseCache, text: str, tenant: str) -> str | None:
    hit = cache.lookup(
        ChatRequest(messages=[Message(role="user", content=text)]), Scope(tenant=tenant)
    )
    return hit.response.text if hit is not None else None


def _keep(cache: ResponseCache, text: str, answer: str, tenant: str) -> None:
    request = ChatRequest(messages=[Message(role="user", content=text)])
    assert cache.store(
        request, ChatResponse(text=answer, finish_reason="stop"), Scope(tenant=tenant)
    )


def test_one_entry_partitions_share_a_pool_and_get_an_index_with_their_second_entry() -> None:
    cache = ResponseCache()
    _keep(cache, "how do I reset my password", "Use the link.", "a")
    _keep(cache, "where is my parcel right now", "On its way.", "b")
    assert not any(isinstance(index, VectorIndex) for index in cache._local.indexes.values())
    assert cache._local._pool._end == 2  # two rows, no index of their own
    assert _ask(cache, "how do i reset my password?", "a") == "Use the link."
    assert _ask(cache, "how do i reset my password?", "b") is None  # another tenant's row
    # a second entry for tenant a: its partition gets an index holding both entries
    _keep(cache, "how do I cancel my subscription", "From your account page.", "a")
    index = cache._local.indexes[cache._index_key(cache.keys(_request("x"), Scope(tenant="a")))]
    assert isinstance(index, VectorIndex)
    assert len(index) == 2
    assert _ask(cache, "how do i reset my password?", "a") == "Use the link."
    assert _ask(cache, "how do i cancel my subscription?", "a") == "From your account page."
    assert _ask(cache, "where is my parcel right now?", "b") == "On its way."
    assert cache._local._pool._free == [0]  # tenant a's pool row is free for the next one
    _keep(cache, "what is the refund policy", "30 days.", "c")
    assert cache._local._pool._free == []
    assert cache._local._pool._end == 2


def test_a_one_entry_partition_replaced_and_forgotten_frees_its_pool_row() -> None:
    cache = ResponseCache(max_entries=1)
    _keep(cache, "how do I reset my password", "Use the link.", "a")
    _keep(cache, "how do I reset my password", "Use the new link.", "a")  # the same entry
    assert _ask(cache, "how do i reset my password?", "a") == "Use the new link."
    _keep(cache, "where is my parcel right now", "On its way.", "b")  # evicts tenant a's
    assert len(cache._local.indexes) == 1
    assert cache._local._pool._free == [0]
    assert _ask(cache, "how do i reset my password?", "a") is None
    assert _ask(cache, "where is my parcel right now?", "b") == "On its way."
    cache.clear()
    assert not cache._local.indexes
    assert _ask(cache, "where is my parcel right now?", "b") is None


def _request(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)])


def test_one_entry_partitions_promoted_while_searched_never_answer_with_another_row() -> None:
    """Threads store each tenant's first and second entry (a pool row freed and taken again
    by the next tenant) while others look the first question up: a lookup answers with its
    own tenant's answer or misses, never with a row now holding another tenant's vector."""
    import threading

    cache = ResponseCache()
    tenants = [f"t{i}" for i in range(120)]
    wrong: list[str] = []

    def writer() -> None:
        for tenant in tenants:
            _keep(cache, f"how do I reset the password of account {tenant}", tenant, tenant)
            _keep(cache, f"what is the refund policy of shop {tenant}", f"{tenant}-r", tenant)

    def reader() -> None:
        for _ in range(3):
            for tenant in tenants:
                text = _ask(cache, f"how do i reset the password of account {tenant}?", tenant)
                if text not in (None, tenant):
                    wrong.append(f"{tenant}: {text}")

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == []
    assert all(_ask(cache, f"how do i reset the password of account {t}?", t) == t for t in tenants)
