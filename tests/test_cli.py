"""The ``llmguard`` command: --help, --version and the offline demo."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from llmguard_sdk import __version__
from llmguard_sdk.cli import main, run_demo

from .conftest import genai_prices_or_skip

USAGE_LINE = '{"ts": 1.0, "outcome": "ok", "route": "r", "cost_usd": 0.01}\n'


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmguard_sdk.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter (``python -c``), its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_version_and_help() -> None:
    assert run_cli("--version").stdout.strip() == f"llmguard-sdk {__version__}"
    help_text = run_cli("--help").stdout
    assert "demo" in help_text


@pytest.mark.slow  # a demo with the local model as its last route: 15-30 s
@pytest.mark.local_model
# The demo's outage is answered by the bundled model, whose two llama.cpp threads slow down
# many times over when other processes hold the cores (57 s alone at a load average of 6.5).
@pytest.mark.timeout(330)
def test_demo_answers_every_call_through_the_fallback_route() -> None:
    result = run_cli("demo", "--json", "--requests", "30", "--concurrency", "4", timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["failed"] == 0
    assert sum(summary["served_by"].values()) == 30
    assert summary["retries"]["primary"] > 0  # 503s, resets and 429s were retried
    assert set(summary["retry_causes"]["primary"]) <= {
        "ProviderUnavailableError",
        "RateLimitedError",
    }
    moved_on = summary["route_failures"].get("primary", {})
    assert summary["served_by"].get("backup", 0) == sum(moved_on.values())
    assert summary["tokens"]["output"] > 0
    assert summary["stream_first_token_ms"] > 0
    # During the outage of both remote routes the bundled local model answers...
    assert {answer["route"] for answer in summary["outage"]} == {"local"}
    assert all(answer["text"] for answer in summary["outage"])
    assert summary["local_placement"].startswith("n_gpu_layers=")  # where it ran, and why
    # ...the breakers open, and after the outage they probe, close, and the primary serves.
    changes = {(t["route"], t["before"], t["after"]) for t in summary["breaker_transitions"]}
    assert ("primary", "closed", "open") in changes
    assert ("primary", "half_open", "closed") in changes
    assert [answer["route"] for answer in summary["recovery"]] == ["primary", "primary"]


@pytest.mark.slow
@pytest.mark.local_model
def test_demo_table_names_the_routes() -> None:
    summary = run_demo(requests=12, concurrency=3)
    table = summary.render()
    assert "primary" in table
    assert "backup" in table
    assert "-> local in" in table
    assert "answered      12 of 12" in table
    assert "local model placed: n_gpu_layers=" in table


def test_bad_arguments_exit_with_usage() -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--requests", "0"])
    assert info.value.code == 2


def test_a_demo_of_more_requests_than_it_can_hold_is_refused_before_it_starts() -> None:
    """``--requests 1000000000`` built a billion-long fault script and started every call's
    task at once (only the calls waited for ``--concurrency``): memory without bound. Under a
    1 GiB address-space limit it died of a MemoryError; it is refused in one line, status 2."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from llmguard_sdk.cli import main\n"
        "sys.exit(main(['demo', '--requests', '1000000000']))\n"
    )
    result = run_python(code)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "1,000,000,000 requests" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("group", ["budget", "cache", "cost"])
def test_a_command_group_without_its_action_exits_with_usage(
    group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([group])
    assert info.value.code == 2
    assert "ACTION" in capsys.readouterr().err


def test_a_configuration_error_of_any_command_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["cache", "calibrate", "bundled:hard_questions", "--target-precision", "2"])
    assert status == 2
    out = capsys.readouterr().err
    assert out == "llmguard cache calibrate: --target-precision must be in (0, 1)\n"


def test_without_a_command_the_help_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    help_text = capsys.readouterr().out
    for command in ("demo", "drill", "cost", "budget", "cache", "eval", "report", "check"):
        assert command in help_text


@pytest.mark.slow
def test_drill_reports_an_outage_and_its_recovery(tmp_path: Any) -> None:
    picture = tmp_path / "timeline.png"
    result = run_cli(
        "drill",
        "--json",
        "--rate",
        "10",
        "--before",
        "1",
        "--outage",
        "1",
        "--after",
        "3",
        "--no-local",
        "--png",
        str(picture),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["answered_share"] == 1.0
    changes = [(t["before"], t["after"]) for t in report["breaker_transitions"]]
    assert ("closed", "open") in changes
    assert changes[-1] == ("half_open", "closed")
    assert picture.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "option",
    [
        ["--split", "gpt-4o=nan"],
        ["--split", "gpt-4o=inf,gpt-4o-mini=1"],
        ["--model", "gpt-4o", "--requests-per-day", "inf"],
        ["--model", "gpt-4o", "--days", "nan"],
        ["--model", "gpt-4o", "--output-tokens-p95", "inf"],
    ],
)
def test_cost_estimate_refuses_numbers_that_are_not_finite(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"--requests-per-day": "100", "--input-tokens": "100", "--output-tokens": "50"}
    for name, value in zip(option[::2], option[1::2], strict=True):
        base[name] = value
    argv = ["cost", "estimate", *(part for pair in base.items() for part in pair)]
    with pytest.raises(SystemExit) as info:  # it printed $nan / $inf and exited 0
        main(argv)
    assert info.value.code == 2
    assert "nan" not in capsys.readouterr().out


def test_a_configuration_that_is_not_utf_8_is_a_configuration_error(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "guard.toml"
    path.write_bytes(b"\xff\xfe[[routes]]\n")
    assert main(["check", str(path)]) == 2  # a UnicodeDecodeError traceback, status 1
    assert "guard.toml" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--rate", "--before", "--outage", "--after"])
def test_a_drill_of_infinite_rate_or_length_is_refused(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["drill", "--no-local", "--before", "0.1", "--outage", "0.1", "--after", "0.1"]
    assert main([*argv, option, "inf"]) == 2  # --rate inf: OverflowError; a phase: forever
    assert "must be positive" in capsys.readouterr().err


@pytest.mark.parametrize("config", [False, True])
def test_a_drill_of_more_calls_than_it_can_hold_is_refused_before_it_starts(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], config: bool
) -> None:
    """``--rate 1e9`` launched its calls without end (15 billion at the default phases), each
    one's task and record held: the drill printed nothing while it took every byte of memory.
    A drill of more than 100,000 calls is refused, saying how many it asked for."""
    path = tmp_path / "guard.toml"
    path.write_text('[[routes]]\nmodel = "vllm/a"\nbase_url = "http://127.0.0.1:9/v1"\n')
    where = ["--config", str(path)] if config else ["--no-local"]
    argv = ["drill", *where, "--before", "0.2", "--outage", "0.2", "--after", "0.2"]
    assert main([*argv, "--rate", "100001"]) == 2  # 1 s of traffic: 100,001 calls
    assert "100,001 calls" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--api-key-env", "LLMGUARD_TEST_UNSET_KEY"], "LLMGUARD_TEST_UNSET_KEY"),
        (["--limit", "0"], None),  # "at most 0 calls": nothing replayed, status 0
        (["--limit", "-3"], None),
        (["--threshold", "nan"], None),
    ],
)
def test_eval_refuses_options_it_would_ignore_or_misread(
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    option: list[str],
    named: str | None,
) -> None:
    monkeypatch.delenv("LLMGUARD_TEST_UNSET_KEY", raising=False)
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    argv = ["eval", str(samples), "--base-url", "http://127.0.0.1:9/v1", *option]
    if named is None:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    else:  # it replayed every call without a key: each one a 401
        assert main(argv) == 2
        assert named in capsys.readouterr().err


@pytest.mark.parametrize(("value", "said"), [(None, "is not set"), ("", "is empty")])
def test_eval_says_whether_the_key_variable_is_unset_or_empty(
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: str | None,
    said: str,
) -> None:
    """A key variable set to an empty value was reported as not set."""
    if value is None:
        monkeypatch.delenv("LLMGUARD_TEST_EVAL_KEY", raising=False)
    else:
        monkeypatch.setenv("LLMGUARD_TEST_EVAL_KEY", value)
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    argv = ["eval", str(samples), "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--api-key-env", "LLMGUARD_TEST_EVAL_KEY"]) == 2
    assert f"LLMGUARD_TEST_EVAL_KEY {said}" in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "lines",
    [
        [],  # an empty file
        ['{"timestamp": 1, "route": "openai", "cost_usd": 0.01}'],  # a usage file given
        ['{"type": "call", "call_id": "a", "request": {"messages": []}, "error": "timeout"}'],
    ],
)
def test_eval_of_a_file_without_answered_calls_fails(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], lines: list[str], as_json: bool
) -> None:
    """A table of 0 calls and exit 0: a CI step that replays the wrong file (or one whose
    calls all failed) passed, as if the candidate agreed (``cost report`` says so, exit 1)."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(line + "\n" for line in lines))
    argv = ["eval", str(samples), "--base-url", "http://127.0.0.1:9/v1"]  # (never called)
    assert main([*argv, *(["--json"] if as_json else [])]) == 1
    captured = capsys.readouterr()
    assert f"no answered calls to replay in {samples}" in captured.err
    assert captured.out == ""


def test_report_into_a_folder_that_does_not_exist_is_one_line_and_status_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    usage = tmp_path / "usage.jsonl"
    usage.write_text(USAGE_LINE)  # (an empty file: no usage records, nothing written)
    out = tmp_path / "missing" / "report.html"
    assert main(["report", str(usage), "--html", str(out)]) == 2  # a FileNotFoundError before
    assert "report.html" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["budget", "status"], ["release", "status", "bot"]])
def test_a_redis_that_does_not_answer_is_named_without_its_password(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = "redis://app:hunter2-redis-pass@127.0.0.1:1/0"  # nothing listens on port 1
    assert main([*command, "--store", url]) == 1
    out = capsys.readouterr().err
    assert "did not answer" in out
    assert "hunter2-redis-pass" not in out  # it printed the URL as given


@pytest.mark.parametrize(
    "command",
    [
        ["cost", "report", "{bad}"],
        ["report", "{bad}", "--html", "{out}"],
        ["report", "{good}", "--html", "{out}", "--samples", "{bad}"],
        ["eval", "{bad}", "--base-url", "http://127.0.0.1:9/v1"],
    ],
)
def test_a_usage_or_samples_file_that_is_not_utf_8_is_one_line_and_status_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    bad = tmp_path / "usage.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")  # a picture given for the usage file
    good = tmp_path / "good.jsonl"
    good.write_text(USAGE_LINE)
    names = {"bad": str(bad), "good": str(good), "out": str(tmp_path / "out.html")}
    argv = [part.format(**names) for part in command]
    assert main(argv) == 2  # a UnicodeDecodeError traceback, status 1
    out = capsys.readouterr().err
    assert "usage.png" in out
    assert "UTF-8" in out


def test_a_drill_picture_into_a_missing_folder_is_refused_before_the_drill(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = tmp_path / "missing" / "timeline.png"
    argv = ["drill", "--no-local", "--before", "0.1", "--outage", "0.1", "--after", "0.1"]
    assert main([*argv, "--png", str(picture)]) == 2  # a traceback once the drill had run
    assert "timeline.png" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--png", "timeline.png"], ["--no-local"]])
def test_a_config_drill_refuses_the_options_it_would_ignore(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    config = tmp_path / "guard.toml"
    config.write_text('[[routes]]\nmodel = "vllm/a"\nbase_url = "http://127.0.0.1:9/v1"\n')
    assert main(["drill", "--config", str(config), *option]) == 2  # no picture, no note
    assert option[0] in capsys.readouterr().err


def test_a_drill_without_config_refuses_primary(capsys: pytest.CaptureFixture[str]) -> None:
    """``--primary`` names a route of ``--config``'s file: without one it was ignored and the
    built-in drill ran (for seconds) on its own primary, as if the named route were drilled."""
    argv = ["drill", "--no-local", "--before", "0.1", "--outage", "0.1", "--after", "0.1"]
    assert main([*argv, "--primary", "openai"]) == 2
    captured = capsys.readouterr()
    assert "--primary: only with --config" in captured.err
    assert captured.out == ""  # refused before the drill ran


def test_errors_go_to_stderr_so_json_output_stays_json(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llmguard check guard.toml --json | jq`` read the error line as its JSON."""
    (tmp_path / "empty.jsonl").write_text("")
    for argv, status in (
        (["check", str(tmp_path / "missing.toml"), "--json"], 2),
        (["cost", "report", str(tmp_path / "empty.jsonl"), "--json"], 1),
        (["budget", "status", "--store", "redis://127.0.0.1:1/0", "--json"], 1),
        (["release", "status", "bot", "--store", "redis://127.0.0.1:1/0", "--json"], 1),
    ):
        assert main(argv) == status
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("llmguard ")
        assert captured.err.count("\n") == 1  # one line


@pytest.mark.parametrize("threshold", ["5", "60", "-0.1"])
def test_eval_refuses_an_overlap_threshold_that_is_no_share(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], threshold: str
) -> None:
    """Word overlap is a share from 0 to 1: ``--threshold 60`` (meant as 60 %) made every
    replayed answer disagree, and the report said so, status 0."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    argv = ["eval", str(samples), "--base-url", "http://127.0.0.1:9/v1", "--threshold", threshold]
    assert main(argv) == 2
    assert "threshold" in capsys.readouterr().err


def test_cost_models_matches_names_of_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    """The match was lowered and the names were not: a mixed-case name (genai-prices has
    ``avian/Meta-Llama-3.1-405B-Instruct`` ...) was found by no match that has a letter."""
    from llmguard_sdk.budget.prices import PriceTable

    genai_prices_or_skip()  # the shipped table's names are all lowercase
    name = next(m for m in PriceTable.default_table().models() if m != m.lower())
    for match in (name, name.lower(), name.upper()):
        assert main(["cost", "models", match, "--json"]) == 0
        assert name in json.loads(capsys.readouterr().out)["models"]


def test_a_bad_price_table_file_is_named_in_the_error(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``a price table is an object with a 'prices' list`` said what, not which file."""
    bad = tmp_path / "my-prices.json"
    bad.write_text('{"models": 5}')
    argv = ["cost", "estimate", "--requests-per-day", "10", "--input-tokens", "5"]
    argv += ["--output-tokens", "5", "--model", "gpt-4o", "--prices", str(bad)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--prices {bad}: " in err
    assert err.count(str(bad)) == 1


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``llmguard cost models | head``: the pipe closes before the table is written; the
    command printed a BrokenPipeError traceback (and another at exit)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "llmguard_sdk.cli", "cost", "models"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # before the command has imported itself: nobody reads
    with process.stderr:  # (closed afterwards: a ResourceWarning otherwise)
        errors = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1
    assert "Traceback" not in errors
    assert "BrokenPipeError" not in errors


@pytest.mark.parametrize("command", [["release", "status", "k"], ["budget", "status"]])
@pytest.mark.parametrize("store", ["memory", "ftp://127.0.0.1:9/0"])
def test_a_store_that_is_no_redis_is_refused_with_the_urls_it_takes(
    capsys: pytest.CaptureFixture[str], command: list[str], store: str
) -> None:
    """The message offered ``memory`` (open_store's), then ``--store memory`` was refused:
    these commands read what the Guards share in Redis, and say so whatever was given."""
    assert main([*command, "--store", store]) == 2
    said = capsys.readouterr().err
    assert "'memory'" not in said.replace(f"got {store!r}", "")  # offered nowhere
    assert "redis://" in said  # what it takes
    assert "redis+cluster://" in said
    assert f"got {store!r}" in said


def _parsers() -> list[tuple[str, Any]]:
    """Every command's (and action's) parser, by its path: ``llmguard cost estimate`` ..."""
    import argparse

    from llmguard_sdk.cli._command import register
    from llmguard_sdk.cli._commands import COMMANDS as _COMMANDS

    root = argparse.ArgumentParser(prog="llmguard")
    commands = root.add_subparsers()
    for command in _COMMANDS:
        register(commands, command)
    found: list[tuple[str, Any]] = []
    waiting: list[tuple[str, Any]] = [("llmguard", root)]
    while waiting:
        path, parser = waiting.pop()
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                waiting += [(f"{path} {n}", p) for n, p in action.choices.items()]
    return found


def test_every_option_with_a_default_says_it_in_its_help() -> None:
    """``--before`` (3 s), ``--prefix`` (llmguard), ``--cache-hit-rate`` (0) ... said no
    default; each default is shown from argparse's own (``%(default)s``), never retyped."""
    import argparse

    missing = []
    for path, parser in _parsers():
        formatter = parser._get_formatter()
        for action in parser._actions:
            default = action.default
            if not action.option_strings or not isinstance(default, (str, int, float)):
                continue  # (positionals; flags, lists and None: no default to say)
            if isinstance(default, bool) or default == argparse.SUPPRESS:  # (-h, --version)
                continue
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            help_text = formatter._expand_help(action)
            if "%(default)" not in (action.help or "") or f"default: {shown})" not in help_text:
                missing.append(f"{path} {action.option_strings[0]}: {help_text!r}")
    assert missing == []
