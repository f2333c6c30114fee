"""The test run's own hygiene: no write into the user's cache, no silent skip in CI, and the
``tools/leftovers.py`` check that ``make test`` runs the suite under."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from llmguard_sdk.budget.journal import default_journal_dir

from .conftest import require, require_module

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def test_the_spend_journal_defaults_to_a_temp_dir_during_the_tests() -> None:
    cache = os.environ["XDG_CACHE_HOME"]
    assert Path(cache).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert default_journal_dir().is_relative_to(cache)


def test_require_skips_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    require(True, "present")
    with pytest.raises(pytest.skip.Exception, match="the thing is missing"):
        require(False, "the thing is missing")
    with pytest.raises(pytest.skip.Exception, match="no_such_module_here"):
        require_module("no_such_module_here", "install it")
    monkeypatch.setenv("CI", "true")
    require(1, "present")
    with pytest.raises(pytest.fail.Exception, match=r"CI=true.*the thing is missing"):
        require(False, "the thing is missing")
    assert require_module("json", "stdlib").dumps([]) == "[]"


def _leftovers(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        [
            sys.executable,
            str(TOOLS / "leftovers.py"),
            "--grace",
            "1",
            "--",
            *(sys.executable, "-c", textwrap.dedent(script)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_leftovers_passes_a_clean_run(tmp_path: Path) -> None:
    result = _leftovers(tmp_path, "import subprocess; subprocess.run(['sleep', '0.1'])")
    assert result.returncode == 0, result.stderr
    assert "leftovers:" not in result.stderr


def test_leftovers_finds_kills_and_fails_on_an_orphaned_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result = _leftovers(
        tmp_path,
        f"""
        import subprocess
        # a grandchild in a session of its own, orphaned when this process exits
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        """,
    )
    assert result.returncode == 1
    pid = int(pid_file.read_text())
    assert f"pid {pid}: sleep 300" in result.stderr
    with pytest.raises(ProcessLookupError):  # killed (and reaped) by the check
        os.kill(pid, 0)


def test_leftovers_fails_on_a_file_in_the_user_cache(tmp_path: Path) -> None:
    journal = tmp_path / "cache" / "llmguard" / "journal"
    journal.mkdir(parents=True)
    (journal / "old.jsonl").write_text("{}\n")  # there before the run: not the run's
    result = _leftovers(
        tmp_path,
        f"open({str(journal / 'new.jsonl')!r}, 'w').write('{{}}')",
    )
    assert result.returncode == 1
    assert "journal/new.jsonl" in result.stderr
    assert "old.jsonl" not in result.stderr


def test_leftovers_keeps_the_commands_failure(tmp_path: Path) -> None:
    assert _leftovers(tmp_path, "raise SystemExit(3)").returncode == 3
