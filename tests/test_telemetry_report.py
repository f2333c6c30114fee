"""``llmguard report``: the HTML page has every plot, and a real headless Chromium (Debian's
package, see tools/chromium.py) lays it out with every plot drawn; a real Guard's usage file
is accepted as it is."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable, UsageRecorder, read_usage
from llmguard_sdk.cli import main
from llmguard_sdk.telemetry.report import PLOTS, render_report, write_report
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import require

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import chromium

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


def six_hours(seed: int = 1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Usage records of 2,000 calls over six hours (the primary failing for half an hour) and
    60 sampled calls with a thumb each, in the files' formats."""
    rng = random.Random(seed)
    start = time.time() - 6 * 3600
    records = []
    for number in range(2000):
        at = start + number * 10.8
        route = rng.choice(["primary", "primary", "backup", "cache"])
        outage = route == "primary" and 7200 < at - start < 9000 and rng.random() < 0.7
        records.append(
            {
                "ts": at,
                "kind": "chat",
                "outcome": "error" if outage else "ok",
                "tenant": rng.choice(["acme", "globex", "initech"]),
                "feature": rng.choice(["faq", "search", "summary"]),
                "route": route,
                "model": "fake-model",
                "cost_usd": 0.0 if route == "cache" else rng.uniform(0.0005, 0.002),
                "latency_s": 0.002 if route == "cache" else rng.lognormvariate(-1, 0.5),
            }
        )
    samples = [
        {
            "ts": start + n * 300,
            "feedback": [{"score": rng.choice([0, 1, 1, 1]), "label": "thumbs"}],
        }
        for n in range(60)
    ]
    return records, samples


def test_the_page_has_every_plot_with_marks() -> None:
    page = render_report(*six_hours())
    for name in PLOTS:
        figure = page.split(f'data-plot="{name}"', 1)[1].split("</figure>", 1)[0]
        assert 'class="mark"' in figure, name
    assert "2,000 calls" in page
    assert "no data" not in page
    empty = render_report([])
    assert empty.count("no data") == len(PLOTS)


def test_odd_records_are_left_out_or_read_as_text_not_a_crash() -> None:
    """A usage line edited by hand (a route that is a list, a time of ``Infinity`` or
    ``true``) raised ``TypeError`` out of ``llmguard report`` or drew no page."""
    records, samples = six_hours()
    odd = [
        {"ts": records[0]["ts"], "outcome": "error", "route": ["primary"], "cost_usd": 1},
        {"ts": records[0]["ts"], "outcome": "ok", "route": {"a": 1}, "latency_s": 0.1},
        {"ts": float("inf"), "outcome": "ok", "route": "primary"},
        {"ts": float("nan"), "outcome": "ok", "route": "primary"},
        {"ts": True, "outcome": "ok", "route": "primary"},
    ]
    page = render_report(records + odd, samples)
    assert "2,002 calls" in page  # the two with a time; their routes read as text
    for name in PLOTS:
        figure = page.split(f'data-plot="{name}"', 1)[1].split("</figure>", 1)[0]
        assert 'class="mark"' in figure, name
        assert not re.search(r"[\s\"=,(:]-?(nan|inf)\b", figure.lower()), name


def test_a_latency_that_is_no_finite_number_is_left_out() -> None:
    """``"latency_s": Infinity`` (JSON reads it) raised ``OverflowError`` out of the latency
    plot; NaN and ``true`` were counted as latencies."""
    records, _ = six_hours()
    start = records[0]["ts"]
    odd = [
        {"ts": start, "outcome": "ok", "route": "primary", "latency_s": value}
        for value in (float("inf"), float("nan"), True, -1.0)
    ]
    page = render_report(records + odd)
    expected = render_report(records + [{**r, "latency_s": None} for r in odd])
    plot = 'data-plot="latency-by-route"'
    assert (
        page.split(plot)[1].split("</figure>")[0] == expected.split(plot)[1].split("</figure>")[0]
    )
    alone = [{"ts": start, "outcome": "ok", "route": "r", "latency_s": float("inf")}]
    assert 'data-plot="latency-by-route"' in render_report(alone)  # (OverflowError)
    scored = [{"ts": start, "feedback": [{"score": float("inf")}, {"score": 1}]}]
    assert 'data-plot="feedback"' in render_report(records, scored)  # (OverflowError)


def test_a_real_guards_usage_file_makes_a_report(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    usage = tmp_path / "usage.jsonl"
    provider = OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary")
    with Guard(provider, hooks=[UsageRecorder(usage)], prices=PRICES, environ={}) as guard:
        for number in range(5):
            guard.chat([{"role": "user", "content": f"question {number}"}], feature="faq")
    out = tmp_path / "report.html"
    assert main(["report", str(usage), "--html", str(out)]) == 0
    page = out.read_text()
    assert "5 calls" in page
    cost = page.split('data-plot="cost-by-feature"', 1)[1].split("</figure>", 1)[0]
    assert 'class="mark"' in cost
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["report", str(tmp_path / "empty.jsonl"), "--html", str(out)]) == 1
    capsys.readouterr()
    assert main(["report", str(tmp_path / "missing.jsonl"), "--html", str(out)]) == 2
    assert capsys.readouterr().err.startswith("llmguard report: cannot read usage file")


def test_a_route_that_failed_before_the_backup_answered_is_counted_against_it(
    tmp_path: Path, fake: FakeProvider, fake2: FakeProvider
) -> None:
    """The usage file named only the route that answered: a primary failing every call
    (each answered by the backup) never showed in "Failed calls by route"."""
    usage = tmp_path / "usage.jsonl"
    fake.always(Fault(status=503))
    routes = [
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        OpenAICompatibleProvider(fake2.base_url, model="fake-model", name="backup"),
    ]
    hooks = [UsageRecorder(usage)]
    with Guard(routes, hooks=hooks, retry=None, breaker=None, environ={}) as guard:
        for number in range(4):
            assert guard.chat([{"role": "user", "content": f"q {number}"}]).route == "backup"
    records = list(read_usage(usage))
    assert [r["route_errors"] for r in records] == [{"primary": "ProviderUnavailableError"}] * 4
    page = render_report(records)
    failures = page.split('data-plot="failures-by-route"', 1)[1].split("</figure>", 1)[0]
    assert "primary" in failures
    assert "backup" in failures


def _browser() -> str:
    found = chromium.find()
    why = chromium.MISSING.read_text() if chromium.MISSING.exists() else "run tools/chromium.py"
    require(found, f"no headless Chromium: {why}")
    assert found is not None
    return found


def _chromium(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=90, check=False
    )


def test_headless_chromium_draws_every_plot(tmp_path: Path) -> None:
    browser = _browser()
    records, samples = six_hours()
    page = tmp_path / "report.html"
    page.write_text(render_report(records, samples))
    dom = _chromium(browser, "--virtual-time-budget=3000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-500:]
    assert f'data-rendered="{len(PLOTS)}"' in dom.stdout  # every figure's marks have a size
    for name in PLOTS:
        assert f'data-plot="{name}" data-rendered="yes"' in dom.stdout, name
    picture = Path(os.environ.get("LLMGUARD_REPORT_SCREENSHOT") or tmp_path / "report.png")
    shot = _chromium(browser, "--window-size=1000,2300", f"--screenshot={picture}", page.as_uri())
    assert shot.returncode == 0, shot.stderr[-500:]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size > 50_000  # text and six plots, not a blank page


@pytest.mark.parametrize("missing", ["LLMGUARD_CHROMIUM"])
def test_the_finder_honours_a_given_binary(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(missing, "/nonexistent/chromium")
    assert chromium.find() is None


@pytest.mark.parametrize(
    ("text", "line"),
    [("tenant,feature,cost\nacme,faq,0.1\n", 1), ('{\n  "outcome": "ok"\n}\n', 1)],
)
def test_write_report_refuses_a_file_that_is_not_json_lines(
    tmp_path: Path, text: str, line: int
) -> None:
    """``write_report`` wrote a page of 0 calls for a CSV export; only ``llmguard report``
    refused it. It raises what the command says, and writes nothing."""
    usage, page = tmp_path / "usage.csv", tmp_path / "report.html"
    usage.write_text(text, encoding="utf-8")
    said = f"{usage} is not JSON Lines: line {line} is not JSON"
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        write_report(usage, page)
    assert not page.exists()


def test_write_report_of_json_lines_without_usage_writes_a_page_of_no_calls(
    tmp_path: Path,
) -> None:
    usage, page = tmp_path / "samples.jsonl", tmp_path / "report.html"
    usage.write_text('{"prompt": "hi"}\n', encoding="utf-8")
    assert write_report(usage, page) == 0
    assert "0 calls" in page.read_text(encoding="utf-8")
