"""What a call that was not served by an attempt still costs: every request that went out is
billed by its provider (its prompt at least), so the budget counts it: a stream closed before
its first content, a call cancelled after its request was sent, a hedge race's loser, a stream
cut off after content; and a continuation sends more input than the request."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    CallEvent,
    Guard,
    Message,
    ProviderError,
    ProviderTimeoutError,
    StreamInterruptedError,
    Usage,
)
from llmguard_sdk._core.calls import call_context
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable, UsageRecorder, read_usage
from llmguard_sdk.budget.policy import nano
from llmguard_sdk.router import Cascade, TaskRouter
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens, count_text_tokens

from .conftest import USER
from .test_budget_fixtures import _Recording
from .test_telemetry import exporters

MakeGuard = Callable[..., Guard]

PRICES = PriceTable.default_table().with_prices(
    {
        "fake-model": Price(input=100.0, output=200.0),
        "backup-model": Price(input=10.0, output=20.0),
    }
)
BUDGETS = Budgets([Budget(limit_usd=1.0)], prices=PRICES)


def _prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Input tokens as the Guard counts them (the fake provider counts words)."""
    return count_request_tokens([Message(**m) for m in messages]).tokens


PROMPT_USD = _prompt_tokens(USER) * 100 / 1e6  # the primary's prompt
# a primary's stream cut after its first two chunks ("Echo: hello"): its prompt and that text
PRIMARY_PART_USD = PROMPT_USD + count_text_tokens("Echo: hello").tokens * 200 / 1e6


def _spent(guard: Guard) -> float:
    (row,) = guard.budget_status()
    assert row["held_usd"] == 0
    return float(row["spent_usd"])


@pytest.fixture
def guard(fake: FakeProvider, make_guard: MakeGuard) -> Guard:
    """A Guard over ``fake`` alone, under :data:`BUDGETS`, without retries."""
    return make_guard(fake, budgets=BUDGETS, retry=None)


def _hedged(
    make_guard: MakeGuard, fake: FakeProvider, fake2: FakeProvider, budgets: Budgets
) -> Guard:
    """A Guard that hedges the slow ``fake`` (1 s late) with ``fake2`` after 50 ms."""
    guard = make_guard(fake, fake2, budgets=budgets, hedge_after=0.05, timeout=10, retry=None)
    fake.always(Fault(latency=1.0))
    return guard


def _billed_one_prompt(guard: Guard, fake: FakeProvider) -> None:
    """One request reached ``fake``, and ``guard`` billed its prompt (nothing more)."""
    assert fake.stats.requests == 1
    assert _spent(guard) == pytest.approx(PROMPT_USD)


def _cancelled_once_sent(fake: FakeProvider, call: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``call`` in a task, cancelled once its request reached ``fake`` (within 10 s)."""

    def sent() -> None:
        until = time.monotonic() + 10
        while fake.stats.requests == 0 and time.monotonic() < until:
            time.sleep(0.01)

    async def run() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await anyio.to_thread.run_sync(sent)
            group.cancel_scope.cancel()

    anyio.run(run)


def test_a_stream_closed_before_its_first_content_pays_for_its_prompt(
    fake: FakeProvider, guard: Guard
) -> None:
    """Closed on the opening chunk (its role, no text): it settled $0."""
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        assert next(stream).text == ""
    _billed_one_prompt(guard, fake)


def test_an_async_call_cancelled_after_its_request_went_out_pays_for_its_prompt(
    fake: FakeProvider, guard: Guard
) -> None:
    fake.always(Fault(latency=1.0))

    async def call() -> None:
        await guard.achat(USER, max_tokens=10)

    _cancelled_once_sent(fake, call)
    _billed_one_prompt(guard, fake)


def test_a_hedge_races_loser_pays_for_its_prompt_and_the_output_it_made(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The slow primary loses to the backup; its request went out and is billed, and so is
    the answer its provider generated (a plain request's, finished though nobody reads it):
    it was charged its prompt alone. Its output is estimated as the winner's (the same
    request), up to ``max_tokens``."""
    guard = _hedged(make_guard, fake, fake2, BUDGETS)
    answer = guard.chat(USER, max_tokens=10)
    assert answer.route == "backup"
    assert fake.stats.requests == 1
    usage = answer.usage
    assert usage is not None
    assert 0 < usage.output_tokens <= 10
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    loser_usd = PROMPT_USD + usage.output_tokens * 200 / 1e6
    assert answer.cost_usd == pytest.approx(backup_usd + loser_usd)
    assert answer.cost_source == "estimated"
    assert _spent(guard) == pytest.approx(answer.cost_usd)


def test_a_streamed_hedge_races_loser_pays_for_its_prompt(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """A stream's loser had streamed no content when the winner's first came (it would
    have won): the tokens it streamed so far, none, beside its prompt."""
    guard = make_guard(fake, fake2, budgets=BUDGETS, hedge_after=0.05, timeout=10, retry=None)
    fake.always(Fault(first_token_delay=1.0))
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        list(stream)
    response = stream.response
    assert response.route == "backup"
    usage = response.usage
    assert usage is not None
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    assert response.cost_usd == pytest.approx(backup_usd + PROMPT_USD)
    assert _spent(guard) == pytest.approx(response.cost_usd)


def test_a_stream_cut_off_after_content_pays_for_it_once(fake: FakeProvider, guard: Guard) -> None:
    fake.script(Fault(cut_stream_after=2))
    delivered: list[str] = []
    with pytest.raises(StreamInterruptedError), guard.chat(USER, stream=True, max_tokens=10) as s:
        delivered.extend(chunk.text for chunk in s)
    assert "".join(delivered) == "Echo: hello"
    # its prompt and the text it generated, as counted here (the cut stream sent no usage)
    assert _spent(guard) == pytest.approx(PRIMARY_PART_USD)


def test_a_continuation_pays_for_the_input_it_sent(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The backup continues the primary's broken stream and sends no usage: its input was
    counted as the request's, without the partial answer and the instruction it sent."""
    guard = make_guard(fake, fake2, budgets=BUDGETS, retry=None, continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    fake2.script(Fault(omit_usage=True))
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        list(stream)
    response = stream.response
    assert response.route == "backup"
    sent = _prompt_tokens(fake2.requests[0].body["messages"])
    assert sent > _prompt_tokens(USER) + 10  # the partial answer and the instruction
    usage = response.usage
    assert usage is not None
    assert usage.estimated
    assert usage.input_tokens == sent
    backup_usd = (sent * 10 + usage.output_tokens * 20) / 1e6
    assert response.cost_usd == pytest.approx(backup_usd + PRIMARY_PART_USD)
    assert _spent(guard) == pytest.approx(response.cost_usd)


def test_an_async_stream_cancelled_before_its_first_content_pays_for_its_prompt(
    fake: FakeProvider, guard: Guard
) -> None:
    """The async twin: the reading task is cancelled while the first token is awaited."""
    fake.always(Fault(first_token_delay=1.0))

    async def read() -> None:
        stream = await guard.achat(USER, stream=True, max_tokens=10)
        async with stream:
            async for _ in stream:
                pass

    _cancelled_once_sent(fake, read)
    _billed_one_prompt(guard, fake)


@pytest.mark.parametrize(
    ("rates", "max_tokens"),
    [
        pytest.param((100.0, 1.0), 10, id="prompts"),
        pytest.param((1.0, 100.0), 2, id="outputs"),
    ],
)
def test_a_hedged_calls_hold_covers_both_prompts_and_outputs(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    rates: tuple[float, float],
    max_tokens: int,
) -> None:
    """The hold was one route's worst case; a hedged call is billed the loser's prompt as
    well, and a plain call's loser its estimated output (up to ``max_tokens``), so it could
    settle past its hold (and past the budget's limit): dear prompts, then dear outputs (an
    answer of ``max_tokens``: 2 tokens billed twice, held once)."""
    (input_rate, output_rate) = rates
    dear = PriceTable.default_table().with_prices(
        {
            "fake-model": Price(input=input_rate, output=output_rate),
            "backup-model": Price(input=input_rate, output=output_rate),
        }
    )
    budgets = Budgets([Budget(limit_usd=1.0)], prices=dear)
    guard = _hedged(make_guard, fake, fake2, budgets)
    spend = guard._stages.spend
    assert spend is not None
    spend.backend = backend = _Recording()
    answer = guard.chat(USER, max_tokens=max_tokens)
    assert answer.route == "backup"
    assert answer.usage is not None
    assert answer.usage.output_tokens <= max_tokens
    assert answer.cost_usd is not None
    (held,) = backend.held
    assert held >= nano(answer.cost_usd)  # the hold covered the bill
    assert _spent(guard) == pytest.approx(answer.cost_usd)


def _timed_out(error: BaseException) -> bool:
    """Whether the call failed on a timeout (one route: its own error)."""
    return isinstance(error, ProviderTimeoutError) or isinstance(
        getattr(error, "errors", {}).get("primary"), ProviderTimeoutError
    )


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_call_that_timed_out_after_its_request_went_out_pays_for_its_prompt(
    fake: FakeProvider, make_guard: MakeGuard, twin: str
) -> None:
    """The provider answers after the deadline: its request went out and is billed (it
    settled $0, unlike a call cancelled after sending)."""
    guard = make_guard(fake, budgets=BUDGETS, retry=None, timeout=0.3)
    fake.always(Fault(latency=1.0))
    call = guard.chat if twin == "sync" else lambda *a, **o: anyio.run(lambda: guard.achat(*a, **o))
    with pytest.raises(ProviderError) as failed:
        call(USER, max_tokens=10)
    assert _timed_out(failed.value)
    _billed_one_prompt(guard, fake)


def test_a_stream_that_timed_out_before_its_first_content_pays_for_its_prompt(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, budgets=BUDGETS, retry=None, timeout=0.3)
    fake.always(Fault(first_token_delay=1.0))
    with pytest.raises(ProviderError) as failed, guard.chat(USER, stream=True, max_tokens=10) as s:
        list(s)
    assert _timed_out(failed.value)
    _billed_one_prompt(guard, fake)


def test_a_hedged_call_whose_legs_both_timed_out_pays_for_both_prompts(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """Both legs still waiting at the deadline: each request went out and is billed."""
    for server in (fake, fake2):
        server.always(Fault(latency=2.0))
    hedged = make_guard(fake, fake2, budgets=BUDGETS, hedge_after=0.05, timeout=0.4, retry=None)
    with pytest.raises(AllRoutesFailedError):
        hedged.chat(USER, max_tokens=10)
    assert [server.stats.requests for server in (fake, fake2)] == [1, 1]
    assert _spent(hedged) == pytest.approx(PROMPT_USD + PROMPT_USD / 10)


def test_a_timeout_answered_by_the_provider_costs_nothing(fake: FakeProvider, guard: Guard) -> None:
    """A 408 is the provider's answer that it did not take the request: nothing billed."""
    fake.always(Fault(status=408))
    with pytest.raises(ProviderTimeoutError):
        guard.chat(USER, max_tokens=10)
    assert _spent(guard) == 0


@pytest.mark.parametrize("ending", ["timed out", "closed"])
def test_a_call_without_an_answer_records_what_its_budgets_charged(
    fake: FakeProvider, make_guard: MakeGuard, tmp_path: Path, ending: str
) -> None:
    """The call event, the usage file and the cost metric said None (nothing) for a call
    that got no answer, while its budgets charged the prompt it sent. Its token usage
    points and span then counted no token for that charge: they count the tokens charged,
    marked ``llmguard.usage.estimated``."""
    otel, meter_provider = exporters()
    events: list[CallEvent] = []
    recorder = UsageRecorder(tmp_path / "usage.jsonl")
    hooks = [events.append, recorder]
    guard = make_guard(
        fake, budgets=BUDGETS, retry=None, timeout=0.3, hooks=hooks, telemetry=otel.telemetry
    )
    if ending == "timed out":
        fake.always(Fault(latency=1.0))
        with pytest.raises(ProviderError):
            guard.chat(USER, max_tokens=10)
    else:  # a stream closed on its opening chunk, before any content
        with guard.chat(USER, stream=True, max_tokens=10) as stream:
            next(stream)
    charged = _spent(guard)
    assert charged == pytest.approx(PROMPT_USD)
    (event,) = events
    assert event.outcome == ("error" if ending == "timed out" else "cancelled")
    assert event.cost_usd == pytest.approx(charged)
    assert event.cost_source == "estimated"
    (line,) = read_usage(recorder.path)
    assert line["cost_usd"] == pytest.approx(charged)
    (cost,) = otel.points("llmguard.cost")
    assert cost.value == pytest.approx(charged)
    (span,) = [s for s in otel.finished() if "llmguard.kind" in (s.attributes or {})]
    assert span.attributes is not None
    assert span.attributes["llmguard.cost_usd"] == pytest.approx(charged)
    tokens = {
        p.attributes["gen_ai.token.type"]: p for p in otel.points("gen_ai.client.token.usage")
    }
    assert {kind: p.sum for kind, p in tokens.items()} == {
        "input": _prompt_tokens(USER),
        "output": 0,
    }
    assert {p.attributes["llmguard.usage.estimated"] for p in tokens.values()} == {True}
    used = (
        span.attributes["gen_ai.usage.input_tokens"],
        span.attributes["gen_ai.usage.output_tokens"],
    )
    assert used == (_prompt_tokens(USER), 0)
    assert span.attributes["llmguard.usage.estimated"] is True
    meter_provider.shutdown()
    otel.tracer_provider.shutdown()


def test_a_degraded_answer_after_a_timeout_pays_for_the_prompt_that_went_out(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """The configured degraded answer is free, the timed-out request is not: it settled $0
    (and the answer's cost_usd was None)."""
    guard = make_guard(fake, budgets=BUDGETS, retry=None, timeout=0.3, degraded="try later")
    fake.always(Fault(latency=1.0))
    answer = guard.chat(USER, max_tokens=10)
    assert (answer.route, answer.text) == ("degraded", "try later")
    assert fake.stats.requests == 1
    assert answer.cost_usd == pytest.approx(PROMPT_USD)
    assert answer.cost_source == "estimated"
    assert _spent(guard) == pytest.approx(PROMPT_USD)


def _cascade(make_guard: MakeGuard, *fakes: FakeProvider, **options: Any) -> Guard:
    """A Guard whose calls go to the small tier (``primary``), then the large (``backup``);
    an attempt that stays silent 0.3 s times out."""
    router = TaskRouter(
        {"small": ["primary"], "large": ["backup"]},
        cascades={"auto": Cascade(["small", "large"])},
        default="auto",
    )
    options.update(budgets=BUDGETS, retry=None, attempt_timeout=0.3, timeout=10, tasks=router)
    return make_guard(*fakes, **options)


def test_a_cascades_answer_counts_the_request_its_failed_tier_sent(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The small tier timed out (its request went out) and the large one answered: the
    budgets charged both, the answer's cost_usd the large tier's alone."""
    guard = _cascade(make_guard, fake, fake2)
    fake.always(Fault(latency=1.0))
    answer = guard.chat(USER, max_tokens=10)
    assert answer.route == "backup"
    assert answer.metadata["cascade"]["escalated_from"][0]["reason"] == "error"
    assert answer.cost_usd is not None
    assert answer.cost_usd > PROMPT_USD
    assert answer.cost_source == "estimated"
    assert _spent(guard) == pytest.approx(answer.cost_usd)


def test_a_failed_cascades_event_counts_every_tiers_requests(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """Both tiers timed out: the budgets charged both prompts, the event only the last's."""
    events: list[CallEvent] = []
    guard = _cascade(make_guard, fake, fake2, hooks=[events.append])
    for server in (fake, fake2):
        server.always(Fault(latency=1.0))
    with pytest.raises(AllRoutesFailedError):
        guard.chat(USER, max_tokens=10)
    charged = _spent(guard)
    assert charged == pytest.approx(PROMPT_USD + PROMPT_USD / 10)
    (event,) = events
    assert event.cost_usd == pytest.approx(charged)


def test_a_partial_answer_is_priced_at_the_model_of_the_route_that_gave_it(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """``SpendControl.partial`` priced a part of an answer (``text``, ``usage``) at the call's
    route, else at the request's model: a stream cut off on its fallback route (the call then
    has no route) was priced at the model the caller asked for, not at the fallback's own. It
    is priced at the route named, else the one that served the call, else the last tried."""
    guard = make_guard(fake, fake2, budgets=BUDGETS, retry=None)
    spend, stages = guard._stages.spend, guard._stages
    assert spend is not None
    ctx = call_context(stages, USER, {"model": "fake-model"})
    ctx.begin_attempt("primary")
    ctx.begin_attempt("backup")  # the backup, cut off after content: the call has no route
    used = Usage(input_tokens=1_000, output_tokens=100)
    backup_usd = (1_000 * 10 + 100 * 20) / 1e6  # (the request's model: ten times dearer)
    for named in ({}, {"route": "backup"}):
        part = spend.partial(ctx, stages, "Echo: hello", used, **named)
        assert part is not None
        assert part.cost_usd == pytest.approx(backup_usd)
    ctx.route = "primary"  # a part of the answer of the route that served the call
    part = spend.partial(ctx, stages, "Echo: hello", used)
    assert part is not None
    assert part.cost_usd == pytest.approx((1_000 * 100 + 100 * 200) / 1e6)
    # without the provider's usage: the text counted as that route's model counts it
    counted = spend.partial(ctx, stages, "Echo: hello", route="backup")
    assert counted is not None
    assert counted.usage is not None
    assert counted.cost_usd == pytest.approx(
        (counted.usage.input_tokens * 10 + count_text_tokens("Echo: hello").tokens * 20) / 1e6
    )
