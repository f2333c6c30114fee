"""Review of the call pipeline: every wait bounded, nothing leaked, sync and async alike."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import AsyncChatStream, CallEvent, Guard, RequestValidationError
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, USER, chat_in_mode
from .rawserver import RawServer, chat_chunk_event, http_response, sse_head

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
    response = chat_in_mode(guard, mode)
    assert response.text


def _limited(kind: str) -> dict[str, Any]:
    """A Guard's options: a rate limit on its route, or a spend budget."""
    if kind == "rate_limits":
        return {"rate_limits": {"primary": RateLimit(tpm=10_000, concurrency=2)}}
    prices = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})
    return {"budgets": Budgets([Budget(limit_usd=1.0)], prices=prices)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("kind", ["rate_limits", "budgets"])
def test_a_huge_output_limit_is_a_request_error_before_anything_is_reserved(
    fake: FakeProvider, make_guard: MakeGuard, kind: str, limit: str, mode: str
) -> None:
    """``max_tokens=10**400`` was a bare OverflowError from the rate limit's reservation (or
    the budget's estimate) turning it into a float; no model answers more than 2**31 - 1
    tokens: a larger limit is a RequestValidationError naming it, before any stage runs."""
    guard = make_guard(fake, **_limited(kind))
    for huge in (10**400, 2**31):
        with pytest.raises(RequestValidationError, match=f"{limit}: .*2147483647"):
            chat_in_mode(guard, mode, **{limit: huge})
    assert fake.stats.requests == 0
    if kind == "rate_limits":
        limiter: Any = guard.rate_limiter
        assert limiter.in_flight("primary") == 0
        whole = limiter.reserve("primary", tokens=10_000)  # nothing was taken
        assert whole.allowed
        limiter.settle("primary", token_delta=-10_000, lease=whole.lease)
    else:
        assert [(row["spent_usd"], row["held_usd"]) for row in guard.budget_status()] == [
            (0.0, 0.0)
        ]
    assert chat_in_mode(guard, "sync", **{limit: 20}).text  # a sound limit is served


def test_the_largest_output_limit_is_refused_by_the_limit_or_budget_it_exceeds(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """At the bound, the stages refuse the call with their own typed errors."""
    from llmguard_sdk import BudgetExceededError, RateLimitExceededError

    for kind, error in (("rate_limits", RateLimitExceededError), ("budgets", BudgetExceededError)):
        guard = make_guard(fake, **_limited(kind))
        with pytest.raises(error):
            guard.chat(USER, max_tokens=2**31 - 1)
    assert fake.stats.requests == 0


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


def test_async_streams_left_open_when_the_loop_ends_give_their_slots_back(
    fake: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str
) -> None:
    """Async streams read part-way and never closed are closed by the event loop's shutdown,
    which closes every async generator at once: a stream's own generator and the ones inside
    it. When an inner one was being closed already, the stream's end raised
    "aclose(): asynchronous generator is already running" before its tail went out, so its
    concurrency slot (and its spend hold) stayed taken in Redis until the lease ran out."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    guard = make_guard(
        fake, store=store, rate_limits={"primary": RateLimit(concurrency=50, tpm=10**6)}
    )
    fake.always(Fault(inter_token_delay=0.05))
    left_open: list[AsyncChatStream] = []

    async def read_a_little() -> None:
        for _ in range(8):
            stream = await guard.achat(USER, stream=True)
            async for chunk in stream:
                if chunk.text:
                    break
            left_open.append(stream)

    asyncio.run(read_a_little())
    limiter: Any = guard.rate_limiter
    assert limiter.in_flight("primary") == 0


def test_async_calls_cancelled_in_their_opening_round_trip_give_their_slots_back(
    fake: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str
) -> None:
    """A call cancelled while its opening batch (cache, spend, the first route's rate-limit
    reservation taken ahead) was in Redis lost what the batch took: the concurrency slot
    stayed taken until its lease ran out (about 20 of 300 such calls here)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    guard = make_guard(
        fake,
        store=store,
        breaker=None,
        timeout=30,
        rate_limits={"primary": RateLimit(concurrency=1000, tpm=10**8)},
    )
    fake.always(Fault(latency=0.5))

    async def cancel_early() -> None:
        for i in range(300):
            with anyio.move_on_after((i % 60) * 0.0001):
                await guard.achat(USER)

    anyio.run(cancel_early)
    limiter: Any = guard.rate_limiter
    assert limiter.in_flight("primary") == 0


def test_async_calls_cancelled_in_a_later_round_trip_give_their_slots_back(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    redis_url: str,
    redis_prefix: str,
) -> None:
    """A call cancelled while a round trip of its route loop was in Redis (the next route's
    reservation, asked with the failed route's settle and record) lost both: the next
    route's slot stayed taken until its lease ran out (about 26 of 300 such calls here)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    limit = RateLimit(concurrency=1000, tpm=10**8)
    guard = make_guard(
        fake,
        fake2,
        store=store,
        breaker=None,
        retry=None,
        timeout=30,
        rate_limits={"primary": limit, "backup": limit},
    )
    fake.always(Fault(status=500))
    fake2.always(Fault(latency=0.5))

    async def cancel_early() -> None:
        for i in range(300):
            with anyio.move_on_after(0.001 + (i % 100) * 0.0001):
                await guard.achat(USER)

    anyio.run(cancel_early)
    limiter: Any = guard.rate_limiter
    assert (limiter.in_flight("primary"), limiter.in_flight("backup")) == (0, 0)


def test_cache_tags_given_as_one_string_are_refused_before_any_call(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """``cache_tags="ab"`` was split into the tags "a" and "b", so the permission groups
    "ab" and "ba" (or "a" and "aa") read each other's cached answers."""
    guard = make_guard(fake, cache=ResponseCache())
    guard.chat(USER, tenant="acme", cache_tags=["ab"])
    for tags in ("ab", "ba", b"ab"):
        with pytest.raises(RequestValidationError, match="cache_tags"):
            guard.chat(USER, tenant="acme", cache_tags=tags)  # type: ignore[arg-type]
    with pytest.raises(RequestValidationError, match="cache_tags"):
        guard.chat(USER, tenant="acme", cache_tags=["ab", 7])  # type: ignore[list-item]
    with pytest.raises(RequestValidationError, match="cache_tags"):
        guard.chat(USER, tenant="acme", cache_tags=7)  # type: ignore[call-overload]
    assert guard.chat(USER, tenant="acme", cache_tags=("ab",)).route == "cache"
    assert fake.stats.requests == 1


def test_a_cacheable_that_is_not_a_bool_is_refused_before_any_call(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """``cacheable="no"`` (a setting read as text) was true: the answer the caller meant to
    keep out of the cache was stored and served to the next identical call."""
    guard = make_guard(fake, cache=ResponseCache())
    for flag in ("no", "false", 0, None):
        with pytest.raises(RequestValidationError, match="cacheable"):
            guard.chat(USER, cacheable=flag)  # type: ignore[call-overload]
    assert fake.stats.requests == 0
    guard.chat(USER, cacheable=False)
    assert guard.chat(USER).route == "primary"


@pytest.mark.parametrize("option", ["timeout", "hedge_after"])
def test_a_bool_is_no_number_of_seconds(
    fake: FakeProvider, make_guard: MakeGuard, option: str
) -> None:
    """``timeout=True`` (a flag passed where seconds go) was a one-second deadline."""
    guard = make_guard(fake)
    for flag in (True, False):
        with pytest.raises(RequestValidationError, match=option):
            guard.chat(USER, **{option: flag})  # type: ignore[call-overload]
    assert fake.stats.requests == 0
    seconds: dict[str, Any] = {option: 1}
    assert guard.chat(USER, **seconds).text  # whole seconds are numbers


def test_async_hedged_streams_cancelled_as_their_race_ends_give_the_winner_back(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """A hedged stream cancelled just as its race had a winner (leaving the race's task group
    is where the cancellation lands) lost the winner: its concurrency slot stayed taken and its
    provider stream was never closed."""
    limit = RateLimit(concurrency=1000, tpm=10**8)
    guard = make_guard(
        fake,
        fake2,
        breaker=None,
        hedge_after=0.01,
        timeout=30,
        rate_limits={"primary": limit, "backup": limit},
    )
    fake.always(Fault(first_token_delay=0.2))
    fake2.always(Fault(first_token_delay=0.03, inter_token_delay=0.01))

    async def cancel_around_the_win() -> None:
        for i in range(100):
            with anyio.move_on_after(0.035 + i * 0.0003):
                stream = await guard.achat(USER, stream=True)
                async with stream:
                    async for _chunk in stream:
                        pass

    anyio.run(cancel_around_the_win)
    limiter: Any = guard.rate_limiter
    assert (limiter.in_flight("primary"), limiter.in_flight("backup")) == (0, 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_dropped_without_closing_is_reported_cancelled(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    """A stream read part-way and dropped (garbage collected) gave its slot back but was
    never reported: no CallEvent, no telemetry for the call."""
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    fake.always(Fault(inter_token_delay=0.05))
    if mode == "sync":
        for chunk in guard.chat(USER, stream=True):
            if chunk.text:
                break
        gc.collect()
    else:

        async def read_a_little() -> None:
            async for chunk in await guard.achat(USER, stream=True):
                if chunk.text:
                    break
            gc.collect()
            await anyio.sleep(0.2)  # the loop closes the dropped generator

        anyio.run(read_a_little)
    assert [(e.kind, e.outcome) for e in events] == [("stream", "cancelled")]


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_an_async_call_waiting_for_a_slot_is_cancelled_at_once(
    fake: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str, shared: bool
) -> None:
    """Round trips to Redis are not cut short by a cancellation, but a wait for a concurrency
    slot is no round trip: a call cancelled while it waits ends then, not when the slot comes
    free (here: 5 s later), and leaves nothing taken."""
    options: dict[str, Any] = {"store": RedisStore(redis_url, key_prefix=redis_prefix)}
    guard = make_guard(
        fake,
        breaker=None,
        retry=None,
        rate_limits={"primary": RateLimit(concurrency=1, max_wait=30)},
        **(options if shared else {}),
    )
    fake.script(Fault(latency=5.0))
    waited: list[float] = []

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(guard.achat, USER)  # holds the one slot for 5 s
            await anyio.sleep(0.3)
            started = anyio.current_time()
            with anyio.move_on_after(0.3):
                await guard.achat(USER)  # waits for the slot, cancelled after 0.3 s
            waited.append(anyio.current_time() - started)

    anyio.run(main)
    assert waited[0] < 2.5  # cancelled while waiting, not served after the first call
    limiter: Any = guard.rate_limiter
    assert limiter.in_flight("primary") == 0


@pytest.mark.parametrize("stream", [False, True])
def test_an_async_call_cancelled_waiting_for_a_slot_gives_its_spend_hold_back(
    fake: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """With state in Redis the spend reservation and the wait for the first route's slot are
    one batch: the reservation is made in its first round, the slot waited for in later
    ones. A call cancelled while it waits gave back its slot wait but not its reservation,
    which stayed held (and counted against the budget) until its TTL."""
    prices = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=1.0)})
    guard = make_guard(
        fake,
        breaker=None,
        retry=None,
        store=RedisStore(redis_url, key_prefix=redis_prefix),
        budgets=Budgets([Budget(limit_usd=100.0, scope="tenant")], prices=prices),
        rate_limits={"primary": RateLimit(concurrency=1, max_wait=30)},
    )
    fake.script(Fault(latency=3.0))
    spend = guard._stages.spend
    assert spend is not None
    held: list[float] = []

    async def cancelled_while_waiting() -> None:
        if stream:
            await (await guard.achat(USER, stream=True, tenant="acme")).aclose()
        else:
            await guard.achat(USER, tenant="acme")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: guard.achat(USER, tenant="acme"))  # holds the slot 3 s
            for _ in range(200):  # (its opening, a first call's, may take a moment)
                if first := spend.status(tenant="acme")[0]["held_usd"]:
                    break
                await anyio.sleep(0.05)
            with anyio.move_on_after(0.3):
                await cancelled_while_waiting()  # waits for the slot, cancelled after 0.3 s
            held.extend([first, spend.status(tenant="acme")[0]["held_usd"]])

    anyio.run(main)
    first, after_cancel = held
    assert first > 0  # the first call's hold
    assert after_cancel == pytest.approx(first)  # the cancelled call holds nothing
    assert spend.status(tenant="acme")[0]["held_usd"] == 0  # both done: nothing held


@pytest.mark.parametrize("stage", ["opening", "route loop", "hedge"])
def test_an_async_call_cancelled_while_its_reservation_is_in_redis_gives_its_slot_back(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    redis_url: str,
    redis_prefix: str,
    stage: str,
) -> None:
    """asyncio's own cancellation cuts a round trip to Redis short (anyio's waits for it):
    a call cancelled after its rate-limit reservation had run in Redis, its answer on the
    way, never learnt its concurrency lease, and the slot stayed taken until the lease ran
    out (the call's deadline plus a grace). In the opening batch, in the route loop (the
    next route's reservation, after the first route failed), or for a hedge's second leg."""
    from llmguard_sdk.ratelimit import RedisRateLimiter

    from .heldanswer import AnswerHeld

    limit = RateLimit(concurrency=10, tpm=10**8)
    limits = {"primary": [limit], "backup": [limit]}
    route = "primary" if stage == "opening" else "backup"
    fake.always(Fault(latency=5.0) if stage == "hedge" else Fault(status=500))
    hedge_after = 0.01 if stage == "hedge" else None
    direct = RedisRateLimiter(RedisStore(redis_url, key_prefix=redis_prefix), limits)

    async def cancelled() -> tuple[int, int]:
        # the reservation's lease keys, for the held route only
        marker = direct._cells(route, None)[0][0][2].encode()
        proxy = AnswerHeld(redis_url, marker)
        async with proxy as url:
            store = RedisStore(url, key_prefix=redis_prefix)
            guard = make_guard(
                fake, fake2, store=store, breaker=None, retry=None, timeout=30,
                rate_limits={"primary": limit, "backup": limit}, hedge_after=hedge_after,
            )  # fmt: skip
            call = asyncio.ensure_future(guard.achat(USER))
            await proxy.holding.wait()  # the reservation ran in Redis, its answer held back
            taken = direct.in_flight(route)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            return taken, direct.in_flight(route)

    taken, after = asyncio.run(cancelled())
    assert taken == 1
    assert after == 0  # given back as the call ended


def test_an_async_call_cancelled_while_its_spend_hold_is_in_redis_gives_it_back(
    fake: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str
) -> None:
    """asyncio's own cancellation cut the opening round trip after the spend reservation had
    run in Redis: the call never learnt of its hold, which counted against the budget until
    its TTL (the call's deadline plus the hold's seconds)."""
    from .heldanswer import AnswerHeld

    prices = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=1.0)})
    budgets = Budgets([Budget(limit_usd=100.0, scope="tenant")], prices=prices)
    direct = make_guard(
        fake, breaker=None, budgets=budgets, store=RedisStore(redis_url, key_prefix=redis_prefix)
    )
    spend = direct._stages.spend
    assert spend is not None

    async def cancelled() -> tuple[float, float]:
        proxy = AnswerHeld(redis_url, f"{redis_prefix}:budget:".encode())
        async with proxy as url:
            store = RedisStore(url, key_prefix=redis_prefix)
            guard = make_guard(fake, store=store, breaker=None, timeout=30, budgets=budgets)
            call = asyncio.ensure_future(guard.achat(USER, tenant="acme"))
            await proxy.holding.wait()  # the hold was made in Redis, its answer held back
            taken = spend.status(tenant="acme")[0]["held_usd"]
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            return taken, spend.status(tenant="acme")[0]["held_usd"]

    taken, after = asyncio.run(cancelled())
    assert taken > 0
    assert after == 0  # given back as the call ended


def _absurd_answer(shape: str, huge: int) -> tuple[bytes, tuple[bytes, ...]]:
    """A loopback provider's answer ("Hi"), its usage reporting ``huge`` tokens."""
    if shape == "messages":  # Anthropic: huge cache reads beside a small input
        usage: dict[str, Any] = {"input_tokens": 3, "output_tokens": 1}
        usage["cache_read_input_tokens"] = huge
        body = {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
            "usage": usage,
        }  # fmt: skip
        return http_response(json.dumps(body).encode()), ()
    usage = {"prompt_tokens": huge, "completion_tokens": 1}
    if shape == "stream":  # the usage chunk of include_usage
        last = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": []}
        events = chat_chunk_event({"content": "Hi"}) + chat_chunk_event({}, "stop")
        final = b"data: " + json.dumps({**last, "usage": usage}).encode() + b"\n\n"
        return sse_head(), (events + final + b"data: [DONE]\n\n",)
    body = {
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hi"}}],
        "usage": usage,
    }  # fmt: skip
    return http_response(json.dumps(body).encode()), ()


def assert_estimated(response: Any) -> None:
    """``response`` is "Hi" with its usage estimated (a sane one) and a sane cost."""
    assert response.text == "Hi"
    assert response.usage is not None
    assert response.usage.estimated
    assert 0 < response.usage.input_tokens < 100
    assert response.cost_usd is not None
    assert response.cost_usd < 1e-3


def assert_settled_on_estimates(guard: Guard, route: str) -> None:
    """The rate limit of ``route`` (10,000 tpm) and the budget were settled on estimates."""
    limiter: Any = guard.rate_limiter
    whole = limiter.reserve(route, tokens=9_000)
    assert whole.allowed
    limiter.settle(route, token_delta=-9_000, lease=whole.lease)
    assert guard.budget_status()[0]["spent_usd"] < 1e-2


@pytest.mark.parametrize("huge", [10**400, 2**31], ids=["10**400", "2**31"])
@pytest.mark.parametrize("shape", ["chat", "stream", "messages"])
def test_an_absurd_reported_usage_is_estimated_and_limits_settle_on_a_sane_number(
    shape: str, huge: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider reporting 10**400 tokens made the rate limit's settle (``10**400 - 1.0``)
    or the cost an OverflowError deep inside the call; 2**31 tokens (more than any context or
    ``max_tokens`` holds) drained the limit and the budget. A count above 2**31 - 1 is no
    count: the call is served, its usage estimated as for none reported, a warning logged."""
    from llmguard_sdk.providers import AnthropicProvider, OpenAICompatibleProvider
    from llmguard_sdk.telemetry import _repeats

    log = _repeats.RepeatedLog(background=False)  # this test's window of repeated warnings
    monkeypatch.setattr(_repeats, "repeats", log)
    head, parts = _absurd_answer(shape, huge)
    prices = PriceTable.default_table().with_prices({"m": Price(input=1.0, output=2.0)})
    with RawServer(head, parts) as raw:
        kind = AnthropicProvider if shape == "messages" else OpenAICompatibleProvider
        route = kind(raw.base_url, model="m", name="raw")
        guard = Guard(
            route,
            rate_limits={"raw": RateLimit(tpm=10_000, concurrency=2)},
            budgets=Budgets([Budget(limit_usd=1.0)], prices=prices),
            retry=None,
            environ={},
        )
        with guard, caplog.at_level("WARNING", logger="llmguard_sdk"):
            for mode in MODES * 2:
                if shape == "stream":
                    with guard.chat(USER, stream=True, max_tokens=20) as stream:
                        assert "".join(chunk.text for chunk in stream) == "Hi"
                    response = stream.response
                else:
                    response = chat_in_mode(guard, mode, max_tokens=20)
                assert_estimated(response)
            assert_settled_on_estimates(guard, "raw")
            log.flush()
    warned = [r.getMessage() for r in caplog.records if "reported usage" in r.getMessage()]
    assert len(warned) == 2, warned  # once, then the count of the three calls after it
    assert "above 2147483647 tokens" in warned[0]
    assert "repeated 3 more times" in warned[1]


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 10**400])
def test_a_seed_beyond_an_int64_is_a_request_error(seed: int) -> None:
    """The chat APIs take a seed as an int64: a larger one went out and came back a 400 from
    the provider (after the call's stages ran); it is refused as the request is read."""
    from llmguard_sdk.models import validate_request

    with pytest.raises(RequestValidationError, match="seed"):
        validate_request({"messages": [{"role": "user", "content": "hi"}], "seed": seed})
    kept = validate_request({"messages": [{"role": "user", "content": "hi"}], "seed": 2**63 - 1})
    assert kept.seed == 2**63 - 1
