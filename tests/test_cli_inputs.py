"""The ``llmguard`` command given what a new user gives it: a Ctrl-C, a misspelled model, a
p95 below its p50, the wrong file, a word where a number goes. Each is one line that says what
to fix, with the exit status a script can trust."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llmguard_sdk.cli import main

from .test_cli import run_python

SAMPLE = {
    "type": "call",
    "call_id": "a",
    "request": {"messages": [{"role": "user", "content": "hi"}]},
    "answer": "hello",
}
USAGE = {"ts": 1.0, "outcome": "ok", "tenant": "acme", "route": "r", "cost_usd": 0.01}
ESTIMATE = ["cost", "estimate", "--requests-per-day", "100"]


def test_a_ctrl_c_ends_a_running_command_with_one_line_and_status_130(tmp_path: Path) -> None:
    """A Ctrl-C during ``llmguard eval`` (or a drill, a calibration) printed a traceback of
    the event loop's insides, KeyboardInterrupt last, and ended by the signal."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps(SAMPLE) + "\n")
    with socket.create_server(("127.0.0.1", 0)) as server:  # accepts, never answers
        server.settimeout(60)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
        argv = ["eval", str(samples), "--base-url", url, "--model", "m"]
        code = (  # Ctrl-C's handler, whatever the test runner left SIGINT at
            "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"from llmguard_sdk.cli import main; sys.exit(main({argv!r}))"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            connection, _ = server.accept()  # the command is replaying: interrupt it
            with connection:
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=30)
        finally:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "llmguard eval: interrupted"
    assert out == ""


_PRESSED_WHILE_LOADING = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)

class Press:  # a finder that finds nothing: it presses Ctrl-C as the module is looked for
    def find_spec(self, name, path=None, target=None):
        if name == {pressed!r}:
            signal.raise_signal(signal.SIGINT)

sys.meta_path.insert(0, Press())
from llmguard_sdk.cli import main  # (as the console script starts)
sys.exit(main(["cost", "models", "gpt-4o"]))
"""


def test_a_ctrl_c_while_the_commands_modules_load_is_one_line_and_status_130() -> None:
    """A Ctrl-C as ``from llmguard_sdk.cli import main`` imported the commands' modules (a
    Guard, its providers, the caches: the slow part of a start) printed a traceback. The
    signal is a real SIGINT, raised as the demo's module is looked for."""
    done = run_python(_PRESSED_WHILE_LOADING.format(pressed="llmguard_sdk.cli._demo"))
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "llmguard: interrupted\n"
    assert done.stdout == ""


def test_a_ctrl_c_while_the_package_loads_is_one_line_and_status_130() -> None:
    """The console script imports ``llmguard_sdk.cli``, and with it the package: which
    imported the Guard and all the rest before any of the command's code ran, so a Ctrl-C
    then printed a traceback. The package imports its modules at their first use now: the
    Guard's module is imported inside the command, where a Ctrl-C is caught."""
    done = run_python(_PRESSED_WHILE_LOADING.format(pressed="llmguard_sdk.guard"))
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "llmguard: interrupted\n"
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("given", "named", "meant"),
    [
        (["--model", "gpt-4o-mni"], "--model", "openai/gpt-4o-mini"),
        (["--split", "gpt-4o-mini=70,gpt-4o-mni=30"], "--split", "openai/gpt-4o-mini"),
    ],
)
def test_a_model_without_a_price_is_said_in_the_commands_words(
    capsys: pytest.CaptureFixture[str], given: list[str], named: str, meant: str
) -> None:
    """It said to call ``PriceTable.with_prices(...)``: Python, to a shell user, and nothing
    of the model meant."""
    argv = [*ESTIMATE, "--input-tokens", "900", "--output-tokens", "250", *given]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmguard cost estimate: {named}: no price for model 'gpt-4o-mni'")
    assert f"did you mean {meant}?" in err
    assert "llmguard cost models" in err
    assert "--prices" in err
    assert "PriceTable" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("kind", ["input", "output"])
def test_a_p95_below_its_p50_is_refused(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """``--input-tokens 900 --input-tokens-p95 100`` priced the month's p95 under its p50
    ($4.95 against $8.55), status 0."""
    tokens = {"input": "900", "output": "250"}
    argv = [*ESTIMATE, "--model", "gpt-4o-mini"]
    argv += [arg for k, n in tokens.items() for arg in (f"--{k}-tokens", n)]
    assert main([*argv, f"--{kind}-tokens-p95", "100"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"--{kind}-tokens-p95 100 is below --{kind}-tokens {tokens[kind]}" in captured.err


def test_a_report_of_a_file_without_usage_records_writes_no_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An EvalSink file given for the usage file: ``cost report`` says it holds no usage
    record; ``report`` wrote (over the last good page) a page of 0 calls, "wrote ...: 0 calls"."""
    samples, page = tmp_path / "eval.jsonl", tmp_path / "report.html"
    samples.write_text(json.dumps(SAMPLE) + "\n")
    page.write_text("last week's page")
    assert main(["report", str(samples), "--html", str(page)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"llmguard report: no usage records in {samples}\n"
    assert captured.out == ""
    assert page.read_text() == "last week's page"


@pytest.mark.parametrize("text", [json.dumps(USAGE) + "\n", "tenant,score\nacme,1\n"])
def test_a_samples_file_without_samples_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """``--samples usage.jsonl`` (or a CSV) was read as no sample: the page came out without
    feedback scores, status 0, as if none had been given."""
    usage, samples, page = tmp_path / "usage.jsonl", tmp_path / "other.jsonl", tmp_path / "r.html"
    usage.write_text(json.dumps(USAGE) + "\n")
    samples.write_text(text)
    assert main(["report", str(usage), "--html", str(page), "--samples", str(samples)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmguard report: --samples {samples}: no EvalSink samples in it")
    assert not page.exists()
    samples.write_text("")  # a sink that sampled no call yet: no feedback to draw, no mistake
    assert main(["report", str(usage), "--html", str(page), "--samples", str(samples)]) == 0


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([*ESTIMATE[:2], "--requests-per-day", "lots"], "--requests-per-day: not a number: 'lots'"),
        ([*ESTIMATE, "--cache-hit-rate", "high"], "--cache-hit-rate: not a number: 'high'"),
        (["demo", "--requests", "many"], "--requests: not a whole number: 'many'"),
        (["eval", "f", "--base-url", "http://h/v1", "--threshold", "x"], "not a number: 'x'"),
        (["eval", "f", "--base-url", "http://h/v1", "--timeout", "0"], "--timeout: must be a pos"),
    ],
)
def test_a_bad_number_is_said_without_the_parsers_function_names(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """argparse named the type function: ``invalid _positive value: 'lots'``, ``invalid
    positive_int value``; ``eval --timeout 0`` said ``argument timeout=`` (the Guard's)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert said in err
    assert "invalid" not in err.splitlines()[-1]


@pytest.mark.parametrize(
    ("cost", "said"),
    [
        (-5.0, "a negative cost_usd (-5.0)"),
        (math.nan, "a non-finite cost_usd (nan)"),
        (math.inf, "a non-finite cost_usd (inf)"),
    ],
)
def test_cost_report_refuses_a_negative_or_non_finite_cost(
    cost: float, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record of ``cost_usd: -5`` was summed: the report's total went down by $5; one of
    ``NaN`` (which Python's json reads) made the total NaN."""
    usage = tmp_path / "usage.jsonl"
    usage.write_text(json.dumps(USAGE) + "\n" + json.dumps({**USAGE, "cost_usd": cost}) + "\n")
    assert main(["cost", "report", str(usage)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"llmguard cost report: {usage}: usage record 2 has {said}; a "
        "UsageRecorder never writes one\n"
    )


@pytest.mark.parametrize("split", ["gpt-4o-mini=70,gpt-4o=20", "gpt-4o-mini=0.5,gpt-4o=0.2"])
def test_cost_estimate_refuses_a_split_that_does_not_add_up(
    split: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--split gpt-4o-mini=70,gpt-4o=20`` was priced as 78 % / 22 %, silently."""
    argv = [*ESTIMATE, "--input-tokens", "900", "--output-tokens", "250", "--split", split]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "shares must add up to 100 (percentages) or 1 (fractions)" in capsys.readouterr().err


@pytest.mark.parametrize("split", ["gpt-4o-mini=70,gpt-4o=30", "gpt-4o-mini=0.7,gpt-4o=0.3"])
def test_cost_estimate_takes_a_split_in_percentages_or_fractions(
    split: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*ESTIMATE, "--input-tokens", "900", "--output-tokens", "250", "--split", split]
    assert main([*argv, "--json"]) == 0
    names = [option["name"] for option in json.loads(capsys.readouterr().out)["options"]]
    assert names == ["70% gpt-4o-mini / 30% gpt-4o"]


@pytest.mark.parametrize(
    "argv",
    [
        ["budget", "status"],
        ["cache", "clear", "--namespace", "n"],
        ["release", "status", "k"],
    ],
)
def test_each_command_names_itself_whole_in_its_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``llmguard budget status`` said ``llmguard budget:``, ``cache clear`` said ``llmguard
    cache:``, ``release status`` said ``llmguard release:``: every other command's errors name
    the command as it was typed."""
    with socket.create_server(("127.0.0.1", 0)) as server:  # a port nothing answers on
        port = server.getsockname()[1]
    store = ["--store", f"redis://127.0.0.1:{port}/0"]
    assert main([*argv, *store]) == 1
    assert capsys.readouterr().err.startswith(f"llmguard {' '.join(argv[:2])}: ")
