"""A ``redact`` function that fails (raises, or returns no string) costs only the content it
was given: the call's span, its attempt spans and its metric points are exported as without
``capture_content``, the content as ``[redaction failed]`` (never the text unredacted), and
the failure is logged. It lost them all: the exception ended the call's telemetry before its
spans were ended (a span started to send its trace context stayed open for good) and before
any metric point was recorded.

Real OpenTelemetry SDK with in-memory exporters, FakeProvider on loopback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.telemetry.sampling import EvalSink, read_samples
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported, call_span, exporters


@pytest.fixture(params=["raises", "no-text"])
def broken(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """A broken function of the user's, a new one each test (its failure is logged once a
    window per function)."""

    def raises(text: str) -> str:
        raise ValueError(f"cannot redact {text!r}")  # (its text quotes the content)

    def no_text(text: str) -> str:
        return None  # type: ignore[return-value]

    return raises if request.param == "raises" else no_text


@pytest.fixture(params=[True, False], ids=["propagated", "not-propagated"])
def otel(request: pytest.FixtureRequest, broken: Callable[[str], str]) -> Iterator[Exported]:
    exported, meter_provider = exporters(
        capture_content=True, redact=broken, propagate=request.param
    )
    yield exported
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


def test_a_failing_redact_function_loses_the_content_not_the_calls_telemetry(
    fake: FakeProvider, otel: Exported, caplog: pytest.LogCaptureFixture
) -> None:
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with (
        Guard(route, telemetry=otel.telemetry, environ={}) as guard,
        caplog.at_level(logging.INFO, logger="llmguard_sdk"),
    ):
        answer = guard.chat(USER, feature="faq")
    assert answer.text == "Echo: hello there"
    span = call_span(otel)  # ended and exported, with its attempt's
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.output_tokens"] == answer.usage.output_tokens  # type: ignore[union-attr]
    assert "hello there" not in str(span.attributes["gen_ai.input.messages"])
    assert "[redaction failed]" in str(span.attributes["gen_ai.input.messages"])
    assert [s.name for s in otel.finished()] == ["llmguard.attempt", span.name]
    assert len(otel.points("gen_ai.client.operation.duration")) == 1
    assert len(otel.points("gen_ai.client.token.usage")) == 2
    (record,) = [r for r in caplog.records if r.name == "llmguard_sdk.calls"]
    assert record.llmguard["prompt"] == "[redaction failed]"  # type: ignore[attr-defined]
    assert record.llmguard["answer"] == "[redaction failed]"  # type: ignore[attr-defined]
    assert "redact" in caplog.text
    assert "telemetry failed" not in caplog.text
    assert "hello there" not in caplog.text


def test_an_eval_sinks_failing_redact_function_writes_the_sample_without_its_text(
    fake: FakeProvider,
    broken: Callable[[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An ``EvalSink`` whose ``redact`` failed lost the sample (the exception left
    ``offer()``, logged with a traceback that quoted the prompt) but kept its call id, so the
    call's feedback was written for a call never written (and feedback with a label
    failed). The sample is written, its texts ``[redaction failed]``, its feedback after it;
    the failure logged by its class's name, once."""
    path = tmp_path / "eval.jsonl"
    telemetry = Telemetry(eval_sink=EvalSink(path, share=1.0, redact=broken), log_level=None)
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with (
        Guard(route, telemetry=telemetry, environ={}) as guard,
        caplog.at_level(logging.INFO, logger="llmguard_sdk"),
    ):
        ids = [guard.chat(USER).metadata["call_id"] for _ in range(2)]
        for call_id in ids:
            telemetry.feedback(call_id, 1.0)
            telemetry.feedback(call_id, 0.0, label="thumbs")
    (first, second) = samples = read_samples(path)
    assert [s["call_id"] for s in samples] == ids
    assert first["request"]["messages"] == [{"role": "user", "content": "[redaction failed]"}]
    assert first["answer"] == "[redaction failed]"
    assert first["feedback"] == [
        {"score": 1.0, "label": None},
        {"score": 0.0, "label": "[redaction failed]"},
    ]
    assert second["feedback"] == first["feedback"]
    assert "hello there" not in path.read_text()
    assert "hello there" not in caplog.text
    assert "telemetry failed" not in caplog.text
    failures = [r for r in caplog.records if "redact" in r.getMessage()]
    assert len(failures) == 1
