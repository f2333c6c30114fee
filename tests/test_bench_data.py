"""bench/_benchkit.py's ``shared_data``: a data file the repository does not hold (GPTCache's
mock file) is found in ``shared/data`` beside the checkout, and beside the main checkout when
a bench runs from a git worktree: its default path was resolved beside the checkout alone, so
a worktree elsewhere (``git worktree add ../wt/NAME``) skipped the mock-file sweep."""

from __future__ import annotations

import runpy
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
NAME = "gptcache_mock_data.json"


@pytest.fixture(scope="module")
def shared_data() -> Callable[..., list[Path]]:
    found: Callable[..., list[Path]] = runpy.run_path(str(BENCH / "_benchkit.py"))["shared_data"]
    return found


def _git(*args: str | Path) -> None:
    subprocess.run(["git", *map(str, args)], check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_worktree_finds_the_data_beside_the_main_checkout(
    shared_data: Callable[..., list[Path]], tmp_path: Path
) -> None:
    main = tmp_path / "main"
    main.mkdir()
    _git("init", "-q", main)
    _git("-C", main, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
         "-m", "start")  # fmt: skip
    data = tmp_path / "shared" / "data" / NAME
    data.parent.mkdir(parents=True)
    data.write_text("[]", encoding="utf-8")
    worktree = tmp_path / "wt" / "one"
    _git("-C", main, "worktree", "add", "-q", "--detach", worktree)

    assert shared_data(NAME, main) == [data]
    places = shared_data(NAME, worktree)
    assert places == [tmp_path / "wt" / "shared" / "data" / NAME, data]
    assert [place for place in places if place.is_file()] == [data]


def test_outside_git_only_the_folder_beside_the_checkout_is_looked_in(
    shared_data: Callable[..., list[Path]], tmp_path: Path
) -> None:
    checkout = tmp_path / "unpacked"
    checkout.mkdir()
    assert shared_data(NAME, checkout) == [tmp_path / "shared" / "data" / NAME]
