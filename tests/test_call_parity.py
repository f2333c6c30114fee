"""The same scenario through a plain call, a stream and their async twins: the same outcome,
the same charge, the same :class:`~llmguard_sdk.CallEvent` fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import CallEvent, ChatResponse, Guard, GuardrailRejectedError
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

MakeGuard = Callable[..., Guard]

# "hello there" costs 6 input and 3 output tokens at the fake provider: $0.0012
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
CALL_USD = (6 * 100 + 3 * 200) / 1e6
SHAPES = ["chat", "stream", "achat", "astream"]


def call_in_shape(guard: Guard, shape: str, **kwargs: Any) -> None:
    """Send :data:`USER` through ``guard`` as a plain call or a stream read whole, blocking
    or async (the async side closed after it)."""
    if shape == "chat":
        guard.chat(USER, **kwargs)
        return
    if shape == "stream":
        with guard.chat(USER, stream=True, **kwargs) as chunks:
            list(chunks)
        return

    async def run() -> None:
        try:
            if shape == "achat":
                await guard.achat(USER, **kwargs)
                return
            async with await guard.achat(USER, stream=True, **kwargs) as chunks:
                async for _ in chunks:
                    pass
        finally:
            await guard.aclose()

    anyio.run(run)


def reject(response: ChatResponse) -> ChatResponse:
    raise GuardrailRejectedError("not this answer")


@pytest.mark.parametrize("shape", SHAPES)
def test_an_answer_an_output_filter_rejects_is_charged_as_it_was_billed(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    events: list[CallEvent] = []
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(fake, budgets=budgets, output_filters=[reject], hooks=[events.append])
    with pytest.raises(GuardrailRejectedError):
        call_in_shape(guard, shape, max_tokens=10)
    spend = guard._stages.spend
    assert spend is not None
    (row,) = spend.status()
    assert row["held_usd"] == 0
    assert row["spent_usd"] == pytest.approx(CALL_USD)  # the provider billed the answer
    (event,) = events
    assert event.outcome == "error"
    assert event.cost_usd == pytest.approx(CALL_USD)
    assert event.cost_source == "estimated"


@pytest.mark.parametrize("shape", ["stream", "astream", "achat"])
def test_a_call_cancelled_before_any_content_names_no_route(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    fake.script(Fault(latency=1.0) if shape == "achat" else Fault(first_token_delay=0.5))
    if shape == "stream":
        stream = guard.chat(USER, stream=True)
        assert next(stream).text == ""  # the role-only opening chunk: no content yet
        stream.close()
    else:

        async def run() -> None:
            if shape == "astream":
                chunks = await guard.achat(USER, stream=True)
                assert (await chunks.__anext__()).text == ""
                await chunks.aclose()
            else:
                with anyio.move_on_after(0.2):
                    await guard.achat(USER)
            await guard.aclose()

        anyio.run(run)
    (event,) = events
    assert event.outcome == "cancelled"
    assert event.route is None  # no route served it (it named the route it had opened)
    assert event.attempts == 1
