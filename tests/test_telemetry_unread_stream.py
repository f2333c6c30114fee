"""A stream dropped before it was read at all is a cancelled call, as one closed unread is:
its span (under the caller's span) and its hooks' event; nothing was reported for it."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from opentelemetry.trace import StatusCode

from llmguard_sdk import CallEvent, Guard
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported, call_span, exporting

MakeGuard = Callable[..., Guard]
otel = pytest.fixture(exporting, name="otel")


def _drop_sync(guard: Guard) -> None:
    guard.chat(USER, stream=True)  # never read, never closed


def _drop_async(guard: Guard) -> None:
    async def scenario() -> None:
        await guard.achat(USER, stream=True)  # never read, never closed

    anyio.run(scenario)


def _close_sync(guard: Guard) -> None:
    guard.chat(USER, stream=True).close()


@pytest.mark.usefixtures("no_collection")
@pytest.mark.parametrize(
    "leave", [_drop_sync, _drop_async, _close_sync], ids=["dropped", "adropped", "closed"]
)
def test_an_unread_stream_left_is_a_cancelled_call_under_the_callers_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, leave: Callable[[Guard], None]
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, telemetry=otel.telemetry, hooks=[events.append])
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("user-request") as outer:
        leave(guard)
    span = call_span(otel)
    assert span.parent is not None
    assert span.parent.span_id == outer.get_span_context().span_id
    assert span.attributes is not None
    assert span.attributes["llmguard.outcome"] == "cancelled"
    assert span.attributes["llmguard.attempts"] == 0
    assert span.status.status_code == StatusCode.UNSET
    ((kind, outcome, attempts),) = [(e.kind, e.outcome, e.attempts) for e in events]
    assert (kind, outcome, attempts) == ("stream", "cancelled", 0)
    assert fake.stats.requests == 0  # nothing went out
