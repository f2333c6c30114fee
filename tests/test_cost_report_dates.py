"""``llmguard cost report --since / --until``: the cost of a stretch of time, in UTC.

A usage file grows for months; the report summed all of it, with no way to ask for one
month's bill. ``--since`` takes the calls from an instant on, ``--until`` those before one (a
date alone: through the end of that day), each an ISO date or datetime (UTC unless it gives
its offset); a value that is not one is refused, saying what is taken.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from llmguard_sdk.budget import Budgets, UsageRecorder
from llmguard_sdk.cli import main
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_budget_guard import CALL_USD, PRICES, MakeGuard

UTC = dt.timezone.utc
MOMENTS = [  # when each recorded call was made
    dt.datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC),
    dt.datetime(2026, 11, 1, 0, 0, tzinfo=UTC),
    dt.datetime(2026, 11, 15, 12, 0, tzinfo=UTC),
    dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC),
    dt.datetime(2026, 12, 1, 0, 0, tzinfo=UTC),
]


@pytest.fixture
def usage_file(tmp_path: Path, make_guard: MakeGuard) -> Path:
    """A UsageRecorder file of five calls, one at each of :data:`MOMENTS`."""
    path = tmp_path / "usage.jsonl"
    recorder = UsageRecorder(path)
    with FakeProvider(model="fake-model", name="primary") as api:
        guard = make_guard(api, hooks=[recorder], budgets=Budgets(prices=PRICES))
        for _ in MOMENTS:
            guard.chat(USER, max_tokens=10)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, moment in zip(records, MOMENTS, strict=True):
        record["ts"] = moment.timestamp()
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def _calls(capsys: pytest.CaptureFixture[str], path: Path, *options: str) -> int:
    assert main(["cost", "report", str(path), "--json", *options]) == 0
    report = json.loads(capsys.readouterr().out)
    calls: int = report["total"]["calls"]
    assert report["total"]["cost_usd"] == pytest.approx(calls * CALL_USD)
    return calls


@pytest.mark.parametrize(
    ("options", "calls"),
    [
        ((), 5),
        (("--since", "2026-11-01", "--until", "2026-11-30"), 3),  # November, whole days
        (("--since", "2026-11-15T12:00:00Z"), 3),  # from that instant on
        (("--since", "2026-11-15T13:00+01:00"), 3),  # the same instant
        (("--until", "2026-11-15T12:00"), 2),  # before that instant (UTC)
        (("--until", "2026-11-15 11:59:59"), 2),
        (("--since", "2026-12-01"), 1),
    ],
)
def test_the_report_counts_the_calls_of_the_dates_asked(
    usage_file: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], calls: int
) -> None:
    assert _calls(capsys, usage_file, *options) == calls


@pytest.mark.parametrize("value", ["11/01/2026", "2026-13-01", "yesterday", ""])
@pytest.mark.parametrize("option", ["--since", "--until"])
def test_a_value_that_is_no_iso_date_is_refused(
    usage_file: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cost", "report", str(usage_file), option, value])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert f"argument {option}" in said
    assert "ISO date or datetime" in said
    assert "2026-11-01T12:00" in said  # an example of what is taken


def test_the_text_report_says_its_dates_and_when_they_cover_nothing(
    usage_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", "report", str(usage_file), "--since", "2026-11-01"]) == 0
    out = capsys.readouterr().out
    assert "total: 4 calls" in out
    assert "calls from 2026-11-01T00:00:00+00:00 (UTC)" in out
    assert main(["cost", "report", str(usage_file), "--since", "2026-12-02"]) == 1
    said = capsys.readouterr().err
    assert "no usage records" in said
    assert "5 outside" in said
    assert (
        main(["cost", "report", str(usage_file), "--since", "2026-12-01", "--until", "2026-11-01"])
        == 2
    )
    assert "--since is after --until" in capsys.readouterr().err
    assert main(["cost", "report", str(usage_file), "--since", "2026-11-01T12:00"]) == 0
