"""The ``llmguard`` command given what a new user gives it: a Ctrl-C, a misspelled model, a
p95 below its p50, the wrong file, a word where a number goes. Each is one line that says what
to fix, with the exit status a script can trust."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmguard_sdk.cli import main

SAMPLE = {
    "type": "call",
    "call_id": "a",
    "request": {"messages": [{"role": "user", "content": "hi"}]},
    "answer": "hello",
}
USAGE = {"ts": 1.0, "outcome": "ok", "tenant": "acme", "route": "r", "cost_usd": 0.01}


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
