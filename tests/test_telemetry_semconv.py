"""Every attribute and metric telemetry emits checked against the GenAI semantic conventions'
own YAML models (vendored in tests/data/semconv with their licence): the name exists, is not
deprecated, has the type the model gives it; metrics have the model's unit and instrument and
only attributes the model lists for them. Both modes: today's conventions and v1.36.0's.

Traffic goes through real FakeProvider servers (OpenAI and Anthropic style, prefix cache on),
and the real OpenTelemetry SDK with in-memory exporters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.metrics.export import HistogramDataPoint

from llmguard_sdk import (
    AnthropicProvider,
    CallEvent,
    Guard,
    OpenAICompatibleProvider,
    PromptBuilder,
    Scope,
)
from llmguard_sdk.errors import ConfigurationError, LLMGuardError
from llmguard_sdk.models import ChatResponse, Usage
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.telemetry._attributes import add_response
from llmguard_sdk.telemetry._semconv import names_for
from llmguard_sdk.testing import FakeProvider, Fault

from .test_telemetry import exporters

SEMCONV = Path(__file__).parent / "data" / "semconv"
USER = [{"role": "user", "content": "hello there"}]
STATIC = " ".join(f"Rule {i}: answer from the handbook and cite the rule." for i in range(40))
_SCALARS = {"string": str, "int": int, "double": float, "boolean": bool}
# The GenAI models refer to server.address and server.port (the inference span, the client
# metrics) but the server registry defines them; it is not vendored (its examples name hosts
# that are no loopback address). Both are stable, a string and an int, in both versions.
_SERVER_TYPES = {"server.address": "string", "server.port": "int"}


@dataclass
class Model:
    """What one version of the conventions defines."""

    types: dict[str, str] = field(default_factory=dict)  # attribute id -> type
    deprecated: set[str] = field(default_factory=set)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> definition
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)

    def metric_attributes(self, group: dict[str, Any]) -> set[str]:
        names = {a.get("ref") or a.get("id") for a in group.get("attributes", [])}
        parent = group.get("extends")
        if parent:
            names |= self.metric_attributes(self.groups[parent])
        return {n for n in names if n}


def _type_of(attribute: dict[str, Any]) -> str:
    kind = attribute["type"]
    if isinstance(kind, str):
        return kind
    values = {type(m["value"]) for m in kind["members"]}  # an enum: its members' type
    return "int" if values == {int} else "string"


def load(version: str) -> Model:
    model = Model(types=dict(_SERVER_TYPES))
    for path in sorted((SEMCONV / version).rglob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            model.groups[group["id"]] = group
            if group.get("type") == "metric":
                model.metrics[group["metric_name"]] = group
            for attribute in group.get("attributes", []):
                if "id" not in attribute:
                    continue
                model.types[attribute["id"]] = _type_of(attribute)
                if "deprecated" in attribute or path.name.endswith("deprecated.yaml"):
                    model.deprecated.add(attribute["id"])
    return model


def matches(value: Any, kind: str) -> bool:
    if kind.endswith("[]"):
        return isinstance(value, tuple | list) and all(matches(v, kind[:-2]) for v in value)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _SCALARS[kind])


@dataclass
class Emitted:
    attributes: dict[str, list[Any]] = field(default_factory=dict)  # every value seen
    metrics: dict[str, tuple[str, type, set[str]]] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)


def emit_everything(mode: str) -> Emitted:
    """Plain, streamed, cached, fallen-back, failed, Anthropic prompt-cached and protected
    calls; everything they exported."""
    exported, meter_provider = exporters(semconv=mode)
    telemetry = exported.telemetry
    with (
        FakeProvider(name="primary") as primary,
        FakeProvider(name="backup") as backup,
        FakeProvider(model="claude-fake", prefix_cache=True) as anthropic,
    ):
        routes = [
            OpenAICompatibleProvider(s.base_url, model=s.model, name=s.name)
            for s in (primary, backup)
        ]
        with Guard(routes, telemetry=telemetry, retry=None, cache=True, environ={}) as guard:
            guard.chat(USER, max_tokens=20, temperature=0.5, tenant="acme", feature="faq")
            guard.chat(USER, max_tokens=20, temperature=0.5, tenant="acme", feature="faq")  # hit
            primary.script(Fault(first_token_delay=0.05, inter_token_delay=0.01))
            with guard.chat(USER, stream=True, cacheable=False) as stream:
                list(stream)
            primary.script(Fault(status=503))
            guard.chat(  # served by the backup; every request parameter the conventions name
                USER,
                cacheable=False,
                top_p=0.9,
                seed=3,
                stop=["END"],
                response_format={"type": "json_object"},
                extra_body={"frequency_penalty": 0.5, "presence_penalty": 0, "n": 1},
            )
            primary.script(Fault(status=503))
            backup.script(Fault(status=503))
            with pytest.raises(LLMGuardError):  # every route fails: error.type
                guard.chat(USER, cacheable=False)
        claude = AnthropicProvider(anthropic.base_url, api_key="test-key", model="claude-fake")
        builder = PromptBuilder("handbook", instructions=STATIC, drift=None)
        with Guard(claude, telemetry=telemetry, retry=None, environ={}) as guard:
            for question in ("First question?", "Second question?"):
                guard.chat(request=builder.build(question).request(max_tokens=30))
    emitted = Emitted()
    every_usage = ChatResponse(  # what no FakeProvider route reports yet: reasoning tokens
        text="x",
        route="r",
        usage=Usage(input_tokens=9, output_tokens=8, reasoning_tokens=5, cached_input_tokens=2),
    )
    usage_attributes: dict[str, Any] = {}
    add_response(usage_attributes, every_usage, telemetry.names)
    for key, value in usage_attributes.items():
        emitted.attributes.setdefault(key, []).append(value)
        emitted.where[key] = "a response with every usage count"
    for span in exported.finished():
        for key, value in (span.attributes or {}).items():
            emitted.attributes.setdefault(key, []).append(value)
            emitted.where[key] = span.name
        for event in span.events:
            for key, value in (event.attributes or {}).items():
                emitted.attributes.setdefault(key, []).append(value)
                emitted.where[key] = event.name
    data = exported.reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                keys = {k for p in metric.data.data_points for k in (p.attributes or {})}
                kind = type(metric.data.data_points[0])
                emitted.metrics[metric.name] = (metric.unit or "", kind, keys)
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()
    return emitted


@pytest.fixture(scope="module", params=["latest", "previous"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def emitted(mode: str) -> Emitted:
    return emit_everything(mode)


def model_for(mode: str) -> Model:
    return load("latest" if mode == "latest" else "v1.36.0")


def test_every_attribute_exists_with_its_type(mode: str, emitted: Emitted) -> None:
    model = model_for(mode)
    checked = 0
    for key, values in emitted.attributes.items():
        if key.startswith("llmguard."):
            continue  # ours
        assert key in model.types, f"{key} (on {emitted.where[key]}) is not in the {mode} model"
        assert key not in model.deprecated, f"{key} is deprecated in the {mode} model"
        for value in values:
            assert matches(value, model.types[key]), f"{key}={value!r} is not {model.types[key]}"
        checked += 1
    assert checked >= 10


def test_every_metric_exists_with_its_unit_instrument_and_attributes(
    mode: str, emitted: Emitted
) -> None:
    model = model_for(mode)
    conventional = [name for name in emitted.metrics if not name.startswith("llmguard.")]
    assert "gen_ai.client.operation.duration" in conventional
    for name in conventional:
        unit, kind, keys = emitted.metrics[name]
        assert name in model.metrics, f"metric {name} is not in the {mode} model"
        definition = model.metrics[name]
        assert unit == definition["unit"], name
        assert definition["instrument"] == "histogram", name
        assert kind is HistogramDataPoint, name
        allowed = model.metric_attributes(definition)
        for key in keys - {k for k in keys if k.startswith("llmguard.")}:
            assert key in allowed, f"{key} is not an attribute of {name} in the {mode} model"
            assert key in model.types
            assert key not in model.deprecated


def test_the_current_names_are_all_emitted_in_latest_mode_and_none_in_previous(
    mode: str, emitted: Emitted
) -> None:
    current = {
        "gen_ai.provider.name",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.request.stream",
        "gen_ai.response.time_to_first_chunk",
    }
    metrics = {
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    }
    if mode == "latest":
        assert current <= emitted.attributes.keys()
        assert metrics <= emitted.metrics.keys()
        assert "gen_ai.system" not in emitted.attributes
        assert max(emitted.attributes["gen_ai.usage.cache_read.input_tokens"]) > 200
    else:
        assert not current & emitted.attributes.keys()
        assert not metrics & emitted.metrics.keys()
        assert set(emitted.attributes["gen_ai.system"]) == {"openai", "anthropic"}
        assert max(emitted.attributes["llmguard.usage.cached_input_tokens"]) > 200
        assert "llmguard.client.operation.time_to_first_chunk" in emitted.metrics


def test_the_switch_reads_the_opt_in_list_as_opentelemetry_does() -> None:
    assert names_for(None, {}).mode == "latest"
    opt_in = "OTEL_SEMCONV_STABILITY_OPT_IN"
    assert names_for(None, {opt_in: "http, gen_ai_latest_experimental"}).mode == "latest"
    assert names_for(None, {opt_in: "http"}).mode == "previous"
    assert names_for("previous", {opt_in: "gen_ai_latest_experimental"}).mode == "previous"
    with pytest.raises(ConfigurationError, match="semconv"):
        names_for("newest")


def test_telemetry_reads_the_environment_when_not_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    assert Telemetry().names.provider == "gen_ai.system"
    assert Telemetry(semconv="latest").names.provider == "gen_ai.provider.name"


# The conventions' advice for the two histograms (gen-ai-metrics.md: "SHOULD be specified
# with ExplicitBucketBoundaries of ..."); the YAML models do not carry it.
ADVISED_SECONDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]
ADVISED_SECONDS += [40.96, 81.92]
ADVISED_TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
ADVISED_TOKENS += [16777216, 67108864]


def test_histograms_have_the_conventions_bucket_boundaries_so_long_calls_are_measured() -> None:
    """A 60 s call (a long answer, a reasoning model) lands in a bucket of its own, not in
    the overflow bucket above 20.48 s, where every quantile over it reads 20.48 s."""
    exported, meter_provider = exporters()
    event = CallEvent(
        kind="protect",
        outcome="ok",
        scope=Scope(),
        model="slow-model",
        route="protected",
        attempts=1,
        latency_s=60.0,
        usage=Usage(input_tokens=10_000_000, output_tokens=5),
    )
    exported.telemetry.on_protect_event(event)
    (duration,) = exported.points("gen_ai.client.operation.duration")
    assert list(duration.explicit_bounds) == ADVISED_SECONDS
    assert duration.bucket_counts[ADVISED_SECONDS.index(81.92)] == 1  # (40.96, 81.92]
    assert duration.bucket_counts[-1] == 0  # nothing in the overflow bucket
    tokens = {
        p.attributes["gen_ai.token.type"]: p for p in exported.points("gen_ai.client.token.usage")
    }
    assert list(tokens["input"].explicit_bounds) == ADVISED_TOKENS
    assert tokens["input"].bucket_counts[-1] == 0
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


@pytest.mark.parametrize("semconv", ["latest", "previous"])
def test_the_time_per_output_chunk_histogram_has_the_conventions_buckets(semconv: str) -> None:
    """The conventions advise the duration buckets for ``time_per_output_chunk`` too: it had
    the SDK's default ones (0, 5, 10 ... 10000, made for milliseconds), so every gap between
    chunks, a few hundredths of a second, fell in the one bucket (0, 5] s."""
    exported, meter_provider = exporters(semconv=semconv)
    with FakeProvider(name="primary") as fake:
        route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name=fake.name)
        with Guard(route, telemetry=exported.telemetry, retry=None, environ={}) as guard:
            fake.script(Fault(inter_token_delay=0.03))
            question = [{"role": "user", "content": "one two three four five six"}]
            with guard.chat(question, stream=True, max_tokens=6) as stream:
                list(stream)
    (gaps,) = exported.points(exported.telemetry.names.chunk_gap_metric)
    assert list(gaps.explicit_bounds) == ADVISED_SECONDS
    assert gaps.count >= 2
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()
