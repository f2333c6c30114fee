"""A feature id of a ``str`` subclass (an ``enum.StrEnum``, a typed id of the application:
the scope takes them) is capped on metrics as a plain ``str`` is. The cap's quick look
knew only exact ``str`` values, so per-request ids of a subclass grew the series without end
(20 features under ``max_label_values=3``: 20 series, not 3 and ``other``).

Real OpenTelemetry SDK with in-memory exporters, FakeProvider on loopback."""

from __future__ import annotations

from collections.abc import Callable

from llmguard_sdk import Guard
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported
from .test_telemetry_cardinality import _otel, values

__all__ = ["_otel"]  # (the fixture, imported for its name: otel)
MakeGuard = Callable[..., Guard]


class RequestTag(str):
    """An application's own id type: a ``str``, by subclass."""

    __slots__ = ()


def test_feature_ids_of_a_str_subclass_are_capped(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    for i in range(20):
        guard.chat(USER, feature=RequestTag(f"req-{i}"))
    features = values(otel, "gen_ai.client.operation.duration", "llmguard.feature")
    assert len(features) == 4  # the first 3, and "other" for the rest
    assert "other" in features
    assert values(otel, "gen_ai.client.token.usage", "llmguard.feature") == features
