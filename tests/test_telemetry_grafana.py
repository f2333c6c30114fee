"""The Grafana dashboard (examples/grafana/llmguard-dashboard.json) queries only metrics the
SDK creates, under the names OpenTelemetry's Prometheus translation gives them, and only
labels they carry; its panels do not overlap."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from llmguard_sdk.telemetry import Telemetry

DASHBOARD = Path(__file__).resolve().parents[1] / "examples" / "grafana" / "llmguard-dashboard.json"
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": ""}


def prometheus_names(name: str, unit: str, kind: str) -> set[str]:
    """The series names of one instrument after OpenTelemetry's Prometheus translation (dots
    to underscores, the unit as a suffix without ``{annotations}``, ``_total`` on counters,
    ``_bucket`` / ``_sum`` / ``_count`` on histograms)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)
    unit = re.sub(r"\{[^}]*\}", "", unit)
    per = ""
    if "/" in unit:
        unit, per = unit.split("/", 1)
    words = [_UNITS.get(unit, unit)] if unit else []
    if per:
        words += ["per", {"s": "second"}.get(per, per)]
    suffix = "_".join(w for w in words if w)
    if suffix and not base.endswith(suffix):
        base = f"{base}_{suffix}"
    if kind == "Counter":
        return {f"{base}_total"}
    if kind == "Histogram":
        return {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
    return {base}


def instruments() -> set[str]:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry = Telemetry(meter_provider=provider)
    names: set[str] = set()
    for owner in (telemetry._metrics, telemetry._quality):
        for found in vars(owner).values():
            value = getattr(found, "_instrument", found)  # (the SDK's, behind its label cap)
            kind = type(value).__name__.lstrip("_")
            if (
                hasattr(value, "name")
                and hasattr(value, "unit")
                and kind
                in (
                    "Counter",
                    "Histogram",
                    "Gauge",
                )
            ):
                names |= prometheus_names(value.name, value.unit or "", kind)
    provider.shutdown()
    return names


def queried(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_every_query_names_a_metric_the_sdk_creates() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    created = instruments()
    assert "gen_ai_client_operation_duration_seconds_bucket" in created
    assert "llmguard_cost_USD_total" in created
    used = set()
    for expr in queried(dashboard):
        bare = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
        bare = re.sub(r"\bby \([^)]*\)", "", bare)  # grouping labels
        used |= set(re.findall(r"\b(?:gen_ai|llmguard)_[a-z0-9_A-Z]+", bare))
    assert used
    assert used <= created, used - created
    assert len(used) >= 12


def test_labels_are_the_attributes_we_emit_and_panels_do_not_overlap() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    labels = set()
    for expr in queried(dashboard):
        for group in re.findall(r"by \(([^)]*)\)", expr) + re.findall(r"\{([^}]*)\}", expr):
            labels |= {re.split(r"[!=~]", part.strip())[0] for part in group.split(",")}
    labels.discard("le")
    source = "".join(
        p.read_text() for p in (Path(__file__).parents[1] / "src/llmguard_sdk").rglob("*.py")
    )
    attributes = re.findall(r'"((?:gen_ai|llmguard|error)\.[a-z0-9_.]+)"', source)
    emitted = {name.replace(".", "_") for name in attributes}
    assert labels <= emitted, labels - emitted
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
