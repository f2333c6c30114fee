"""Spend budgets in the Guard: costs on responses, reserve before the route loop, settle after,
release on failure, every exhaustion policy, streams, Redis shared and unreachable."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    BadRequestError,
    BudgetExceededError,
    CallEvent,
    ChatResponse,
    ConfigurationError,
    Guard,
    Message,
    OpenAICompatibleProvider,
    RequestValidationError,
)
from llmguard_sdk.budget import (
    Budget,
    BudgetEvent,
    Budgets,
    BudgetUnavailableError,
    CounterStatus,
    Price,
    PriceTable,
    UnknownModelPriceError,
)
from llmguard_sdk.budget.policy import NANO
from llmguard_sdk.context import CallContext, Scope
from llmguard_sdk.models import ChatRequest, Usage
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens, count_text_tokens

from .conftest import USER, genai_prices_or_skip

MakeGuard = Callable[..., Guard]

# $100 / $200 per million tokens: "hello there" costs 6 input and 3 output tokens at the
# fake provider, $0.0012; the backup is ten times cheaper.
PRICES = PriceTable.default_table().with_prices(
    {
        "fake-model": Price(input=100.0, output=200.0),
        "backup-model": Price(input=10.0, output=20.0),
    }
)
CALL_USD = (6 * 100 + 3 * 200) / 1e6


def spend_of(guard: Guard, **scope: Any) -> list[CounterStatus]:
    spend = guard._stages.spend
    assert spend is not None
    return spend.status(**scope)


def test_responses_and_events_carry_their_cost(fake: FakeProvider, make_guard: MakeGuard) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, prices=PRICES, hooks=[events.append])
    answer = guard.chat(USER, max_tokens=10)
    assert answer.cost_usd == pytest.approx(CALL_USD)
    assert answer.cost_source == "estimated"
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        list(stream)
    assert stream.response.cost_usd == pytest.approx(CALL_USD)  # from the final usage chunk
    assert [e.cost_usd for e in events] == pytest.approx([CALL_USD, CALL_USD])
    assert {e.cost_source for e in events} == {"estimated"}


def test_an_unpriced_model_has_no_cost_and_cannot_be_budgeted(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    answer = make_guard(fake).chat(USER)
    assert answer.cost_usd is None  # "fake-model" is not in the shipped table: not $0
    with pytest.raises(UnknownModelPriceError):
        make_guard(fake, budgets=[Budget(limit_usd=1.0)])


def test_refuse_never_sends_the_call_and_says_why(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(
        fake, budgets=Budgets([Budget(limit_usd=0.01, scope="tenant")], prices=PRICES)
    )
    served, refused = 0, None
    for _ in range(20):
        try:
            guard.chat(USER, max_tokens=10, tenant="acme")
        except BudgetExceededError as exc:
            refused = exc
            break
        served += 1
    error = refused
    assert error is not None
    assert error.scope == "tenant:acme"
    assert error.limit_usd == 0.01
    assert error.spent_usd == pytest.approx(served * CALL_USD)
    assert error.resets_at is not None
    assert error.resets_at > time.time()
    assert error.retry_after is not None
    assert 0 < error.retry_after <= 86400
    assert fake.stats.requests == served  # the refused call never reached the provider
    (row,) = spend_of(guard, tenant="acme")
    assert row["spent_usd"] <= 0.01
    assert row["held_usd"] == 0
    assert guard.chat(USER, max_tokens=10, tenant="other").text  # each tenant its own


def test_a_call_larger_than_the_whole_limit_is_told_so_not_to_wait(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A user's $0.01 a day on a model whose default 1,024 output tokens cost $0.20: every
    call was refused with "$0.000000 spent of $0.010000" and a retry_after of the hours to
    midnight, after which it was refused again. The refusal says the call never fits and how
    to make it fit, with no retry_after."""
    guard = make_guard(fake, budgets=Budgets([Budget(limit_usd=0.01, scope="user")], prices=PRICES))
    for asked in (None, 100):  # no max_tokens: default_output_tokens=1024
        with pytest.raises(BudgetExceededError) as refused:
            guard.chat(USER, user="u1", max_tokens=asked)
        error = refused.value
        assert (error.retry_after, error.spent_usd) == (None, 0)
        assert "over the whole limit of $0.010000" in str(error)
        assert "lower max_tokens" in str(error)
        assert "Budgets(default_output_tokens=1024)" in str(error)
    assert fake.stats.requests == 0
    errors: list[BudgetExceededError] = []
    for _ in range(20):  # calls that fit an empty window wait for its reset
        try:
            guard.chat(USER, user="u1", max_tokens=10)
        except BudgetExceededError as exc:
            errors.append(exc)
            break
    assert 0 < fake.stats.requests < 20
    (error,) = errors
    assert error.retry_after is not None
    assert "whole limit" not in str(error)


def test_a_failed_call_releases_its_hold(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES))
    fake.script(Fault(status=400))
    with pytest.raises(BadRequestError):
        guard.chat(USER, max_tokens=10)
    assert spend_of(guard) == [pytest.approx(spend_of(guard)[0])]
    (row,) = spend_of(guard)
    assert (row["spent_usd"], row["held_usd"]) == (0, 0)
    guard.chat(USER, max_tokens=10)
    assert spend_of(guard)[0]["spent_usd"] == pytest.approx(CALL_USD)


def _downgrading(
    make_guard: MakeGuard,
    fake: FakeProvider,
    fake2: FakeProvider,
    events: list[BudgetEvent],
    **options: Any,
) -> Guard:
    """A Guard whose $0.01 budget downgrades the call to the backup route."""
    budget = Budget(limit_usd=0.01, on_exhausted="downgrade")
    return make_guard(
        fake,
        fake2,
        budgets=Budgets(
            [budget], prices=PRICES, downgrade_to=["backup"], on_event=[events.append], **options
        ),
    )


def test_downgrade_moves_the_call_to_the_cheaper_route(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[BudgetEvent] = []
    guard = _downgrading(make_guard, fake, fake2, events)
    routes = []
    for _ in range(12):
        routes.append(guard.chat(USER, max_tokens=10).route)
    assert routes[0] == "primary"
    assert "backup" in routes
    first_backup = routes.index("backup")
    assert set(routes[first_backup:]) == {"backup"}  # the primary no longer fits
    downgrades = [e for e in events if e.kind == "exhausted"]
    assert downgrades
    assert downgrades[0].action == "downgraded"
    assert spend_of(guard)[0]["spent_usd"] <= 0.01


def test_local_only_sends_the_call_to_the_free_local_route(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    with FakeProvider(model="local-model", name="local") as local:
        guard = make_guard(
            fake,
            local,
            budgets=Budgets(
                [Budget(limit_usd=0.0045, scope="user", on_exhausted="local_only")],
                prices=PRICES,
                local_routes=["local"],
            ),
        )
        answers = [guard.chat(USER, max_tokens=10, user="u1") for _ in range(4)]
        assert [a.route for a in answers] == ["primary", "primary", "local", "local"]
        assert answers[-1].cost_usd == 0.0
        assert local.stats.requests == 2


def test_budgeted_calls_get_a_bounded_max_tokens_and_can_be_clamped(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(
        fake,
        budgets=Budgets(
            [Budget(limit_usd=0.01)],
            prices=PRICES,
            clamp_max_tokens=True,
            default_output_tokens=20,
        ),
    )
    guard.chat(USER)
    assert fake.requests[-1].body["max_tokens"] == 20  # a worst case must be bounded
    # room left: 0.01 - 0.0012 = 0.0088; the input holds about 0.0009, leaving ~39 tokens
    guard.chat(USER, max_tokens=1000)
    sent = fake.requests[-1].body["max_tokens"]
    assert 16 <= sent < 50
    (row,) = spend_of(guard)
    assert row["spent_usd"] <= 0.01


def test_clamping_comes_before_a_downgrade(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """With ``clamp_max_tokens`` and ``on_exhausted="downgrade"`` (as the README says): a
    smaller ``max_tokens`` on the full chain first; downgraded only when not even
    ``min_output_tokens`` fit there, and clamped again on the cheaper route."""
    events: list[BudgetEvent] = []
    guard = _downgrading(make_guard, fake, fake2, events, clamp_max_tokens=True)
    routes = [guard.chat(USER, max_tokens=1000).route for _ in range(10)]
    assert routes[0] == "primary"
    first_backup = routes.index("backup")
    assert first_backup > 1  # several calls clamped on the full chain first
    assert set(routes[first_backup:]) == {"backup"}
    assert all(16 <= r.body["max_tokens"] < 1000 for r in fake.requests)  # clamped
    assert all(16 <= r.body["max_tokens"] < 1000 for r in fake2.requests)  # clamped again
    exhausted = [e for e in events if e.kind == "exhausted"]
    assert len(exhausted) == len(routes) - first_backup  # each downgrade, no other
    assert {e.action for e in exhausted} == {"downgraded"}


@pytest.mark.parametrize("model", ["o4-mini", "gpt-5-mini", "openai/o3-mini"])
def test_a_budgeted_reasoning_model_call_gets_max_completion_tokens(
    make_guard: MakeGuard, model: str
) -> None:
    """OpenAI's reasoning models refuse ``max_tokens`` (HTTP 400: use
    ``max_completion_tokens``): a budgeted call that set no limit was given ``max_tokens``."""
    prices = PRICES.with_prices({model.rpartition("/")[2]: Price(input=1.0, output=4.0)})
    with FakeProvider(model=model, name="reasoner") as server:
        guard = make_guard(server, budgets=Budgets([Budget(limit_usd=1.0)], prices=prices))
        guard.chat(USER)
        body = server.requests[-1].body
    assert (body.get("max_completion_tokens"), "max_tokens" in body) == (1024, False)


def test_alerts_fire_once_per_threshold_through_the_guard(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[BudgetEvent] = []
    guard = make_guard(
        fake,
        budgets=Budgets(
            [Budget(limit_usd=CALL_USD * 10, scope="feature", window="hour")],
            prices=PRICES,
            on_event=[events.append],
        ),
    )
    for _ in range(9):
        guard.chat(USER, max_tokens=3, feature="faq")
    for _ in range(2):
        with pytest.raises(BudgetExceededError):  # holds keep the spend under the limit
            guard.chat(USER, max_tokens=3, feature="faq")
    alerts = [(e.threshold, e.scope) for e in events if e.kind == "alert"]
    assert alerts == [(0.5, "feature:faq"), (0.8, "feature:faq"), (1.0, "feature:faq")]
    assert [e.action for e in events if e.kind == "exhausted"] == ["refused", "refused"]


def test_a_scope_of_the_wrong_kind_is_a_configuration_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    with pytest.raises(ConfigurationError):
        make_guard(fake, budgets=5, prices=PRICES)
    budgets = [Budget(limit_usd=1.0, scope="tenant"), Budget(limit_usd=1.0, scope="tag", id="exp")]
    guard = make_guard(fake, budgets=Budgets(budgets, prices=PRICES))
    for scope in ({"tenant": 5}, {"user": 5}, {"feature": ["a"]}):
        with pytest.raises(RequestValidationError):
            guard.chat(USER, max_tokens=3, **scope)
    with pytest.raises(RequestValidationError):  # as a call's scope
        guard.budget_status(tenant=5)  # type: ignore[arg-type]
    with pytest.raises(RequestValidationError):
        guard.budget_status(tags=[5])  # type: ignore[list-item]
    assert fake.stats.requests == 0
    # tags given as the calls' metadata gives them, comma-separated: whole tags, not letters
    assert [row["scope"] for row in guard.budget_status(tags="expert, x")] == []
    assert [row["scope"] for row in guard.budget_status(tags="x, exp")] == ["tag:exp"]
    assert guard.budget_status(tags=None) == []  # None: as absent
    # an empty tenant is a tenant (its own counter), never reported as the global budget
    assert [row["scope"] for row in guard.budget_status(tenant="")] == ["tenant:"]


def test_tag_budgets_count_only_tagged_calls(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(
        fake,
        budgets=Budgets([Budget(limit_usd=CALL_USD * 1.5, scope="tag", id="exp")], prices=PRICES),
    )
    guard.chat(USER, max_tokens=3, metadata={"tags": "exp, other"})
    with pytest.raises(BudgetExceededError, match="tag:exp"):
        guard.chat(USER, max_tokens=3, metadata={"tags": "exp"})
    guard.chat(USER, max_tokens=3)  # untagged: not counted by it


def test_runaway_calls_raise_an_event(fake: FakeProvider, make_guard: MakeGuard) -> None:
    events: list[BudgetEvent] = []
    guard = make_guard(
        fake,
        budgets=Budgets(
            [Budget(limit_usd=100.0)],
            prices=PRICES,
            on_event=events.append,  # type: ignore[arg-type]  # one hook: taken as [hook]
        ),
    )
    for _ in range(50):
        guard.chat(USER, max_tokens=3, feature="search")
    assert not [e for e in events if e.kind == "runaway"]
    huge = [{"role": "user", "content": "word " * 500}]
    guard.chat(huge, max_tokens=3, feature="search")
    (runaway,) = [e for e in events if e.kind == "runaway"]
    assert runaway.scope == "feature:search"
    assert runaway.tokens is not None
    assert runaway.p95 is not None
    assert runaway.tokens > 5 * runaway.p95


def test_streams_settle_to_the_final_usage_or_what_was_delivered(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES))
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        list(stream)
    assert spend_of(guard)[0]["spent_usd"] == pytest.approx(CALL_USD)
    long = [{"role": "user", "content": "one two three four five six seven eight"}]
    with guard.chat(long, stream=True, max_tokens=50) as stream:
        for chunk in stream:
            if chunk.text:
                break  # stop reading early: the provider generated something
    (row,) = spend_of(guard)
    assert row["held_usd"] == 0
    assert row["spent_usd"] > CALL_USD  # the early stop was counted, not released
    fake.script(Fault(status=503), Fault(status=503), Fault(status=503))
    with pytest.raises(Exception), guard.chat(USER, stream=True, max_tokens=10) as stream:  # noqa: B017, PT011
        list(stream)
    assert spend_of(guard)[0]["held_usd"] == 0


def test_async_calls_and_streams_reserve_and_settle(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, budgets=Budgets([Budget(limit_usd=CALL_USD * 2.5)], prices=PRICES))

    async def run() -> None:
        answer = await guard.achat(USER, max_tokens=3)
        assert answer.cost_usd == pytest.approx(CALL_USD)
        stream = await guard.achat(USER, stream=True, max_tokens=3)
        async with stream:
            async for _ in stream:
                pass
        with pytest.raises(BudgetExceededError):
            await guard.achat(USER, max_tokens=3)

    anyio.run(run)
    (row,) = spend_of(guard)
    assert row["spent_usd"] == pytest.approx(2 * CALL_USD)
    assert row["held_usd"] == 0


def test_guards_share_a_budget_through_redis(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    def process() -> Guard:
        return Guard(
            OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
            store=redis_url,
            key_prefix=redis_prefix,
            budgets=Budgets([Budget(limit_usd=CALL_USD * 3.5, scope="tenant")], prices=PRICES),
            environ={},
        )

    first, second = process(), process()
    try:
        first.chat(USER, max_tokens=3, tenant="acme")
        second.chat(USER, max_tokens=3, tenant="acme")
        first.chat(USER, max_tokens=3, tenant="acme")
        with pytest.raises(BudgetExceededError):
            second.chat(USER, max_tokens=3, tenant="acme")
        assert fake.stats.requests == 3
        assert spend_of(second, tenant="acme")[0]["spent_usd"] == pytest.approx(3 * CALL_USD)
    finally:
        first.close()
        second.close()


def test_an_unreachable_redis_fails_closed_unless_told_otherwise(
    fake: FakeProvider, tmp_path: Path
) -> None:
    def guard(fail_open: bool) -> Guard:
        return Guard(
            OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
            # nothing listens there; the spend it cannot record goes to this test's journal
            store=RedisStore("redis://127.0.0.1:1/0", journal_dir=str(tmp_path)),
            budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES, fail_open=fail_open),
            breaker=None,
            retry_budget=None,
            environ={},
        )

    closed = guard(fail_open=False)
    with pytest.raises(BudgetUnavailableError) as info:
        closed.chat(USER, max_tokens=3)
    assert isinstance(info.value, BudgetExceededError)
    assert fake.stats.requests == 0
    opened = guard(fail_open=True)
    assert opened.chat(USER, max_tokens=3).cost_usd == pytest.approx(CALL_USD)
    assert list(tmp_path.glob("*.jsonl"))  # the spend was journaled here, in the temp dir
    closed.close()
    opened.close()


@pytest.mark.parametrize(
    "budgets",
    [
        Budgets([Budget(limit_usd=1, on_exhausted="downgrade")]),
        Budgets([Budget(limit_usd=1, on_exhausted="local_only")]),
        Budgets([Budget(limit_usd=1)], downgrade_to=["nowhere"]),
        "not budgets",
    ],
)
def test_bad_budget_configuration(fake: FakeProvider, make_guard: MakeGuard, budgets: Any) -> None:
    from llmguard_sdk import ConfigurationError

    with pytest.raises(ConfigurationError):
        make_guard(fake, budgets=budgets, prices=PRICES)


def test_a_stream_continued_on_another_route_pays_for_both(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The primary's stream breaks after some content and the backup continues it: the
    provider bills the primary's prompt and what it generated, so the call's cost and the
    budget's spend include it, not only the backup's part."""
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(fake, fake2, budgets=budgets, retry=None, continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        list(stream)
    response = stream.response
    assert response.route == "backup"
    assert response.metadata["continued_after"] == ["primary"]
    usage = response.usage
    assert usage is not None
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    # the primary's part: its 6 prompt tokens and the 4 of "Echo: hello" it generated (as
    # counted here: the cut stream reported no usage), at its tenfold prices
    assert response.cost_usd == pytest.approx(backup_usd + (6 * 100 + 4 * 200) / 1e6)
    assert response.cost_source == "estimated"
    (row,) = spend_of(guard)
    assert row["spent_usd"] == pytest.approx(response.cost_usd)
    assert row["held_usd"] == 0


def test_a_continued_stream_closed_early_pays_for_both_routes(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """Closed on the backup's first chunk: the primary's part (billed by its provider) is
    spent, and the backup's chunk at the backup's price, not everything at the backup's."""
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(fake, fake2, budgets=budgets, retry=None, continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    with guard.chat(USER, stream=True, max_tokens=10) as stream:
        backup_text = next(chunk.text for chunk in stream if chunk.route == "backup")
    primary_usd = (6 * 100 + 4 * 200) / 1e6  # as in the test above
    # the backup's part as counted here: the prompt it was sent (the request, the primary's
    # partial answer and the instruction to continue), the text it delivered
    sent = count_request_tokens([Message(**m) for m in fake2.requests[0].body["messages"]])
    output = count_text_tokens(backup_text, "backup-model").tokens
    backup_usd = (sent.tokens * 10 + output * 20) / 1e6
    (row,) = spend_of(guard)
    assert row["spent_usd"] == pytest.approx(primary_usd + backup_usd)
    assert row["held_usd"] == 0


def test_a_peak_hour_call_is_held_and_charged_at_deepseeks_peak_price(
    make_guard: MakeGuard,
) -> None:
    """genai-prices lists deepseek-chat's peak price ($0.27/M input, $1.10/M output, 00:30 to
    16:30 UTC) under a time-of-day window: a call that starts at peak hours holds and pays
    that, one that starts in the evening the off-peak half (the call's start, not the wall
    clock, decides)."""
    genai_prices_or_skip()
    with FakeProvider(model="deepseek-chat", name="deepseek") as server:
        guard = make_guard(server, budgets=Budgets([Budget(limit_usd=10.0)]))
        spend, stages = guard._stages.spend, guard._stages
        assert spend is not None
        request = ChatRequest(
            messages=[Message(role="user", content="hello there")], max_tokens=100
        )
        usage = Usage(input_tokens=1_000, output_tokens=400)
        spent = 0.0
        for hour, (input_rate, output_rate) in ((8, (0.27, 1.1)), (20, (0.135, 0.55))):
            start = dt.datetime(2026, 10, 1, hour, tzinfo=dt.timezone.utc)
            ctx = CallContext(
                request=request,
                scope=Scope(),
                deadline=time.monotonic() + 60,
                started_ns=int(start.timestamp()) * 10**9,
            )
            held = spend.reserve(ctx, stages)
            priced = ctx.input_tokens().tokens * (1 + spend.config.input_margin)
            worst = (priced * input_rate + 100 * output_rate) / 1e6
            assert held.amount / NANO == pytest.approx(worst, rel=1e-6), hour
            spend.settle(held, ctx, ChatResponse(text="hi", usage=usage, route="deepseek"))
            spent += (1_000 * input_rate + 400 * output_rate) / 1e6
            (row,) = spend_of(guard)
            assert row["spent_usd"] == pytest.approx(spent, rel=1e-6), hour
            assert row["held_usd"] == 0
