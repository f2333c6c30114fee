"""Async guardrails: ``async def`` input and output filters, awaited on the caller's event
loop in async calls (other tasks run while they wait), run on a loop of their own in sync
calls, in plain calls and streams alike, and bounded by the call's deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from llmguard_sdk import (
    CallEvent,
    Cascade,
    ChatRequest,
    ChatResponse,
    Guard,
    GuardrailRejectedError,
    OpenAICompatibleProvider,
    ProviderTimeoutError,
    TaskRouter,
)
from llmguard_sdk.budget import Budget, Budgets, Price
from llmguard_sdk.client import async_anthropic_client
from llmguard_sdk.router import not_empty
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.tokens import count_request_tokens

from .conftest import USER, require_module
from .test_call_parity import CALL_USD, PRICES, SHAPES, call_in_shape

MakeGuard = Callable[..., Guard]
BOUND_S = 20.0  # no test waits longer than this for anything (a failure, not a hang)


async def hi_instead(request: ChatRequest) -> ChatRequest:
    """An async input filter that replaces the user's words."""
    await anyio.lowlevel.checkpoint()
    return request.model_copy(update={"messages": [{"role": "user", "content": "hi"}]})


async def checked(response: ChatResponse) -> ChatResponse:
    """An async output filter that marks the answer."""
    await anyio.lowlevel.checkpoint()
    return response.model_copy(update={"text": response.text + " [checked]"})


async def refuse_input(request: ChatRequest) -> None:
    await anyio.lowlevel.checkpoint()
    raise GuardrailRejectedError("not this question")


async def refuse_output(response: ChatResponse) -> None:
    await anyio.lowlevel.checkpoint()
    raise GuardrailRejectedError("not this answer")


async def never_done(value: Any) -> None:
    """A moderation endpoint that never answers."""
    await anyio.sleep(3600)


def served(guard: Guard, shape: str) -> tuple[str, ChatResponse]:
    """What the caller read (a stream's chunks joined) and the response, in ``shape``."""
    if shape == "chat":
        response = guard.chat(USER)
        return response.text, response
    if shape == "stream":
        with guard.chat(USER, stream=True) as chunks:
            text = "".join(chunk.text for chunk in chunks)
        return text, chunks.response

    async def run() -> tuple[str, ChatResponse]:
        try:
            if shape == "achat":
                answer = await guard.achat(USER)
                return answer.text, answer
            async with await guard.achat(USER, stream=True) as stream:
                text = "".join([chunk.text async for chunk in stream])
            return text, stream.response
        finally:
            await guard.aclose()

    return anyio.run(run)


class Heartbeat:
    """A task that ticks while the event loop is free."""

    def __init__(self) -> None:
        self._tick = anyio.Event()

    async def run(self) -> None:
        while True:
            await anyio.sleep(0.001)
            self._tick.set()
            self._tick = anyio.Event()

    async def beats(self, count: int) -> None:
        """Return once the heartbeat ticked ``count`` more times (it cannot if the loop is
        blocked: then this fails at :data:`BOUND_S`)."""
        with anyio.fail_after(BOUND_S):
            for _ in range(count):
                await self._tick.wait()


class Meeting:
    """Every one of ``expected`` callers waits here until all have arrived: they only meet if
    they wait at the same time."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.everyone = anyio.Event()

    async def meet(self) -> None:
        self.arrived += 1
        if self.arrived == self.expected:
            self.everyone.set()
        with anyio.fail_after(BOUND_S):
            await self.everyone.wait()


@pytest.mark.anyio
async def test_async_filters_wait_on_the_loop_while_other_tasks_run(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """Concurrent calls wait in their async filters at the same time, and the loop's other
    tasks run meanwhile (a filter that blocked the loop would never see the heartbeat tick,
    and the calls would never meet)."""
    calls = 4
    heartbeat, inputs, outputs = Heartbeat(), Meeting(calls), Meeting(calls)
    loop_threads: set[int] = set()

    async def moderate_request(request: ChatRequest) -> None:
        loop_threads.add(threading.get_ident())
        await heartbeat.beats(3)
        await inputs.meet()

    async def moderate_answer(response: ChatResponse) -> ChatResponse:
        loop_threads.add(threading.get_ident())
        await heartbeat.beats(3)
        await outputs.meet()
        return response.model_copy(update={"text": response.text.upper()})

    guard = make_guard(fake, input_filters=[moderate_request], output_filters=[moderate_answer])
    answers: list[str] = []

    async def one_call() -> None:
        answers.append((await guard.achat(USER)).text)

    try:
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(heartbeat.run)
                async with anyio.create_task_group() as chats:
                    for _ in range(calls):
                        chats.start_soon(one_call)
                tasks.cancel_scope.cancel()
    finally:
        await guard.aclose()
    assert answers == ["ECHO: HELLO THERE"] * calls
    assert (inputs.arrived, outputs.arrived) == (calls, calls)
    assert loop_threads == {threading.get_ident()}  # awaited on the caller's loop
    assert fake.stats.requests == calls


@pytest.mark.parametrize("shape", SHAPES)
def test_async_filters_replace_the_request_and_the_answer(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    guard = make_guard(fake, input_filters=[hi_instead], output_filters=[checked])
    text, response = served(guard, shape)
    assert response.text == "Echo: hi [checked]"
    if shape in ("chat", "achat"):
        assert text == response.text
    else:  # a stream's caller read the provider's chunks; the response is the filtered one
        assert text == "Echo: hi"


@pytest.mark.parametrize("shape", SHAPES)
def test_an_async_input_filter_refuses_before_any_request(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, input_filters=[refuse_input], hooks=[events.append])
    with pytest.raises(GuardrailRejectedError, match="not this question") as refused:
        call_in_shape(guard, shape)
    assert refused.value.stage == "input"
    assert fake.stats.requests == 0
    (event,) = events  # reported as a refused call
    assert (event.outcome, event.attempts, event.error) == ("error", 0, refused.value)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_answer_an_async_output_filter_refuses_is_charged_as_billed(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(fake, budgets=budgets, output_filters=[refuse_output])
    with pytest.raises(GuardrailRejectedError, match="not this answer") as refused:
        call_in_shape(guard, shape, max_tokens=10)
    assert refused.value.stage == "output"
    _assert_charged_once(guard)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_async_output_filter_past_the_deadline_times_the_call_out(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    """The filter's wait ends at the call's deadline: the call's timeout error, and the
    answer the provider billed is charged (nothing served, nothing lost)."""
    events: list[CallEvent] = []
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(
        fake, budgets=budgets, output_filters=[checked, never_done], hooks=[events.append]
    )
    with pytest.raises(ProviderTimeoutError, match="never_done") as late:
        call_in_shape(guard, shape, max_tokens=10, timeout=3.0)
    assert late.value.request_sent
    _assert_charged_once(guard)
    (event,) = events
    assert (event.outcome, event.error) == ("error", late.value)
    assert event.cost_usd == pytest.approx(CALL_USD)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_async_input_filter_past_the_deadline_sends_nothing(
    fake: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    guard = make_guard(fake, input_filters=[never_done])
    with pytest.raises(ProviderTimeoutError, match=r"input filter .*never_done") as late:
        call_in_shape(guard, shape, timeout=1.0)
    assert not late.value.request_sent
    assert fake.stats.requests == 0


def _assert_charged_once(guard: Guard) -> None:
    spend = guard._stages.spend
    assert spend is not None
    (row,) = spend.status()
    assert row["held_usd"] == 0
    assert row["spent_usd"] == pytest.approx(CALL_USD)  # the provider billed the answer


@pytest.mark.anyio
async def test_a_sync_call_inside_a_running_loop_runs_an_async_filter_on_its_own_loop(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """``chat`` called from async code (blocking that loop, as any sync call does) still
    runs an async filter: on an event loop of its own, in a worker thread, with the
    caller's context."""
    ran_in: list[int] = []

    async def where(response: ChatResponse) -> None:
        ran_in.append(threading.get_ident())

    guard = make_guard(fake, output_filters=[where, checked])
    assert guard.chat(USER).text == "Echo: hello there [checked]"
    assert len(ran_in) == 1
    assert ran_in[0] != threading.get_ident()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_cascade_awaits_async_output_filters_before_its_checks(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    """A filter's async refusal escalates to the next tier (``on_output_filter``); the last
    tier's answer passes the same async filters."""

    async def refuse_the_small_tier(response: ChatResponse) -> ChatResponse:
        await anyio.lowlevel.checkpoint()
        if response.route == "primary":
            raise GuardrailRejectedError("too small")
        return response.model_copy(update={"text": response.text + " [checked]"})

    router = TaskRouter(
        {"small": ["primary"], "large": ["backup"]},
        cascades={"auto": Cascade(["small", "large"], checks=[not_empty()])},
        default="auto",
    )
    guard = make_guard(fake, fake2, tasks=router, output_filters=[refuse_the_small_tier])
    text, response = served(guard, shape)
    assert (response.route, response.text, text) == ("backup", *["Echo: hello there [checked]"] * 2)
    assert response.metadata["cascade"]["escalated_from"][0]["reason"] == "output_filter"


def test_the_async_drop_in_client_counts_tokens_through_async_filters_on_its_loop(
    fake: FakeProvider,
) -> None:
    """``count_tokens`` through the async Anthropic seam awaits an async input filter on the
    caller's loop (not a worker thread that the loop would wait for), and counts what the
    filter left."""
    require_module("anthropic", "anthropic is a dev dependency")
    ran_in: list[int] = []

    async def longer(request: ChatRequest) -> ChatRequest:
        ran_in.append(threading.get_ident())
        return request.model_copy(update={"messages": [{"role": "user", "content": "hi " * 50}]})

    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="gpt-4", name="gpt"),
        input_filters=[longer],
        environ={},
    )

    async def run() -> int:
        try:
            client = async_anthropic_client(guard)
            counted = await client.messages.count_tokens(model="m", messages=USER)
        finally:
            await guard.aclose()
        assert ran_in == [threading.get_ident()]
        return int(counted.input_tokens)

    assert (
        anyio.run(run)
        == count_request_tokens([{"role": "user", "content": "hi " * 50}], model="gpt-4").tokens
    )
    assert fake.requests == []


@pytest.mark.anyio
async def test_a_call_cancelled_in_its_async_output_filter_is_charged_as_billed(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """Cancelling ``achat`` while an output filter awaits ends the wait at once; the answer
    the provider billed is charged, and the call is reported as cancelled."""
    entered = anyio.Event()

    async def stuck(response: ChatResponse) -> None:
        entered.set()
        await anyio.sleep(3600)

    events: list[CallEvent] = []
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(fake, budgets=budgets, output_filters=[stuck], hooks=[events.append])

    async def call() -> None:
        await guard.achat(USER, max_tokens=10)

    try:
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                await entered.wait()
                tasks.cancel_scope.cancel()
    finally:
        await guard.aclose()
    _assert_charged_once(guard)
    (event,) = events
    assert event.outcome == "cancelled"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_cascade_names_the_async_filter_that_ran_past_the_deadline(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    """The timeout names the user's filter (it named the cascade's own screen)."""
    cascade = Cascade(["small", "large"], checks=[not_empty()], on_error=False)
    router = TaskRouter(
        {"small": ["primary"], "large": ["backup"]},
        cascades={"auto": cascade},
        default="auto",
    )
    guard = make_guard(fake, fake2, tasks=router, output_filters=[checked, never_done])
    with pytest.raises(ProviderTimeoutError, match=r"output filter .*never_done") as late:
        call_in_shape(guard, shape, timeout=1.0)
    assert late.value.request_sent


@pytest.mark.parametrize("shape", SHAPES)
def test_an_escalating_cascade_raises_its_async_filters_timeout(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, shape: str
) -> None:
    """A tier's output filter past the deadline times the call out as on a plain call: its
    timeout names the filter, and the answer the tier billed is charged (the cascade took
    it for a failed tier and escalated with no time left: AllRoutesFailedError naming the
    next tier's route, which no request reached)."""
    router = TaskRouter(
        {"small": ["primary"], "large": ["backup"]},
        cascades={"auto": Cascade(["small", "large"], checks=[not_empty()])},  # on_error
        default="auto",
    )
    events: list[CallEvent] = []
    prices = PRICES.with_prices({"backup-model": Price(input=100.0, output=200.0)})
    budgets = Budgets([Budget(limit_usd=1.0)], prices=prices)
    guard = make_guard(
        fake, fake2, tasks=router, budgets=budgets, output_filters=[checked, never_done],
        hooks=[events.append],
    )  # fmt: skip
    with pytest.raises(ProviderTimeoutError, match=r"output filter .*never_done") as late:
        call_in_shape(guard, shape, max_tokens=10, timeout=1.0)
    assert late.value.request_sent
    assert (fake.stats.requests, fake2.stats.requests) == (1, 0)
    _assert_charged_once(guard)
    (event,) = events
    assert (event.outcome, event.error) == ("error", late.value)
