"""Cache tools: calibration (library and CLI) and the embedders beyond the default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from llmguard_sdk.cache import (
    DEFAULT_THRESHOLD,
    HashingEmbedder,
    HybridEmbedder,
    OpenAIEmbedder,
    Pair,
    ResponseCache,
    calibrate,
    pick_threshold,
    read_pairs,
)
from llmguard_sdk.cache.calibrate import wilson_lower_bound
from llmguard_sdk.cli import main
from llmguard_sdk.errors import ConfigurationError, MalformedResponseError, ProviderUnavailableError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from tests.embeddings import Embeddings, serve_embeddings

from .conftest import require_module

DUPLICATES = [
    ("How do I reset my password?", "How can I reset my password?"),
    ("What are your opening hours?", "When are you open?"),
    ("Do you ship to Canada?", "Can you ship my order to Canada?"),
    ("How do I delete my account?", "How can I delete my account permanently?"),
]
DIFFERENT = [
    ("How do I reset my password?", "How do I reset my router?"),
    ("Do you ship to Canada?", "Do you ship to Mexico?"),
    ("What is the price of the basic plan?", "What is the price of the premium plan?"),
    ("How do I delete my account?", "How do I create an account?"),
]


def write_pairs(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for a, b in DUPLICATES:
            out.write(json.dumps({"query": a, "cached": b, "duplicate": True}) + "\n")
        for a, b in DIFFERENT:
            out.write(json.dumps({"a": a, "b": b, "label": 0}) + "\n")
    return path


def test_calibration_table_and_choice(tmp_path: Path) -> None:
    pairs = read_pairs(write_pairs(tmp_path / "pairs.jsonl"))
    assert len(pairs) == 8
    assert sum(p.duplicate for p in pairs) == 4
    rows = calibrate(pairs)
    assert [r.threshold for r in rows] == sorted(r.threshold for r in rows)
    assert all(r.tp + r.fn == 4 for r in rows)
    recalls = [r.recall for r in rows]
    assert recalls == sorted(recalls, reverse=True)  # a higher threshold never finds more
    assert pick_threshold(rows, 0.95) is None  # 4 pairs cannot show 0.95 with confidence
    chosen = pick_threshold(rows, 1.0, bound=False)
    assert chosen is not None
    assert chosen.fp == 0
    assert chosen.tp >= 1
    assert all(r.fp > 0 for r in rows if r.threshold < chosen.threshold and r.tp)
    unguarded = calibrate(pairs, guards=False)
    assert sum(r.fp for r in unguarded) >= sum(r.fp for r in rows)


def test_calibrate_cli_prints_the_trade_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_pairs(tmp_path / "pairs.jsonl")
    assert main(["cache", "calibrate", str(path), "--precision", "0.25", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pairs"] == 8
    assert report["threshold"] is not None
    chosen = next(r for r in report["table"] if r["threshold"] == report["threshold"])
    assert chosen["precision_lower_bound"] >= 0.25
    assert chosen["precision"] >= chosen["precision_lower_bound"]
    assert main(["cache", "calibrate", str(path), "--target-precision", "0.95"]) == 1
    assert "no threshold meets the target" in capsys.readouterr().out
    assert main(["cache", "calibrate", "bundled:hard_questions"]) == 0
    out = capsys.readouterr().out
    assert "bound" in out
    assert "use ResponseCache(threshold=" in out


def test_wilson_lower_bound() -> None:
    assert wilson_lower_bound(0, 0) == 0.0
    assert wilson_lower_bound(20, 20) == pytest.approx(0.8808, abs=1e-4)
    assert wilson_lower_bound(51, 51) < 0.95 < wilson_lower_bound(52, 52)
    assert wilson_lower_bound(90, 100) < 0.9 < wilson_lower_bound(900, 910)
    with pytest.raises(ConfigurationError):
        wilson_lower_bound(1, 2, confidence=1.0)


def test_target_precision_picks_the_threshold_from_labelled_pairs() -> None:
    # Near-identical duplicates, and non-duplicates that share half their words: only a
    # threshold above the non-duplicates' similarity meets the target.
    duplicates = [
        Pair(f"topic{i} alpha beta gamma", f"topic{i} alpha beta", True) for i in range(60)
    ]
    different = [Pair(f"topic{i} alpha beta", f"topic{i} gamma delta", False) for i in range(60)]
    pairs = duplicates + different
    cache = ResponseCache(target_precision=0.95, calibration_pairs=pairs, guards=False)
    rows = calibrate(pairs, guards=False)
    chosen = pick_threshold(rows, 0.95)
    assert chosen is not None
    assert cache.threshold == max(DEFAULT_THRESHOLD, chosen.threshold)
    assert chosen.precision_lower_bound >= 0.95
    with pytest.raises(ConfigurationError, match="no threshold reaches"):
        ResponseCache(target_precision=0.95, calibration_pairs=different + duplicates[:3])
    with pytest.raises(ConfigurationError):
        ResponseCache(target_precision=1.5)
    bundled = ResponseCache(target_precision=0.95)  # the development set shipped with it
    assert bundled.threshold >= DEFAULT_THRESHOLD


def test_bad_pair_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "a", "duplicate": true}\n', encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"bad\.jsonl:1"):
        read_pairs(bad)
    bad.write_text("not json\n", encoding="utf-8")
    with pytest.raises(ConfigurationError):
        read_pairs(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="no pairs"):
        read_pairs(empty)
    exported = tmp_path / "exported.jsonl"  # a spreadsheet's UTF-16 export
    exported.write_text('{"query": "a", "cached": "b", "duplicate": true}\n', encoding="utf-16")
    with pytest.raises(ConfigurationError, match="UTF-8"):
        read_pairs(exported)
    assert calibrate([Pair("a b c", "a b c", True)])[0].tp == 1


@pytest.fixture
def embeddings_url() -> Iterator[str]:
    with serve_embeddings() as url:
        yield url


def test_openai_embedder_over_http(embeddings_url: str) -> None:
    embedder = OpenAIEmbedder(embeddings_url, "embed-small", 64, api_key="sk-test")
    vectors = embedder.embed(["first text", "second text"])
    expected = HashingEmbedder(dimension=64).embed(["first text", "second text"])
    assert np.allclose(vectors, expected, atol=1e-6)  # rows put back in index order
    assert Embeddings.seen[0]["body"]["model"] == "embed-small"
    assert Embeddings.seen[0]["auth"] == "Bearer sk-test"
    cache = ResponseCache(embedder=embedder, threshold=0.5)
    question = ChatRequest(messages=[Message(role="user", content="reset my password")])
    cache.store(question, ChatResponse(text="a", finish_reason="stop"))
    similar = ChatRequest(messages=[Message(role="user", content="reset my password please")])
    hit = cache.lookup(similar)
    assert hit is not None
    assert hit.kind == "semantic"
    with pytest.raises(MalformedResponseError):
        OpenAIEmbedder(embeddings_url, "embed-small", 32).embed(["x"])  # wrong dimension
    Embeddings.broken = True
    with pytest.raises(MalformedResponseError):
        embedder.embed(["one", "two"])
    embedder.close()


def test_openai_embedder_answers_that_are_not_vectors_are_typed_errors(
    embeddings_url: str,
) -> None:
    embedder = OpenAIEmbedder(embeddings_url, "embed-small", 2)
    rows = [{"index": "0", "embedding": [1.0, 0.0]}, {"index": None, "embedding": [0.0, 1.0]}]
    for raw in (b"<html>502 Bad Gateway</html>", json.dumps({"data": rows}).encode()):
        Embeddings.raw = raw
        with pytest.raises(MalformedResponseError):
            embedder.embed(["one", "two"])
    embedder.close()


def test_a_hybrid_weight_that_is_not_a_finite_positive_number_is_refused() -> None:
    for weight in (float("nan"), float("inf"), 0.0):  # NaN and inf: every vector was NaN
        with pytest.raises(ConfigurationError, match="positive, finite weights"):
            HybridEmbedder([(HashingEmbedder(), weight), (HashingEmbedder(dimension=64), 1.0)])


def test_openai_embedder_unreachable_is_a_typed_error() -> None:
    embedder = OpenAIEmbedder("http://127.0.0.1:1/v1", "m", 8, timeout=2)
    with pytest.raises(ProviderUnavailableError):
        embedder.embed(["x"])


@pytest.mark.local_model
def test_llama_cpp_embedder_runs_a_gguf_model() -> None:
    require_module("llama_cpp", "the local model extra: pip install 'llmguard-sdk[local]'")
    from llmguard_sdk.cache import LlamaCppEmbedder
    from llmguard_sdk.providers.local import bundled_model_path

    # The bundled chat model stands in for a GGUF embedding model: only the mechanics are
    # checked here (its vectors are poor at similarity, which is why nothing defaults to it).
    embedder = LlamaCppEmbedder(str(bundled_model_path()), n_ctx=256)
    vectors = embedder.embed(["hello", "a longer second text"])
    assert vectors.shape == (2, embedder.dimension)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert embedder.name.startswith("llama.cpp:")
