"""Review of the call pipeline: every wait bounded, nothing leaked, sync and async alike."""

from __future__ import annotations

import sys
from collections.abc import Callable

import anyio
import pytest

from llmguard_sdk import CallEvent, Guard
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_hedging import MODES, call

MakeGuard = Callable[..., Guard]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("hedge_after", [None, 0.05])
def test_a_timeout_of_never_is_served_in_both_modes(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    mode: str,
    hedge_after: float | None,
) -> None:
    """``timeout=sys.maxsize`` (no deadline in practice) was an OverflowError from the
    socket's timeout (sync calls) or the hedge race's queue wait; now it is a call."""
    guard = make_guard(fake, fake2, timeout=sys.maxsize, hedge_after=hedge_after)
    fake.script(Fault(latency=0.2))
    response = call(guard, mode)
    assert response.text


def test_a_stream_whose_reader_is_cancelled_is_reported_cancelled_like_a_plain_call(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A cancelled plain call is an event with outcome "cancelled"; a stream whose reading
    task was cancelled was reported as an "error" (the CancelledError as its error), which a
    release's arm or an error-rate alert counted against the route."""
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append], breaker=None)
    fake.always(Fault(inter_token_delay=0.5))

    async def cancelled_plain() -> None:
        with anyio.move_on_after(0.2):
            await guard.achat(USER)

    async def cancelled_stream() -> None:
        stream = await guard.achat(USER, stream=True)
        with anyio.move_on_after(0.2):
            async for _chunk in stream:
                pass

    fake.always(Fault(latency=0.5))
    anyio.run(cancelled_plain)
    fake.always(Fault(inter_token_delay=0.5))
    anyio.run(cancelled_stream)
    assert [(e.kind, e.outcome, e.error) for e in events] == [
        ("chat", "cancelled", None),
        ("stream", "cancelled", None),
    ]
