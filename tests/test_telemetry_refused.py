"""A call refused before its first attempt (an invalid request or option, a bad ``stream=``,
an input guardrail's refusal, a request over ``max_input_tokens``) is reported as every other
failed call is: a failed operation to the telemetry and a :class:`~llmguard_sdk.CallEvent`
to the Guard's hooks.

Real OpenTelemetry SDK with in-memory exporters, FakeProviders on loopback."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.trace import StatusCode

from llmguard_sdk import (
    CallEvent,
    Guard,
    GuardrailRejectedError,
    InputTooLargeError,
    RequestValidationError,
    scoped,
)
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported, MakeGuard, call_span, exporting

otel = pytest.fixture(exporting, name="otel")
LONG = [{"role": "user", "content": "far too many words for this guard " * 20}]


def _refuse(request: Any) -> None:
    raise GuardrailRejectedError("no weapons")


def call(guard: Guard, mode: str, messages: Any = USER, **options: Any) -> None:
    """A call of ``messages`` made in ``mode``: ``"sync"``, ``"async"`` (``achat``) or
    ``"stream"`` (``chat(stream=True)``, read whole)."""
    if mode == "sync":
        guard.chat(messages, **options)
    elif mode == "stream":
        with guard.chat(messages, stream=True, **options) as chunks:
            list(chunks)
    else:

        async def run() -> None:
            try:
                await guard.achat(messages, **options)
            finally:
                await guard.aclose()

        anyio.run(run)


REASONS: dict[str, tuple[dict[str, Any], dict[str, Any], Any, type[Exception]]] = {
    # a reason to refuse: (Guard options, call options, messages, error type)
    "invalid": ({}, {"temperature": "hot"}, USER, RequestValidationError),
    "guardrail": ({"input_filters": [_refuse]}, {}, USER, GuardrailRejectedError),
    "too-large": ({"max_input_tokens": 5}, {}, LONG, InputTooLargeError),
}


# -- hooks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_a_refused_call_reaches_the_hooks_as_a_failed_call(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str, reason: str
) -> None:
    """A refused call built no CallEvent: a hook counting failures missed every call the
    Guard refused, while the telemetry counted them."""
    guard_options, call_options, messages, error_type = REASONS[reason]
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append], telemetry=otel.telemetry, **guard_options)
    with pytest.raises(error_type) as raised:
        call(guard, mode, messages, feature="faq", tenant="acme", **call_options)
    error = raised.value
    (event,) = events
    assert event.kind == ("stream" if mode == "stream" else "chat")
    assert event.outcome == "error"
    assert event.error is error
    assert (event.attempts, event.route, event.usage) == (0, None, None)
    assert (event.cost_usd, event.cost_source) == (None, None)
    assert (event.scope.feature, event.scope.tenant) == ("faq", "acme")
    assert event.model is None  # (as a failed call's: the request's, which names none)
    assert event.latency_s >= 0
    assert call_span(otel).attributes is not None  # the telemetry's failed operation too
    assert fake.stats.requests == 0


def test_a_refused_call_reaches_the_hooks_without_telemetry(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append], telemetry=False)
    with scoped(feature="faq"), pytest.raises(RequestValidationError) as raised:
        guard.chat(USER, model="gpt-x", temperature="hot")  # type: ignore[call-overload]
    (event,) = events
    assert (event.kind, event.outcome, event.error) == ("chat", "error", raised.value)
    assert event.model == "gpt-x"
    assert event.scope.feature == "faq"


def test_a_refused_call_whose_scope_is_invalid_reports_the_enclosing_scope(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append], telemetry=False)
    with scoped(feature="faq"), pytest.raises(RequestValidationError):
        guard.chat(USER, tenant=5)  # type: ignore[call-overload]
    (event,) = events
    assert event.scope.feature == "faq"
    assert event.scope.tenant is None


def test_a_failing_hook_does_not_replace_the_refusal(
    fake: FakeProvider, make_guard: MakeGuard, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: CallEvent) -> None:
        raise RuntimeError("hook bug")

    guard = make_guard(fake, hooks=[broken], telemetry=False)
    with pytest.raises(RequestValidationError):
        guard.chat(USER, temperature="hot")  # type: ignore[call-overload]
    assert "hook bug" in caplog.text


# -- stream= ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", ["no", None, 1])
def test_a_bad_stream_value_is_a_refused_call_reported_as_such(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str, stream: object
) -> None:
    """``stream=`` was checked before the call's context was made: its refusal left no
    span, no duration point and no CallEvent."""
    events: list[CallEvent] = []
    filtered: list[Any] = []
    guard = make_guard(
        fake, hooks=[events.append], telemetry=otel.telemetry, input_filters=[filtered.append]
    )
    with pytest.raises(RequestValidationError, match="stream must be True or False") as raised:
        call(guard, mode, stream=stream, feature="faq")
    error = raised.value
    span = call_span(otel)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "llmguard_sdk.errors.RequestValidationError"
    assert span.attributes["llmguard.kind"] == "chat"  # (no stream was made)
    assert span.attributes["llmguard.feature"] == "faq"
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "llmguard_sdk.errors.RequestValidationError"
    (event,) = events
    assert (event.kind, event.outcome, event.error) == ("chat", "error", error)
    assert filtered == []  # checked first still: no guardrail ran for it
    assert fake.stats.requests == 0


@pytest.mark.anyio
async def test_a_call_cancelled_in_its_async_input_filter_is_reported_as_cancelled(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """Cancelling ``achat`` while an input filter awaits reports a cancelled call, as a
    cancel during the provider's answer does (it reported nothing: no hook, no span)."""
    entered = anyio.Event()

    async def stuck(request: Any) -> None:
        entered.set()
        await anyio.sleep(3600)

    events: list[CallEvent] = []
    guard = make_guard(fake, input_filters=[stuck], hooks=[events.append], telemetry=otel.telemetry)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(guard.achat, USER)
                await entered.wait()
                tasks.cancel_scope.cancel()
    finally:
        await guard.aclose()
    (event,) = events
    assert (event.outcome, event.error, event.attempts) == ("cancelled", None, 0)
    span = call_span(otel)
    attributes = span.attributes or {}
    assert attributes["llmguard.outcome"] == "cancelled"
    assert attributes["llmguard.cancelled"] is True
    assert "error.type" not in attributes
    assert span.status.status_code is not StatusCode.ERROR
    assert fake.stats.requests == 0
