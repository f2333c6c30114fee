"""The ``llmguard`` command as a review found it: a library warning printed with Python's source
line, the settings ``check`` validated but did not show, a Redis database path that is no
number accepted, "nothing found" said without where it was looked for, lines skipped without a
count, and a replay, a comparison or a calibration whose options could not work together, each
found out late or never. Each is one line that says what to fix, with an exit status a script
can trust."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk.cli import main
from llmguard_sdk.errors import CanaryNotFoundError, ReleaseConflictError
from llmguard_sdk.store import open_store
from llmguard_sdk.telemetry.evaluation import replay
from llmguard_sdk.testing import FakeProvider

ROUTES = '[[routes]]\nmodel = "vllm/m"\nbase_url = "http://127.0.0.1:9/v1"\n'
USAGE = '{"ts": 1.0, "outcome": "ok", "tenant": "acme", "route": "r", "cost_usd": 0.01}\n'
SAMPLE = {
    "type": "call",
    "call_id": "a",
    "request": {"messages": [{"role": "user", "content": "hi"}]},
    "answer": "hello",
}


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m llmguard_sdk.cli ARGS``: the command as a shell runs it."""
    return subprocess.run(
        [sys.executable, "-m", "llmguard_sdk.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


def test_a_library_warning_is_one_line_without_pythons_source_line(tmp_path: Path) -> None:
    """It printed ``.../cli/__main__.py:7: UnknownSettingWarning: ...`` and then the source
    line ``sys.exit(main())``: Python's, to a shell user."""
    config = tmp_path / "ok.toml"
    config.write_text(ROUTES, encoding="utf-8")
    done = _cli("check", str(config), env={"LLMGUARD_TIMEOT": "5"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "llmguard: warning: environment variable LLMGUARD_TIMEOT is not a setting and is "
        "ignored: did you mean LLMGUARD_TIMEOUT?\n"
    )


def test_the_commands_warning_printer_is_its_runs_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """The one-line printer is the command's while it runs: a program that calls ``main``
    keeps its own ``warnings.showwarning`` afterwards."""
    before = warnings.showwarning
    assert main(["cost", "models", "gpt-4o-mini"]) == 0
    assert warnings.showwarning is before
    capsys.readouterr()


@pytest.mark.parametrize("as_json", [False, True])
def test_check_shows_the_settings_the_guard_will_use_and_where_each_is_from(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    as_json: bool,
) -> None:
    """``LLMGUARD_TIMEOUT=5`` was validated, then ``"settings": {}``: the values the Guard
    would use were not shown, nor which the file set and which the environment."""
    for name in ("LLMGUARD_STORE", "LLMGUARD_KEY_PREFIX", "LLMGUARD_MAX_INPUT_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LLMGUARD_TIMEOUT", "5")
    monkeypatch.setenv("LLMGUARD_RETRY_ATTEMPTS", "2")
    monkeypatch.setenv("LLMGUARD_ATTEMPT_TIMEOUT", "9")  # the file's wins
    monkeypatch.setenv("LLMGUARD_API_KEY", "sk-never-shown")  # a file's Guard reads no key
    config = tmp_path / "ok.toml"
    config.write_text("attempt_timeout = 2\n" + ROUTES, encoding="utf-8")
    assert main(["check", str(config), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert "sk-never-shown" not in out
    if as_json:
        found = json.loads(out)
        assert found["settings"]["timeout"] == 5.0
        assert found["settings"]["retry_attempts"] == 2
        assert found["settings"]["attempt_timeout"] == 2.0
        assert found["settings"]["store"] == "memory"
        assert found["settings_from"]["timeout"] == "environment"
        assert found["settings_from"]["retry_attempts"] == "environment"
        assert found["settings_from"]["attempt_timeout"] == "file"
        assert found["settings_from"]["store"] == "default"
        assert "api_key" not in found["settings"]
    else:
        assert "timeout: 5.0 (environment LLMGUARD_TIMEOUT)" in out
        assert "retry_attempts: 2 (environment LLMGUARD_RETRY_ATTEMPTS)" in out
        assert "attempt_timeout: 2.0 (file)" in out
        assert "store: memory (default)" in out
        assert "api_key" not in out


BAD_DATABASES = ["abc", "-1", "1/2", "0x1"]


@pytest.mark.parametrize("database", BAD_DATABASES)
def test_a_redis_database_that_is_no_whole_number_is_refused_naming_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], database: str
) -> None:
    """``redis://host:6379/abc`` passed ``check`` and ``budget status``: redis-py used
    database 0 without a word (``/1/2``: database 12; ``/-1``: the server's error later)."""
    url = f"redis://:sekrit-pass@127.0.0.1:6379/{database}"
    shown = f"redis://:***@127.0.0.1:6379/{database}"
    with pytest.raises(ConfigurationError) as caught:
        open_store(url)
    assert shown in str(caught.value)
    assert "sekrit-pass" not in str(caught.value)
    config = tmp_path / "guard.toml"
    config.write_text(f'store = "{url}"\n' + ROUTES, encoding="utf-8")
    for argv in (["check", str(config)], ["budget", "status", "--store", url]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert shown in err
        assert "database" in err
        assert "sekrit-pass" not in err
        assert err.count("\n") == 1


@pytest.mark.parametrize("path", ["", "/", "/0", "/15"])
def test_a_redis_url_with_a_database_number_or_none_is_taken(path: str) -> None:
    open_store(f"redis://127.0.0.1:6379{path}").close()  # (no connection is made)


@pytest.mark.parametrize(
    ("command", "said"),
    [(["budget", "status"], "no budget counters found"),
     (["release", "status", "bot"], "no canary stored under 'bot'")],
)  # fmt: skip
def test_a_status_that_finds_nothing_says_where_it_looked_and_exits_1(
    redis_url: str,
    redis_prefix: str,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    said: str,
) -> None:
    """``--prefix`` misspelled: ``no budget counters found``, exit 0, and not a word of the
    store or the prefix searched (``cost report`` of no calls exits 1)."""
    argv = [*command, "--store", redis_url, "--prefix", redis_prefix]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert said in captured.err
    assert f"in {redis_url} under key prefix {redis_prefix!r}" in captured.err
    assert captured.err.count("\n") == 1
    assert main([*argv, "--json"]) == 1
    captured = capsys.readouterr()
    shown = json.loads(captured.out)  # stdout stays JSON: no counter, no canary
    assert shown == {"counters": []} if command[0] == "budget" else shown["canary"] is None
    assert repr(redis_prefix) in captured.err


def test_a_move_that_finds_no_canary_says_where_it_looked(
    redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["release", "rollback", "bot", "--store", redis_url, "--prefix", redis_prefix]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "could not roll back the canary under 'bot'" in err
    assert f"in {redis_url} under key prefix {redis_prefix!r}" in err


def test_the_moves_of_a_canary_are_said_in_words() -> None:
    """``could not rollback the canary``: the noun for the verb."""
    assert "could not roll back the canary" in str(CanaryNotFoundError("k", "rollback"))
    assert "could not roll back the canary" in str(
        ReleaseConflictError("k", "rollback", attempts=2)
    )
    assert "could not promote the canary" in str(CanaryNotFoundError("k", "promote"))
    assert CanaryNotFoundError("k", "rollback").action == "rollback"


@pytest.mark.parametrize(
    "command", [["cost", "report", "{file}"], ["report", "{file}", "--html", "{page}"]]
)
def test_lines_that_are_not_json_are_counted_with_the_first_one_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """They were skipped without a word: a report of part of the file, as if whole."""
    usage = tmp_path / "usage.jsonl"
    usage.write_text(USAGE + "not json\n" + USAGE + '{"ts": 2.0, "outc\n' + "\n", encoding="utf-8")
    names = {"file": str(usage), "page": str(tmp_path / "page.html")}
    assert main([part.format(**names) for part in command]) == 0
    err = capsys.readouterr().err
    assert f"skipped 2 lines of {usage} that are not JSON (the first: line 2)" in err
    assert err.count("\n") == 1


def test_a_file_whose_lines_are_all_json_is_reported_without_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    usage = tmp_path / "usage.jsonl"
    usage.write_text(USAGE + "\n" + USAGE, encoding="utf-8")
    assert main(["cost", "report", str(usage), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert json.loads(captured.out)["total"]["calls"] == 2


def test_eval_without_a_model_where_the_samples_name_none_is_refused_up_front(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every call failed with ``no model: pass model=...`` (Python's words), exit 1."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps(SAMPLE) + "\n", encoding="utf-8")
    assert main(["eval", str(samples), "--base-url", fake.base_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmguard eval: --model: ")
    assert "model=" not in err
    assert err.count("\n") == 1
    assert fake.requests == []  # refused before any call
    recorded = {**SAMPLE, "model": fake.model}  # the samples name one: replayed as before
    samples.write_text(json.dumps(recorded) + "\n", encoding="utf-8")
    assert main(["eval", str(samples), "--base-url", fake.base_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["compared"] == 1


@pytest.mark.parametrize("spec", ["json:dumps", "operator:not_", "os:sep", "builtins:len"])
def test_a_comparison_that_cannot_take_two_answers_is_refused_saying_what_it_takes(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str], spec: str
) -> None:
    """``--compare json:dumps`` ended in a TypeError traceback at the first comparison."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({**SAMPLE, "model": "m"}) + "\n", encoding="utf-8")
    argv = ["eval", str(samples), "--base-url", fake.base_url, "--compare", spec]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmguard eval: --compare {spec}: ")
    assert "(recorded, replayed)" in err
    assert err.count("\n") == 1
    assert fake.requests == []  # refused before any call


def test_a_comparison_returning_no_verdict_is_said_so(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    """A function of two answers that returns neither a bool nor a number (``os.path:join``
    returns a path) raised a ValueError traceback."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({**SAMPLE, "model": "m"}) + "\n", encoding="utf-8")
    argv = ["eval", str(samples), "--base-url", fake.base_url, "--compare", "os.path:join"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmguard eval: --compare os.path:join: ")
    assert "bool or a number" in err
    assert err.count("\n") == 1


VERDICT: list[Any] = [None]


def graded(recorded: str, replayed: str) -> Any:
    """A comparison whose verdict the test sets (``--compare tests.test_cli_review:graded``)."""
    return VERDICT[0]


@pytest.mark.parametrize(
    ("verdict", "agreed"),
    [
        ("0.9", 1),  # a grader's answer, as text
        (" 0.1\n", 0),
        (Decimal("0.9"), 1),
        (True, 1),
        ("90%", None),
        (None, None),
        pytest.param(10**400, None, id="int-too-large"),  # (an OverflowError traceback from both)
    ],
)
def test_eval_and_replay_read_a_comparison_s_verdict_alike(
    tmp_path: Path,
    fake: FakeProvider,
    capsys: pytest.CaptureFixture[str],
    verdict: object,
    agreed: int | None,
) -> None:
    """``replay()`` ended in a ValueError, TypeError or OverflowError traceback where
    ``llmguard eval`` said what a verdict must be; both read a verdict one way now (None:
    refused, saying so)."""
    VERDICT[0] = verdict
    sample = {**SAMPLE, "model": fake.model}
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps(sample) + "\n", encoding="utf-8")
    argv = ["eval", str(samples), "--base-url", fake.base_url, "--json"]
    code = main([*argv, "--compare", f"{__name__}:graded"])
    out, err = capsys.readouterr()
    by_cli = json.loads(out)["overall"]["agreed"] if code == 0 else None
    assert (code, by_cli) == ((0, agreed) if agreed is not None else (2, None))
    assert agreed is not None or "must return a bool or a number" in err
    with Guard(OpenAICompatibleProvider(fake.base_url, model=fake.model), environ={}) as guard:
        if agreed is None:
            with pytest.raises(ConfigurationError, match="must return a bool or a number"):
                replay([sample], guard, compare=graded)
        else:
            assert replay([sample], guard, compare=graded).overall.agreed == agreed


@pytest.mark.parametrize("other", ["--no-guards", "--verifier"])
def test_calibrate_refuses_no_strict_where_it_does_nothing(
    capsys: pytest.CaptureFixture[str], other: str
) -> None:
    """``--no-strict`` beside ``--no-guards`` (no guards at all) or ``--verifier`` (the
    standard guards already) changed nothing, without a word."""
    argv = ["cache", "calibrate", "bundled:hard_questions", "--no-strict", other]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"llmguard cache calibrate: --no-strict: not with {other}")
    assert captured.out == ""


@pytest.mark.parametrize("option", ["--rate", "--before", "--outage", "--after"])
def test_a_drill_of_no_rate_or_length_names_the_option(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rate and every phase duration must be positive`` left the reader to find which."""
    argv = ["drill", "--no-local", "--before", "0.1", "--outage", "0.1", "--after", "0.1"]
    assert main([*argv, option, "0"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"llmguard drill: {option} must be positive")
    assert captured.out == ""


def test_the_drills_name_the_argument_that_is_not_positive() -> None:
    from llmguard_sdk.testing.config_drill import run_config_drill
    from llmguard_sdk.testing.drill import run_drill

    with pytest.raises(ConfigurationError, match=r"^outage must be positive"):
        run_drill(outage=0.0)
    with pytest.raises(ConfigurationError, match=r"^rate must be positive"):
        run_config_drill({"routes": [{"model": "vllm/m", "base_url": "http://h/v1"}]}, rate=0)


@pytest.mark.parametrize("command", [["budget", "status"], ["release", "status", "bot"]])
def test_a_redis_that_refuses_is_not_said_not_to_answer(
    redis_url: str, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A database the server does not have was "Redis ... did not answer: DB index is out
    of range": Redis answered, and the one to look into is the URL, not the network."""
    from urllib.parse import urlsplit

    parts = urlsplit(redis_url)
    missing = parts._replace(path="/100000").geturl()  # (Redis has 16 databases by default)
    assert main([*command, "--store", missing]) == 1
    err = capsys.readouterr().err
    assert f"Redis at {missing} refused: " in err
    assert "DB index is out of range" in err
    assert "did not answer" not in err
    unreachable = "redis://127.0.0.1:1/0"
    assert main([*command, "--store", unreachable]) == 1
    assert f"Redis at {unreachable} did not answer: " in capsys.readouterr().err
