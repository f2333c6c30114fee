"""A hard spend cap is never overshot by the guard's own retries: an attempt that timed out
after its request went out is billed its prompt, so before a retry or a fallback attempt the
call's hold is topped up to what was charged plus that attempt's worst case; a top-up the
budget refuses stops the call with the budget's error, charged what went out. Token-metered
rate limits count that prompt too (the provider does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BudgetExceededError,
    ChatResponse,
    Guard,
    ProviderError,
    RateLimitExceededError,
    StreamInterruptedError,
)
from llmguard_sdk.budget import Budget, BudgetEvent, Budgets, Price
from llmguard_sdk.models import Message
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

from .conftest import USER
from .test_budget_unserved import PRICES, PRIMARY_PART_USD, PROMPT_USD
from .test_fake_provider import wait_until

MakeGuard = Callable[..., Guard]
RETRIES = RetryPolicy(attempts=3, base=0.01, cap=0.05)
# one attempt's hold: the prompt with its 10 % margin and one output token at $200/M
ONE_ATTEMPT_USD = PROMPT_USD * 1.1 + 200 / 1e6
TIGHT_USD = ONE_ATTEMPT_USD + PROMPT_USD / 10  # one attempt fits; a second prompt does not


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[RedisStore | None]:
    if request.param == "memory":
        yield None
        return
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    store = RedisStore(url, key_prefix=prefix)
    yield store
    store.close()


def _guard(
    make_guard: MakeGuard, store: RedisStore | None, *fakes: FakeProvider, limit: float
) -> Guard:
    options = {} if store is None else {"store": store}
    budgets = Budgets([Budget(limit_usd=limit)], prices=PRICES)
    return make_guard(
        *fakes, budgets=budgets, retry=RETRIES, attempt_timeout=1.0, timeout=20, **options
    )


def _spent(guard: Guard) -> float:
    (row,) = guard.budget_status()
    assert row["held_usd"] == 0  # every hold, top-ups included, settled
    return float(row["spent_usd"])


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_retry_after_a_charged_timeout_is_refused_when_the_cap_has_no_room(
    fake: FakeProvider, make_guard: MakeGuard, store: RedisStore | None, twin: str
) -> None:
    """The hold covered one attempt; each attempt that timed out was billed its prompt, so
    three of them spent past the cap ($0.0013 capped, $0.0022 spent after two)."""
    guard = _guard(make_guard, store, fake, limit=TIGHT_USD)
    fake.always(Fault(latency=3.0))
    call: Callable[[], ChatResponse]
    if twin == "sync":
        call = lambda: guard.chat(USER, max_tokens=1)  # noqa: E731
    else:
        call = lambda: anyio.run(lambda: guard.achat(USER, max_tokens=1))  # noqa: E731
    with pytest.raises(BudgetExceededError) as refused:
        call()
    assert fake.stats.requests == 1  # the retry never went out
    assert refused.value.limit_usd == pytest.approx(TIGHT_USD)
    spent = _spent(guard)
    assert spent == pytest.approx(PROMPT_USD)  # what went out, and nothing lost
    assert spent <= TIGHT_USD


def test_retries_after_charged_timeouts_top_up_the_hold_when_there_is_room(
    fake: FakeProvider, make_guard: MakeGuard, store: RedisStore | None
) -> None:
    guard = _guard(make_guard, store, fake, limit=1.0)
    fake.script(Fault(latency=3.0), Fault(latency=3.0), None)
    answer = guard.chat(USER, max_tokens=1)
    assert fake.stats.requests == 3
    assert answer.cost_usd is not None
    assert answer.cost_usd > 2 * PROMPT_USD  # the two timed-out prompts, then the answer
    assert _spent(guard) == pytest.approx(answer.cost_usd)


def test_a_stream_retried_after_a_charged_timeout_is_refused_when_the_cap_has_no_room(
    fake: FakeProvider, make_guard: MakeGuard, store: RedisStore | None
) -> None:
    guard = _guard(make_guard, store, fake, limit=TIGHT_USD)
    fake.always(Fault(first_token_delay=3.0))
    with (
        pytest.raises(BudgetExceededError),
        guard.chat(USER, stream=True, max_tokens=1) as stream,
    ):
        list(stream)
    assert fake.stats.requests == 1
    assert _spent(guard) == pytest.approx(PROMPT_USD)


def test_a_cheaper_fallback_that_fits_the_hold_still_goes_out_under_a_tight_cap(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The primary's timed-out prompt plus the backup's worst case fit the hold (priced at
    the dearer route): no top-up is needed, and the backup serves the call."""
    fake.always(Fault(latency=3.0))
    guard = make_guard(
        fake,
        fake2,
        budgets=Budgets([Budget(limit_usd=TIGHT_USD)], prices=PRICES),
        retry=None,
        attempt_timeout=1.0,
        timeout=20,
    )
    answer = guard.chat(USER, max_tokens=1)
    assert answer.route == "backup"
    assert answer.cost_usd is not None
    spent = _spent(guard)
    assert spent == pytest.approx(answer.cost_usd)
    assert spent <= TIGHT_USD


def _prompt_tokens() -> int:
    return count_request_tokens([Message(**m) for m in USER]).tokens


def _call(guard: Guard, kind: str, max_tokens: int = 5) -> None:
    if kind == "complete":
        guard.chat(USER, max_tokens=max_tokens)
        return
    with guard.chat(USER, max_tokens=max_tokens, stream=True) as stream:
        list(stream)


@pytest.mark.parametrize("kind", ["complete", "stream"])
def test_a_rate_limit_keeps_the_prompt_of_an_attempt_that_timed_out_after_sending(
    fake: FakeProvider, make_guard: MakeGuard, store: RedisStore | None, kind: str
) -> None:
    """The provider counts a prompt it received against its limits whether or not it
    answered in time (and the budgets charge it): the reservation gave it all back, so the
    limiter let through more input than the provider takes."""
    prompt = _prompt_tokens()
    limit = RateLimit(input_tpm=prompt * 1.5, period=3600)  # room for one prompt
    options: dict[str, Any] = {} if store is None else {"store": store}
    guard = make_guard(
        fake,
        rate_limits={"primary": limit},
        retry=None,
        breaker=None,
        attempt_timeout=1.0,
        timeout=20,
        **options,
    )
    fake.script(Fault(latency=3.0) if kind == "complete" else Fault(first_token_delay=3.0))
    with pytest.raises(ProviderError):
        _call(guard, kind)
    assert fake.stats.requests == 1
    with pytest.raises(RateLimitExceededError):  # the first prompt still counts
        guard.chat(USER, max_tokens=5)
    assert fake.stats.requests == 1


def test_a_continuation_the_cap_has_no_room_for_ends_with_the_interruption(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The primary's stream broke after content (billed: its prompt and that text); the
    backup's continuation (a longer prompt, max_tokens again) does not fit the cap: the
    caller gets the interruption with its text, caused by the budget's refusal."""
    dear = PRICES.with_prices({"backup-model": Price(input=100.0, output=200.0)})
    hold_usd = PROMPT_USD * 1.1 + 10 * 200 / 1e6  # one attempt with max_tokens=10
    budgets = Budgets([Budget(limit_usd=hold_usd + PROMPT_USD / 10)], prices=dear)
    guard = make_guard(fake, fake2, budgets=budgets, retry=None, continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    delivered: list[str] = []
    with (
        pytest.raises(StreamInterruptedError) as interrupted,
        guard.chat(USER, stream=True, max_tokens=10) as stream,
    ):
        delivered.extend(chunk.text for chunk in stream)
    assert isinstance(interrupted.value.__cause__, BudgetExceededError)
    assert interrupted.value.partial_text == "".join(delivered) == "Echo: hello"
    assert fake2.stats.requests == 0
    assert _spent(guard) == pytest.approx(PRIMARY_PART_USD)


def test_a_hedged_call_timed_out_at_its_deadline_gives_back_its_output_tokens(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """Both legs still waiting at the call's deadline: each kept its prompt (as a plain
    call that timed out does) but held its whole max_tokens of output too, so the next
    call found no room on the primary's output limit and went to the backup."""
    limit = RateLimit(
        output_tpm=15, concurrency=5, period=3600, reserve_output_tokens=10
    )  # one call of 10 tokens
    guard = make_guard(
        fake,
        fake2,
        rate_limits={"primary": limit},
        hedge_after=0.05,
        timeout=1.5,
        retry=None,
        breaker=None,
    )
    for server in (fake, fake2):
        server.script(Fault(latency=4.0))
    with pytest.raises(AllRoutesFailedError):
        guard.chat(USER, max_tokens=10)
    assert [server.stats.requests for server in (fake, fake2)] == [1, 1]
    # a stopped leg settles once its attempt has ended (its thread may end after the call)
    assert wait_until(lambda: _in_flight(guard) == 0)
    answer = guard.chat(USER, max_tokens=10, timeout=5, hedge_after=30.0)  # (no race now)
    assert answer.route == "primary"
    assert fake.stats.requests == 2


def _in_flight(guard: Guard) -> int:
    """The primary's calls holding a rate-limit lease (a stopped leg's, until it settles)."""
    limiter: Any = guard.rate_limiter
    return int(limiter.in_flight("primary"))


# -- a refused top-up acts by the budget's on_exhausted, as the call's reservation does ------


def _moving_guard(
    make_guard: MakeGuard,
    store: RedisStore | None,
    *fakes: FakeProvider,
    policy: str,
    events: list[BudgetEvent],
    **options: Any,
) -> Guard:
    """A cap with room for one attempt on the primary, whose budget acts by ``policy``."""
    if store is not None:
        options["store"] = store
    budgets = Budgets(
        [Budget(limit_usd=TIGHT_USD, on_exhausted=policy)],  # type: ignore[arg-type]
        prices=PRICES,
        downgrade_to=["backup"] if policy == "downgrade" else (),
        local_routes=["local"] if policy == "local_only" else (),
        on_event=[events.append],
    )
    return make_guard(
        *fakes, budgets=budgets, retry=RETRIES, attempt_timeout=1.0, timeout=20, **options
    )


def _answer(guard: Guard, twin: str) -> tuple[str, float | None]:
    """(route, cost) of a call made sync, async or streamed."""
    if twin == "sync":
        answer = guard.chat(USER, max_tokens=1)
    elif twin == "async":
        answer = anyio.run(lambda: guard.achat(USER, max_tokens=1))
    else:
        with guard.chat(USER, stream=True, max_tokens=1) as stream:
            list(stream)
        answer = stream.response
    return answer.route, answer.cost_usd


def _slow(twin: str) -> Fault:
    """An attempt that times out after its request went out (billed its prompt)."""
    return Fault(first_token_delay=3.0) if twin == "stream" else Fault(latency=3.0)


@pytest.mark.parametrize("twin", ["sync", "async", "stream"])
def test_a_refused_top_up_downgrades_the_call_when_its_budget_says_downgrade(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    store: RedisStore | None,
    twin: str,
) -> None:
    """The primary's retry does not fit the cap: the budget says downgrade, so the call
    goes to the cheaper backup (which fits what is held) instead of ending with
    BudgetExceededError."""
    events: list[BudgetEvent] = []
    guard = _moving_guard(make_guard, store, fake, fake2, policy="downgrade", events=events)
    fake.always(_slow(twin))
    route, cost = _answer(guard, twin)
    assert route == "backup"
    assert fake.stats.requests == 1  # the primary's retry never went out
    assert [e.action for e in events if e.kind == "exhausted"] == ["downgraded"]
    assert cost is not None
    assert cost > PROMPT_USD  # the primary's prompt, then the backup
    spent = _spent(guard)
    assert spent == pytest.approx(cost)
    assert spent <= TIGHT_USD


@pytest.mark.parametrize("twin", ["sync", "async", "stream"])
def test_a_refused_top_up_sends_the_call_to_its_local_route_when_its_budget_says_local_only(
    fake: FakeProvider, make_guard: MakeGuard, store: RedisStore | None, twin: str
) -> None:
    events: list[BudgetEvent] = []
    with FakeProvider(model="local-model", name="local") as local:
        guard = _moving_guard(make_guard, store, fake, local, policy="local_only", events=events)
        fake.always(_slow(twin))
        route, cost = _answer(guard, twin)
        assert (route, local.stats.requests, fake.stats.requests) == ("local", 1, 1)
    assert [e.action for e in events if e.kind == "exhausted"] == ["local_only"]
    assert cost == pytest.approx(PROMPT_USD)  # the primary's prompt; the local answer is free
    assert _spent(guard) == pytest.approx(PROMPT_USD)


def test_a_refused_top_up_ends_the_call_when_the_cheaper_route_was_tried_already(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The backup failed first; the primary's retry does not fit: no cheaper route is left,
    so the call ends with the budget's error, as a budget that refuses does."""
    events: list[BudgetEvent] = []
    guard = _moving_guard(make_guard, None, fake2, fake, policy="downgrade", events=events)
    fake2.always(Fault(status=503))
    fake.always(Fault(latency=3.0))
    with pytest.raises(BudgetExceededError):
        guard.chat(USER, max_tokens=1)
    assert fake.stats.requests == 1
    assert [e.action for e in events if e.kind == "exhausted"] == ["refused"]
    assert _spent(guard) == pytest.approx(PROMPT_USD)


def test_a_downgraded_call_whose_cheaper_route_does_not_fit_either_is_refused(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """Moved to the backup after a refused top-up, the backup's own attempt needs more
    than the cap has room for: the call ends there (a downgrade happens once)."""
    dear = PRICES.with_prices({"backup-model": Price(input=100.0, output=200.0)})
    events: list[BudgetEvent] = []
    budgets = Budgets(
        [Budget(limit_usd=TIGHT_USD, on_exhausted="downgrade")],
        prices=dear,
        downgrade_to=["backup"],
        on_event=[events.append],
    )
    guard = make_guard(fake, fake2, budgets=budgets, retry=RETRIES, attempt_timeout=1.0)
    fake.always(Fault(latency=3.0))
    with pytest.raises(BudgetExceededError):
        guard.chat(USER, max_tokens=1)
    assert (fake.stats.requests, fake2.stats.requests) == (1, 0)
    assert [e.action for e in events if e.kind == "exhausted"] == ["downgraded", "refused"]
    assert _spent(guard) == pytest.approx(PROMPT_USD)


@pytest.mark.parametrize("clamp", [True, False])
@pytest.mark.parametrize("kind", ["complete", "stream"])
def test_a_retry_the_cap_has_too_little_room_for_is_clamped_with_clamp_max_tokens(
    fake: FakeProvider, make_guard: MakeGuard, store: RedisStore | None, kind: str, clamp: bool
) -> None:
    """With ``clamp_max_tokens`` a call's ``max_tokens`` is lowered to what the budgets
    allow instead of refusing it: a retry's top-up too (it was refused, whatever the
    setting, while the cap had room for a few of its output tokens)."""
    hold_usd = PROMPT_USD * 1.1 + 10 * 200 / 1e6  # one attempt with max_tokens=10
    limit = hold_usd + PROMPT_USD / 2  # the retry's prompt fits, not its 10 output tokens
    budgets = Budgets(
        [Budget(limit_usd=limit)], prices=PRICES, clamp_max_tokens=clamp, min_output_tokens=2
    )
    options: dict[str, Any] = {} if store is None else {"store": store}
    guard = make_guard(
        fake, budgets=budgets, retry=RETRIES, attempt_timeout=1.0, timeout=20, **options
    )
    fake.script(_slow("stream" if kind == "stream" else "sync"), None)
    if not clamp:
        with pytest.raises(BudgetExceededError):
            _call(guard, kind, max_tokens=10)
        assert fake.stats.requests == 1
        return
    _call(guard, kind, max_tokens=10)
    assert fake.stats.requests == 2
    assert [r.body["max_tokens"] for r in fake.requests] == [10, pytest.approx(5, abs=3)]
    assert _spent(guard) <= limit
