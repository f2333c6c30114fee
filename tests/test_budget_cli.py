"""``llmguard cost estimate`` / ``report`` and the usage recorder behind the report."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable, UsageRecorder, read_usage
from llmguard_sdk.budget.estimate import estimate
from llmguard_sdk.cli import main
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, genai_prices_or_skip
from .test_budget_guard import CALL_USD, PRICES, MakeGuard


def test_estimate_follows_the_formula(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "cost",
            "estimate",
            "--requests-per-day",
            "10000",
            "--input-tokens",
            "800",
            "--input-tokens-p95",
            "2500",
            "--output-tokens",
            "200",
            "--model",
            "gpt-4o-mini",
            "--split",
            "gpt-4o-mini=70,gpt-4o=30",
            "--cache-hit-rate",
            "20%",
            "--retry-rate",
            "0.05",
            "--json",
        ]
    )
    assert code == 0
    options = {o["name"]: o for o in json.loads(capsys.readouterr().out)["options"]}
    mini = PriceTable.default_table().price("gpt-4o-mini")
    big = PriceTable.default_table().price("gpt-4o")
    per_call = (800 * mini.input + 200 * mini.output) / 1e6
    billed = 10_000 * 30 * 0.8 * 1.05  # requests x days, cache hits free, retries billed
    assert options["gpt-4o-mini"]["monthly_p50_usd"] == pytest.approx(billed * per_call)
    p95 = (2500 * mini.input + 200 * mini.output) / 1e6
    assert options["gpt-4o-mini"]["monthly_p95_usd"] == pytest.approx(billed * p95)
    split = 0.7 * per_call + 0.3 * (800 * big.input + 200 * big.output) / 1e6
    assert options["70% gpt-4o-mini / 30% gpt-4o"]["per_request_p50_usd"] == pytest.approx(split)


def test_cached_input_is_priced_at_the_cached_rate() -> None:
    table = PriceTable({"m": Price(input=10, output=0, cached_input=1)})
    (option,) = estimate(
        table,
        requests_per_day=1,
        input_tokens=(1_000_000, 1_000_000),
        output_tokens=(0, 0),
        options=[("m", {"m": 1.0})],
        cached_input_share=0.5,
        days=1,
    )
    assert option.monthly_p50_usd == pytest.approx(5 + 0.5)


def test_a_daily_forecast_uses_the_dearest_price_of_the_day() -> None:
    """Made off-peak (20:00 UTC), a DeepSeek forecast still prices its calls at the peak
    price (00:30-16:30 UTC): the forecast does not depend on the hour it is made at."""
    genai_prices_or_skip()
    table = PriceTable.default_table()
    evening = dt.datetime(2026, 10, 1, 20, tzinfo=dt.timezone.utc)
    peak = table.price("deepseek-chat", provider="deepseek", at=evening.replace(hour=8))
    off = table.price("deepseek-chat", provider="deepseek", at=evening)
    assert peak.input > off.input  # genai-prices lists the time-of-day window
    found = {
        at: estimate(
            table,
            requests_per_day=1,
            input_tokens=(1_000_000, 1_000_000),
            output_tokens=(1_000_000, 1_000_000),
            options=[("deepseek/deepseek-chat", {"deepseek/deepseek-chat": 1.0})],
            days=1,
            at=at,
        )[0].monthly_p50_usd
        for at in (evening, evening.replace(hour=8), evening.date())
    }
    assert list(found.values()) == [pytest.approx(peak.input + peak.output)] * 3


def test_estimate_errors_are_clear(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["cost", "estimate", "--requests-per-day", "1", "--input-tokens", "1"]
    assert main([*args, "--output-tokens", "1", "--model", "no-such-model"]) == 2
    assert "no price for model" in capsys.readouterr().err
    assert main([*args, "--output-tokens", "1"]) == 2
    with pytest.raises(SystemExit):
        main([*args, "--output-tokens", "1", "--split", "a=x"])


def test_recorded_usage_reports_cost_per_tenant_feature_and_success(
    tmp_path: Path, make_guard: MakeGuard, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "usage.jsonl"
    with FakeProvider(model="fake-model", name="primary") as api:
        guard = make_guard(
            api,
            hooks=[UsageRecorder(path)],
            budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES),
        )
        for _ in range(3):
            guard.chat(USER, max_tokens=10, tenant="acme", feature="faq")
        guard.chat(USER, max_tokens=10, tenant="zeta", feature="search")
        api.script(Fault(status=400))
        with pytest.raises(Exception):  # noqa: B017, PT011
            guard.chat(USER, max_tokens=10, tenant="acme", feature="faq")
    records = list(read_usage(path))
    assert len(records) == 5
    assert records[0]["cost_source"] == "estimated"
    assert records[0]["cost_usd"] == pytest.approx(CALL_USD)
    with path.open("a") as out:
        out.write("not json\n")
    assert main(["cost", "report", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    acme = next(g for g in report["groups"] if g["tenant"] == "acme")
    assert (acme["calls"], acme["ok"]) == (4, 3)
    assert acme["cost_usd"] == pytest.approx(3 * CALL_USD)
    assert acme["cost_per_success_usd"] == pytest.approx(CALL_USD)
    assert report["total"]["calls"] == 5
    assert main(["cost", "report", str(path)]) == 0
    assert "acme" in capsys.readouterr().out
    # a file with no usage record in it (not a usage file): exit 1, as llmguard report does
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n[1, 2]\n')
    assert main(["cost", "report", str(tmp_path / "other.jsonl")]) == 1
    assert "no usage records in" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("tenant,feature,cost\nacme,faq,0.1\n", 1),  # a CSV export
        ('{"a": 1}\n\n[1, 2]\n{"outcome": \n', 4),  # JSON, then a line that is not
        ('{\n  "outcome": "ok"\n}\n', 1),  # one JSON object over lines: not JSON Lines
    ],
)
@pytest.mark.parametrize("command", ["cost report", "report"])
def test_a_file_that_is_not_json_lines_is_said_so_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int, command: str
) -> None:
    """``llmguard cost report`` said "no usage records in FILE", as of a JSON Lines file of
    other records; ``llmguard report`` wrote a page of 0 calls. Neither writes anything."""
    path, page = tmp_path / "usage.csv", tmp_path / "report.html"
    path.write_text(text, encoding="utf-8")
    html = ["--html", str(page)] if command == "report" else []
    assert main([*command.split(), str(path), *html]) == 1
    said = capsys.readouterr()
    assert f"llmguard {command}: {path} is not JSON Lines: line {line} is not JSON" in said.err
    assert "no usage records" not in said.err
    assert said.out == ""
    assert not page.exists()


def test_hashed_ids_keep_tenants_out_of_the_file(tmp_path: Path, make_guard: MakeGuard) -> None:
    path = tmp_path / "usage.jsonl"
    with FakeProvider(model="fake-model", name="primary") as api:
        make_guard(api, hooks=[UsageRecorder(path, ids="hashed")]).chat(USER, tenant="acme")
    assert "acme" not in path.read_text()


def test_a_samples_file_given_for_the_usage_file_is_no_usage(
    tmp_path: Path, make_guard: MakeGuard, capsys: pytest.CaptureFixture[str]
) -> None:
    """An EvalSink file is JSON Lines too: its lines were counted as failed calls (status 0,
    "3 calls, 0 ok"), and the HTML report drew them."""
    from llmguard_sdk.telemetry import EvalSink, Telemetry

    samples = tmp_path / "eval.jsonl"
    with FakeProvider(model="fake-model", name="primary") as api:
        telemetry = Telemetry(eval_sink=EvalSink(samples, share=1.0))
        guard = make_guard(api, telemetry=telemetry, prices=PRICES)
        for _ in range(3):
            answer = guard.chat(USER, max_tokens=10, tenant="acme", feature="faq")
        telemetry.feedback(answer.metadata["call_id"], 1.0, label="thumbs")
    assert samples.read_text().count('"type":"call"') == 3
    assert list(read_usage(samples)) == []
    assert main(["cost", "report", str(samples)]) == 1
    assert "no usage records" in capsys.readouterr().err
    assert main(["report", str(samples), "--html", str(tmp_path / "page.html")]) == 1
