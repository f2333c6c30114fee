"""The response cache used directly, with inputs the Guard would have checked first: each bad
one is a typed error, not a ``TypeError`` from deep inside."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk.cache import HashingEmbedder, HybridEmbedder, Pair, ResponseCache, read_pairs
from llmguard_sdk.cache._config import MAX_LIFETIME_S
from llmguard_sdk.cache.verifier import ParaphraseVerifier
from llmguard_sdk.cli import main
from llmguard_sdk.errors import ConfigurationError, RequestValidationError
from tests.test_cache import answer, ask


@pytest.mark.parametrize("tags", [None, 7, 1.5])
def test_tags_that_are_no_list_are_a_typed_error(tags: Any) -> None:
    """``tags=None`` or a number raised ``TypeError: ... is not iterable``."""
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="cache tags"):
        cache.lookup(ask("How do I reset my password?"), tags=tags)
    with pytest.raises(RequestValidationError, match="cache tags"):
        cache.store(ask("How do I reset my password?"), answer("a"), tags=tags)
    assert cache.stats.stores == 0


def _pairs_file(path: Path, lines: list[str], encoding: str = "utf-8") -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding=encoding)
    return str(path)


def test_a_pairs_file_saved_with_a_byte_order_mark_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSONL file written by a Windows tool (UTF-8 with a BOM) was refused at line 1 as
    "not a JSON object"."""
    line = json.dumps({"query": "How do I reset it?", "cached": "How to reset it?", "label": 1})
    path = _pairs_file(tmp_path / "bom.jsonl", [line, line], encoding="utf-8-sig")
    assert read_pairs(path) == [Pair("How do I reset it?", "How to reset it?", True)] * 2
    assert main(["cache", "calibrate", path, "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["pairs"] == 2


@pytest.mark.parametrize("label", [2, 5, -1])
def test_a_graded_label_is_refused_not_read_as_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: int
) -> None:
    """A 0-5 similarity grade (as the STS benchmark's) was read as ``bool(label)``: every
    pair graded 1 to 5 counted as a duplicate, and the threshold came out wrong."""
    line = json.dumps({"a": "How do I reset it?", "b": "How to reset it?", "label": label})
    path = _pairs_file(tmp_path / "graded.jsonl", [line])
    with pytest.raises(ConfigurationError, match=r"graded\.jsonl:1: needs duplicate"):
        read_pairs(path)
    assert main(["cache", "calibrate", path]) == 2
    assert "needs duplicate" in capsys.readouterr().err


def test_a_pairs_file_nested_too_deep_is_a_configuration_error(tmp_path: Path) -> None:
    """A line of nested arrays deeper than the JSON parser recurses raised ``RecursionError``
    (a traceback from the CLI)."""
    path = _pairs_file(tmp_path / "deep.jsonl", ["[" * 100_000 + "]" * 100_000])
    with pytest.raises(ConfigurationError, match=r"deep\.jsonl:1: not a JSON object"):
        read_pairs(path)


@pytest.mark.parametrize(
    "pairs", [[{"query": "a", "cached": "b", "duplicate": True}], [("a", "b", True)], 123]
)
def test_calibration_pairs_of_another_kind_are_a_configuration_error(pairs: Any) -> None:
    """Dicts or tuples for ``calibration_pairs`` raised ``AttributeError`` (a number,
    ``TypeError``) from inside the calibration."""
    with pytest.raises(ConfigurationError, match="calibration_pairs"):
        ResponseCache(target_precision=0.9, calibration_pairs=pairs)


@pytest.mark.parametrize("times", [{"ttl": 1e300}, {"stale_ttl": 1e300}, {"ttl": 1e16}])
def test_lifetimes_redis_cannot_keep_are_refused(times: dict[str, float]) -> None:
    """A "forever" ``ttl`` such as 1e300 (finite, so taken) made every Redis write fail with
    "value is not an integer or out of range": each store was logged as Redis being down,
    and the store shared with the other stages was marked down with it."""
    with pytest.raises(ConfigurationError, match="at most"):
        ResponseCache(**times)  # type: ignore[arg-type]


def test_the_longest_lifetimes_work_in_redis(redis_url: str, redis_prefix: str) -> None:
    cache = ResponseCache(
        redis_url, key_prefix=redis_prefix, ttl=MAX_LIFETIME_S, stale_ttl=MAX_LIFETIME_S
    )
    assert cache.store(ask("How do I reset my password?"), answer("a"))
    hit = cache.lookup(ask("How do I reset my password?"))
    assert hit is not None
    assert hit.kind == "exact"
    assert cache.state.health.up()  # type: ignore[attr-defined]
    cache.close()


@pytest.mark.parametrize(
    "build",
    [
        lambda: HashingEmbedder(1024.0),  # type: ignore[arg-type]
        lambda: HashingEmbedder("1024"),  # type: ignore[arg-type]
        lambda: HashingEmbedder(ngram_sizes=3),  # type: ignore[arg-type]
        lambda: HashingEmbedder(ngram_sizes=(3.5,)),  # type: ignore[arg-type]
        lambda: HashingEmbedder(ngram_sizes=("3",)),  # type: ignore[arg-type]
        lambda: HashingEmbedder(char_weight=float("nan")),
        lambda: HashingEmbedder(pair_weight=float("inf")),
        lambda: HashingEmbedder(char_weight="0.5"),  # type: ignore[arg-type]
        lambda: HybridEmbedder([(HashingEmbedder(), "1")]),  # type: ignore[list-item]
        lambda: HybridEmbedder([("hashing", 1.0)]),  # type: ignore[list-item]
        lambda: HybridEmbedder([(HashingEmbedder(), 1.0)], default_threshold="0.7"),  # type: ignore[arg-type]
        lambda: ParaphraseVerifier(HashingEmbedder(), threshold="0.8"),  # type: ignore[arg-type]
    ],
)
def test_embedder_options_of_the_wrong_kind_are_configuration_errors(build: Any) -> None:
    """Each was a ``TypeError`` or ``AttributeError`` at construction or at the first
    lookup, or taken silently: a NaN or infinite weight made every vector NaN (no semantic
    hit, ever), a threshold given as text was ignored."""
    with pytest.raises(ConfigurationError):
        build()


def test_embedder_options_of_the_right_kind_still_work() -> None:
    hashing = HashingEmbedder(64, ngram_sizes=[3, 4], char_weight=0, pair_weight=1)
    hybrid = HybridEmbedder([[hashing, 1], (HashingEmbedder(), 2.5)], default_threshold=0.6)  # type: ignore[list-item]
    cache = ResponseCache(embedder=hybrid)
    assert cache.threshold == 0.6
    assert cache.store(ask("How do I reset my password?"), answer("a"))
    hit = cache.lookup(ask("How can I reset my password?"))
    assert hit is not None
    assert hit.kind == "semantic"


def test_a_nan_deadline_is_a_typed_error() -> None:
    """A NaN deadline was taken: an embedder that takes a timeout then had "no time left" on
    every call (each lookup a miss, each store an error), the hashing one ignored it."""
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="deadline"):
        cache.lookup(ask("How do I reset my password?"), deadline=float("nan"))
    with pytest.raises(RequestValidationError, match="deadline"):
        cache.store(ask("How do I reset my password?"), answer("a"), deadline=float("nan"))
    assert cache.stats.stores == 0
