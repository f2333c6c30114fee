"""A provider of the user's own (the :class:`~llmguard_sdk.providers.Provider` protocol, no
wire parser in between) that reports an absurd usage: the Guard bounds it as it bounds a
parsed one (``budget._usage.MOST_TOKENS``); and a ``guard.protect``-ed function's result, whose
usage passes no route (the parser alone bounds it)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from typing import Any

import anyio
import pytest

from llmguard_sdk import CallEvent, ChatRequest, ChatResponse, Guard, StreamChunk, Usage
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.ratelimit import RateLimit

from .conftest import USER
from .test_call_bounds import assert_estimated, assert_settled_on_estimates


class _Reporting:
    """A provider object that answers "Hi" and reports ``input_tokens`` of usage."""

    def __init__(self, input_tokens: int, cost_usd: float | None = None) -> None:
        self.name = "mine"
        self.model: str | None = "m"
        self.input_tokens = input_tokens
        self.cost_usd = cost_usd

    def _usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=1)

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        reported: dict[str, Any] = {}
        if self.cost_usd is not None:
            reported = {"cost_usd": self.cost_usd, "cost_source": "reported"}
        return ChatResponse(
            text="Hi", model=model, route=self.name, usage=self._usage(), **reported
        )

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        return self.complete(request, model=model, deadline=deadline)

    def stream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> Generator[StreamChunk, None, None]:
        yield StreamChunk(text="Hi", model=model)
        yield StreamChunk(finish_reason="stop", usage=self._usage())

    async def astream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        for chunk in self.stream(request, model=model, deadline=deadline):
            yield chunk

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def _served(guard: Guard, way: str) -> ChatResponse:
    if way == "chat":
        return guard.chat(USER, max_tokens=20)
    if way == "stream":
        with guard.chat(USER, stream=True, max_tokens=20) as stream:
            assert "".join(chunk.text for chunk in stream) == "Hi"
        assert stream.response is not None
        return stream.response

    async def run() -> ChatResponse:
        try:
            if way == "achat":
                return await guard.achat(USER, max_tokens=20)
            async with await guard.achat(USER, stream=True, max_tokens=20) as stream:
                assert "".join([chunk.text async for chunk in stream]) == "Hi"
            assert stream.response is not None
            return stream.response
        finally:
            await guard.aclose()

    return anyio.run(run)


@pytest.mark.parametrize("huge", [10**400, 2**31], ids=["10**400", "2**31"])
@pytest.mark.parametrize("way", ["chat", "achat", "stream", "astream"])
def test_an_absurd_usage_of_a_provider_object_is_estimated(huge: int, way: str) -> None:
    """``Usage(input_tokens=10**400)`` from a provider object made the rate limit's settle a
    bare OverflowError (and its concurrency lease was never given back); 2**31 drained the
    limit and the budget. Such a usage is no count: the call is served, its usage estimated."""
    prices = PriceTable.default_table().with_prices({"m": Price(input=1.0, output=2.0)})
    guard = Guard(
        _Reporting(huge),
        rate_limits={"mine": RateLimit(tpm=10_000, concurrency=1)},
        budgets=Budgets([Budget(limit_usd=1.0)], prices=prices),
        retry=None,
        environ={},
    )
    with guard:
        for _ in range(2):  # (a lease left held: the second call found no slot)
            assert_estimated(_served(guard, way))
        assert_settled_on_estimates(guard, "mine")


def test_a_sane_usage_of_a_provider_object_is_kept() -> None:
    """The bound is 2**31 - 1: a usage up to it is the provider's, as it reported it."""
    guard = Guard(_Reporting(1_234), retry=None, environ={})
    with guard:
        response = guard.chat(USER)
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.estimated) == (1_234, False)


@pytest.mark.parametrize("cost", [float("inf"), float("nan"), 1e300, -5.0])
@pytest.mark.parametrize("way", ["chat", "achat"])
def test_an_absurd_reported_cost_of_a_provider_object_is_estimated(cost: float, way: str) -> None:
    """A provider object reporting ``cost_usd`` infinite or 1e300 made the budget's settle a
    bare OverflowError (NaN a ValueError), and a negative one was served as the call's cost. A
    parsed cost counts only in [0, 1e12); so does a provider object's: else the table's
    estimate."""
    prices = PriceTable.default_table().with_prices({"m": Price(input=1.0, output=2.0)})
    guard = Guard(
        _Reporting(5, cost_usd=cost),
        budgets=Budgets([Budget(limit_usd=1.0)], prices=prices),
        retry=None,
        environ={},
    )
    with guard:
        for _ in range(2):
            response = _served(guard, way)
            assert response.text == "Hi"
            assert response.cost_source == "estimated"
            assert response.cost_usd is not None
            assert 0 < response.cost_usd < 1e-3
        assert 0 < guard.budget_status()[0]["spent_usd"] < 1e-2


@pytest.mark.parametrize("huge", [10**400, 2**31], ids=["10**400", "2**31"])
def test_an_absurd_usage_of_a_protected_functions_result_is_none(huge: int) -> None:
    """A ``guard.protect``-ed function's result passes no route: the parser that reads its
    usage is the only bound on it. A count above 2**31 - 1 is no count: the call's event
    reports no usage (its hooks and metrics do not take 10**400 tokens); a sane one is kept."""
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect(route="mine")
    def ask(prompt_tokens: int) -> dict[str, Any]:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1}
        return {"model": "m", "choices": [], "usage": usage}

    with guard:
        ask(huge)
        ask(1_234)
    assert [event.outcome for event in events] == ["ok", "ok"]
    assert events[0].usage is None
    assert events[1].usage is not None
    assert events[1].usage.input_tokens == 1_234
