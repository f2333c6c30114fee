"""An HTML report people look at: ``llmguard report usage.jsonl --html out.html``.

It reads a :class:`~llmguard_sdk.budget.UsageRecorder` file (one line per call) and, with
``--samples``, an :class:`~llmguard_sdk.telemetry.sampling.EvalSink` file (feedback scores),
and writes one self-contained page (inline SVG, no script from elsewhere) with:

* cost per feature over time, and per tenant (the 7 largest, the rest as ``other``);
* the cache hit rate over time (answers served from the response cache);
* latency p50 / p95 / p99 by route;
* failed calls per route over time (what trips the breakers);
* feedback scores over time and by label.

Every plot is a ``<figure class="plot">``; once the page is laid out it marks each figure
whose marks have a size ``data-rendered="yes"`` and ``<body data-rendered="N">`` (what the
headless-browser test reads).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import html
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from .._route_names import CACHE
from ..errors import ConfigurationError
from ._svg import bar_chart, line_chart

__all__ = ["PLOTS", "render_report", "write_report"]

PLOTS = (
    "cost-by-feature",
    "cost-by-tenant",
    "cache-hit-rate",
    "latency-by-route",
    "failures-by-route",
    "feedback",
)
"""The report's plots, in page order: each is a ``<figure data-plot="NAME">``."""
_BUCKETS = (60, 300, 900, 3600, 6 * 3600, 86_400)
_TOP = 7
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d1d1f;max-width:960px}
h1{font-size:22px}h2{font-size:16px;margin:28px 0 6px}
table{border-collapse:collapse}td,th{padding:3px 12px;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}
.area{fill:#fafafa;stroke:#ccc}.grid{stroke:#e6e6e6}.tick,.legend{font-size:11px;fill:#555}
polyline.mark{stroke-width:2}figure{margin:0}figcaption{color:#555;font-size:12px}
"""
_CHECK = """
addEventListener("load", () => {
  let rendered = 0;
  for (const figure of document.querySelectorAll("figure.plot")) {
    let size = 0;
    for (const mark of figure.querySelectorAll(".mark")) {
      const box = mark.getBoundingClientRect();
      size += box.width + box.height;
    }
    if (size > 0) { figure.dataset.rendered = "yes"; rendered += 1; }
  }
  document.body.dataset.rendered = String(rendered);
});
"""


def _bucket(records: list[dict[str, Any]]) -> int:
    times = [r["ts"] for r in records]
    span = max(times) - min(times) if times else 0
    return next((b for b in _BUCKETS if span / b <= 60), _BUCKETS[-1])


def _top(records: list[dict[str, Any]], field: str) -> set[str]:
    spend: dict[str, float] = defaultdict(float)
    for record in records:
        spend[str(record.get(field) or "-")] += _cost(record)
    return set(sorted(spend, key=lambda name: -spend[name])[:_TOP])


def _cost(record: Mapping[str, Any]) -> float:
    value = record.get("cost_usd")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def _cost_series(records: list[dict[str, Any]], field: str, width: int) -> dict[str, Any]:
    kept = _top(records, field)
    sums: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for record in records:
        name = str(record.get(field) or "-")
        start = record["ts"] // width * width
        sums[name if name in kept else "other"][start] += _cost(record)
    return {name: sorted(points.items()) for name, points in sorted(sums.items())}


_Counts = dict[str, dict[float, list[int]]]  # per series, per bucket: [counted, of how many]


def _counts() -> _Counts:
    return defaultdict(lambda: defaultdict(lambda: [0, 0]))


def _shares(counts: _Counts) -> dict[str, Any]:
    """Each series' points: per bucket, the share (%) counted."""
    return {
        name: sorted((start, 100.0 * done / total) for start, (done, total) in cells.items())
        for name, cells in sorted(counts.items())
    }


def _rate_series(records: list[dict[str, Any]], width: int, hit: Any) -> dict[str, Any]:
    """The share of calls per bucket for which ``hit`` holds."""
    counts = _counts()
    for record in records:
        cell = counts["all"][record["ts"] // width * width]
        cell[0] += bool(hit(record))
        cell[1] += 1
    return _shares(counts)


def _failure_series(records: list[dict[str, Any]], width: int) -> dict[str, Any]:
    """Per route, the share of its attempts per bucket that failed: the routes of a call's
    ``route_errors`` failed, the route that answered did not (a record without
    ``route_errors``, from before they were written: a failed call counts against its
    ``route``, or ``-``)."""
    counts = _counts()
    for record in records:
        bucket = record["ts"] // width * width
        errors = record.get("route_errors")
        if not isinstance(errors, dict):  # an older record
            errors = {record.get("route") or "-": ""} if record.get("outcome") == "error" else {}
        for route in errors:
            cell = counts[str(route)][bucket]
            cell[0] += 1
            cell[1] += 1
        served = record.get("route")
        if served and served not in errors:
            counts[str(served)][bucket][1] += 1
    return _shares(counts)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _latency_groups(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by_route: dict[str, list[float]] = defaultdict(list)
    for record in records:
        latency = record.get("latency_s")
        if _seconds(latency) and record.get("route"):
            by_route[str(record["route"])].append(float(latency) * 1000)
    return {
        route: {f"p{int(s * 100)}": _percentile(v, s) for s in (0.5, 0.95, 0.99)}
        for route, v in sorted(by_route.items())
    }


def _feedback(samples: list[dict[str, Any]], width: int) -> tuple[dict[str, Any], Counter[str]]:
    means: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    labels: Counter[str] = Counter()
    for sample in samples:
        for given in sample.get("feedback", []):
            score = given.get("score")
            if (
                isinstance(score, int | float)
                and not isinstance(score, bool)
                and math.isfinite(score)
            ):
                label = str(given.get("label") or "score")
                means[label][sample["ts"] // width * width].append(float(score))
                labels[label] += 1
    series = {
        label: sorted((start, sum(v) / len(v)) for start, v in cells.items())
        for label, cells in sorted(means.items())
    }
    return series, labels


def _seconds(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a latency: a finite number >= 0 (``Infinity`` broke the plot)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf


def _timed(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` has a time to plot it at (a finite number; ``true`` is none)."""
    ts = record.get("ts")
    return isinstance(ts, int | float) and not isinstance(ts, bool) and math.isfinite(ts)


def _readable(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with a ``route`` that is no string (a list, in a line edited by hand) as
    text: routes are keys of the series."""
    route = record.get("route")
    return record if route is None or isinstance(route, str) else {**record, "route": str(route)}


def _figure(name: str, title: str, chart: str, caption: str = "") -> str:
    note = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return (
        f'<figure class="plot" data-plot="{name}"><h2>{html.escape(title)}</h2>'
        f"{chart}{note}</figure>"
    )


def _usd(value: float) -> str:
    return f"${value:.4g}"


def _share(value: float) -> str:
    return f"{value:.0f}%"


def _summary(records: list[dict[str, Any]]) -> str:
    calls = len(records)
    ok = sum(1 for r in records if r.get("outcome") == "ok")
    hits = sum(1 for r in records if r.get("route") == CACHE)
    cost = sum(_cost(r) for r in records)
    rows = [
        ("calls", f"{calls:,}"),
        ("answered", f"{ok:,} ({ok / calls:.1%})" if calls else "0"),
        ("served from the cache", f"{hits:,} ({hits / calls:.1%})" if calls else "0"),
        ("cost (USD)", f"{cost:,.4f}"),
    ]
    body = "".join(f"<tr><td>{k}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary">{body}</table>'


def render_report(
    usage: Iterable[dict[str, Any]],
    samples: Iterable[dict[str, Any]] = (),
    *,
    title: str = "llmguard usage report",
) -> str:
    """The report page for ``usage`` records (and the ``samples`` with their feedback)."""
    records = [_readable(r) for r in usage if _timed(r)]  # a line edited by hand: left out,
    scored = [s for s in samples if _timed(s)]  # or its route read as text
    width = _bucket(records + scored)
    per = f"per {width // 60} min" if width < 3600 else f"per {width // 3600} h"
    feedback, labels = _feedback(scored, width)
    hits = _rate_series(records, width, lambda r: r.get("route") == CACHE)
    routed = [r for r in records if r.get("route") != CACHE]
    failed = _failure_series(routed, width)
    given = ", ".join(f"{k}: {n}" for k, n in labels.most_common()) or "no feedback given"
    figures = [
        _figure(
            "cost-by-feature",
            f"Cost by feature ({per})",
            line_chart("cost", _cost_series(records, "feature", width), y_fmt=_usd),
        ),
        _figure(
            "cost-by-tenant",
            f"Cost by tenant ({per})",
            line_chart("cost", _cost_series(records, "tenant", width), y_fmt=_usd),
        ),
        _figure(
            "cache-hit-rate",
            f"Cache hit rate ({per})",
            line_chart("hits", hits, y_fmt=_share, y_max=100.0),
        ),
        _figure(
            "latency-by-route",
            "Latency by route (ms)",
            bar_chart("latency", _latency_groups(records), y_fmt=lambda v: f"{v:.0f}"),
        ),
        _figure(
            "failures-by-route",
            f"Failed calls by route ({per})",
            line_chart("failed", failed, y_fmt=_share, y_max=100.0),
            "The share of each route's attempts that failed: what opens its breaker.",
        ),
        _figure(
            "feedback",
            f"Feedback scores ({per}, mean)",
            line_chart("feedback", feedback),
            given,
        ),
    ]
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{_CHECK}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{len(records):,} calls, generated {generated}</p>"
        f"{_summary(records)}{''.join(figures)}</body></html>"
    )


def write_report(
    usage_path: str | Path, html_path: str | Path, samples_path: str | Path | None = None
) -> int:
    """Write the report of a usage file (and a samples file) to ``html_path``; returns the
    number of calls it covers.

    Raises:
        ConfigurationError: a file cannot be read, or the usage file is not JSON Lines (a CSV
            export, one JSON object over many lines: the message names its first line that is
            not JSON, as ``llmguard report`` says); nothing is written then. A JSON Lines file
            without usage records writes a page of 0 calls.
    """
    from ..budget._usage_file import not_json_lines
    from ..budget.recorder import read_usage

    records = list(read_usage(usage_path))
    said = None if records else not_json_lines(str(usage_path))
    if said is not None:  # (a page of 0 calls was written)
        raise ConfigurationError(said)
    return _write_page(records, html_path, samples_path)


def _write_page(
    records: list[dict[str, Any]], html_path: str | Path, samples_path: str | Path | None
) -> int:
    """Write the report of the usage ``records`` read already (and of a samples file) to
    ``html_path``; returns the number of calls it covers."""
    from .sampling import read_samples

    samples = read_samples(samples_path) if samples_path else []
    Path(html_path).write_text(render_report(records, samples), encoding="utf-8")
    return len(records)
