"""Metric attributes stay bounded whatever the caller passes (per-request features,
``metadata["release"]``, budget scopes, feedback labels); spans keep the full values."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from llmguard_sdk import ConfigurationError, Guard
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.telemetry._labels import LabelCap
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported, exporters

MakeGuard = Callable[..., Guard]


@pytest.fixture(name="otel")
def _otel() -> Iterator[Exported]:
    exported, meter_provider = exporters(max_label_values=3)
    yield exported
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


def values(otel: Exported, metric: str, label: str) -> set[object]:
    return {p.attributes.get(label) for p in otel.points(metric)}


def test_per_request_features_and_releases_are_capped_on_metrics_not_spans(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, caplog: pytest.LogCaptureFixture
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk.telemetry"):
        for i in range(6):
            answer = guard.chat(USER, feature=f"req-{i}", metadata={"release": f"r-{i}"})
            otel.telemetry.feedback(answer.metadata["call_id"], 1.0, label=f"label-{i}")
    features = {"req-0", "req-1", "req-2", "other"}
    assert values(otel, "gen_ai.client.operation.duration", "llmguard.feature") == features
    assert values(otel, "gen_ai.client.token.usage", "llmguard.feature") == features
    assert values(otel, "llmguard.feedback.score", "llmguard.feature") == features
    releases = values(otel, "llmguard.feedback.score", "llmguard.release")
    assert releases == {"r-0", "r-1", "r-2", "other"}
    labels = values(otel, "llmguard.feedback.score", "llmguard.feedback.label")
    assert labels == {"label-0", "label-1", "label-2", "other"}
    spans = [s for s in otel.finished() if "llmguard.kind" in (s.attributes or {})]
    assert {(s.attributes or {}).get("llmguard.feature") for s in spans} == {
        f"req-{i}" for i in range(6)
    }
    warned = [r.getMessage() for r in caplog.records if "distinct values" in r.getMessage()]
    assert len([m for m in warned if "llmguard.feature" in m]) == 1  # once per attribute


def test_values_seen_before_the_cap_keep_their_series(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    for feature in ["a", "b", "c", "d", "a", "e", "c"]:
        guard.chat(USER, feature=feature)
    counts = {
        p.attributes.get("llmguard.feature"): p.count
        for p in otel.points("gen_ai.client.operation.duration")
    }
    assert counts == {"a": 2, "b": 1, "c": 2, "other": 2}


@pytest.mark.parametrize("bad", [0, -1, 2.5, "100", True])
def test_max_label_values_is_checked(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_label_values"):
        Telemetry(max_label_values=bad)  # type: ignore[arg-type]


def test_attributes_of_known_series_are_passed_on_as_given() -> None:
    """The cap copies a point's attributes only when it changes one: a point whose values
    were all seen before is handed on as it came (no copy, no lock); a new value past the
    cap comes back as ``"other"`` in a new dict, the caller's left as it was."""
    cap = LabelCap(2)
    first = {"llmguard.feature": "a", "llmguard.attempts": 1}
    assert cap(first) == first
    again = {"llmguard.feature": "a", "llmguard.attempts": 2}
    assert cap(again) is again
    assert cap({"llmguard.feature": "b"}) == {"llmguard.feature": "b"}
    late = {"llmguard.feature": "c", "llmguard.route": "x"}
    assert cap(late) == {"llmguard.feature": "other", "llmguard.route": "x"}
    assert late == {"llmguard.feature": "c", "llmguard.route": "x"}
    assert cap({}) == {}
    assert cap(None) is None
