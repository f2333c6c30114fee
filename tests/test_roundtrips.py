"""Round trips to Redis per guarded call, and the give-backs of what a call takes ahead.

The happy path of a call (every stage on, the exact cache misses) waits for Redis twice: one
batch before the provider call (cache lookup, spend reserve, breaker permit, rate-limit
reserve) and one after it (breaker record, rate-limit settle, retry-budget count, spend
settle, cache store). These tests count round trips with tools/roundtrips.py, on a real
standalone Redis and on the 3-master cluster, sync and async, and check that a stage that
says no (a cache hit, a budget, an open breaker) leaves nothing taken behind.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard, ResponseCache
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.errors import BudgetExceededError
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.store import Batch, Pause, RedisScripts, RedisStore, run
from llmguard_sdk.testing import FakeProvider

from .conftest import RedisTarget, redis_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from roundtrips import RoundTrips

PRICES = PriceTable.default_table().with_prices(
    {"fake-model": Price(input=1.0, output=2.0), "backup-model": Price(input=1.0, output=2.0)}
)
KINDS = ["redis", "cluster"]


def every_stage(target: tuple[str, str], **extra: Any) -> dict[str, Any]:
    """Guard options with every stage that keeps state in the store."""
    url, prefix = target
    options: dict[str, Any] = {
        "store": url,
        "key_prefix": prefix,
        "rate_limits": {"primary": RateLimit(rpm=100_000, tpm=100_000_000)},
        "budgets": Budgets([Budget(1_000.0, scope="tenant")], prices=PRICES),
        "cache": True,
    }
    options.update(extra)
    return options


def every_stage_counted(target: tuple[str, str]) -> dict[str, Any]:
    """:func:`every_stage`, its cache reading the change stream only at the first call (a
    read that came due on a slow machine would add a command to the counted call's batch)."""
    url, prefix = target
    store = redis_store(url, prefix)
    return every_stage(target, store=store, cache=ResponseCache(store, sync_interval=3600.0))


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_with_every_stage_waits_for_redis_twice(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    guard = make_guard(fake, **every_stage_counted(redis_target(kind)))
    for index in range(3):  # scripts loaded, the change stream read
        guard.chat(ask(f"warm up {index}"), tenant="acme", max_tokens=8)
    for question in ("what is the capital of France", "how tall is Mont Blanc"):
        with RoundTrips() as counted:
            answer = guard.chat(ask(question), tenant="acme", max_tokens=8)
        assert answer.route == "primary"
        assert counted.round_trips == 2
        # cache read, spend reserve, permit, rate-limit reserve; breaker record, rate-limit
        # settle, retry-budget count, spend settle, cache store
        assert counted.commands == 9
        if kind == "redis":
            assert counted.writes == 2  # one pipeline each way
        else:
            assert 2 <= counted.writes <= 6  # one pipeline per node a round trip touches


@pytest.mark.parametrize("kind", KINDS)
def test_an_async_call_waits_for_redis_twice(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    guard = make_guard(fake, **every_stage_counted(redis_target(kind)))

    async def main() -> list[tuple[int, int]]:
        found = []
        try:
            for index in range(3):
                await guard.achat(ask(f"warm up {index}"), tenant="acme", max_tokens=8)
            for question in ("what is the capital of France", "how tall is Mont Blanc"):
                with RoundTrips() as counted:
                    answer = await guard.achat(ask(question), tenant="acme", max_tokens=8)
                assert answer.route == "primary"
                found.append((counted.round_trips, counted.commands))
        finally:
            await guard.aclose()
        return found

    assert anyio.run(main) == [(2, 9), (2, 9)]


def _read(stream: Any) -> tuple[int, str]:
    """Read a stream to its end: (round trips while the first chunk came, text)."""
    chunks = iter(stream)
    with RoundTrips() as before_first:
        first = next(chunks)
    return before_first.round_trips, first.text + "".join(c.text for c in chunks)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_with_every_stage_waits_for_redis_twice(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    """A stream opens with the same batch as a plain call, before its first chunk, and
    sends its records, settles and cache store in one batch after its last chunk."""
    guard = make_guard(fake, **every_stage(redis_target(kind)))
    for index in range(3):  # scripts loaded, the change stream read
        with guard.chat(ask(f"warm up {index}"), stream=True, tenant="acme", max_tokens=8) as s:
            _read(s)
    for question in ("what is the capital of France", "how tall is Mont Blanc"):
        with (
            RoundTrips() as counted,
            guard.chat(ask(question), stream=True, tenant="acme", max_tokens=8) as stream,
        ):
            before_first, text = _read(stream)
        assert text
        assert stream.response.route == "primary"
        assert before_first == 1  # the opening batch only: nothing waits between chunks
        assert counted.round_trips == 2
        assert counted.commands == 9  # as a plain call's


@pytest.mark.parametrize("kind", KINDS)
def test_an_async_stream_waits_for_redis_twice(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    guard = make_guard(fake, **every_stage(redis_target(kind)))

    async def read(question: str) -> tuple[int, int, str]:
        with RoundTrips() as counted:
            stream = await guard.achat(ask(question), stream=True, tenant="acme", max_tokens=8)
            async with stream:
                with RoundTrips() as before_first:
                    text = (await stream.__anext__()).text
                text += "".join([chunk.text async for chunk in stream])
        assert stream.response.route == "primary"
        return counted.round_trips, counted.commands, text and str(before_first.round_trips)

    async def main() -> list[tuple[int, int, str]]:
        try:
            for index in range(3):
                await read(f"warm up {index}")
            return [await read(q) for q in ("the capital of France", "how tall is Mont Blanc")]
        finally:
            await guard.aclose()

    assert anyio.run(main) == [(2, 9, "1"), (2, 9, "1")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_closed_early_settles_in_one_round_trip(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    """A stream closed after its first chunk gives its concurrency lease and breaker permit
    back and settles its spend to what was delivered, in one round trip."""
    guard = make_guard(
        fake,
        **every_stage(
            redis_target(kind), rate_limits={"primary": RateLimit(rpm=100_000, concurrency=1)}
        ),
    )
    for index in range(4):
        stream = guard.chat(ask(f"question {index}"), stream=True, tenant="acme", max_tokens=8)
        assert any(chunk.text for chunk in stream)  # up to the first text
        with RoundTrips() as counted:
            stream.close()
        if index:
            assert counted.round_trips == 1
    limiter = guard.rate_limiter
    assert isinstance(limiter, RedisRateLimiter)
    assert limiter.in_flight("primary") == 0
    spend = guard._stages.spend
    assert spend is not None
    (row,) = spend.status(tenant="acme")
    assert row["held_usd"] == 0
    assert row["spent_usd"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_hedged_stream_races_on_what_the_opening_took(
    kind: str,
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_target: RedisTarget,
) -> None:
    """A hedged stream's first leg runs on the permit and reservation of the opening batch;
    the first route answers before the hedge, so nothing more is asked, and the leases go
    back with the tail."""
    limits = {
        "primary": RateLimit(rpm=100_000, concurrency=1),
        "backup": RateLimit(rpm=100_000, concurrency=1),
    }
    guard = make_guard(
        fake, fake2, hedge_after=30.0, **every_stage(redis_target(kind), rate_limits=limits)
    )
    for index in range(4):
        with (
            RoundTrips() as counted,
            guard.chat(ask(f"question {index}"), stream=True, tenant="acme", max_tokens=8) as s,
        ):
            assert "".join(chunk.text for chunk in s)
        assert s.response.route == "primary"
        if index:
            assert counted.round_trips == 2
    limiter = guard.rate_limiter
    assert isinstance(limiter, RedisRateLimiter)
    assert (limiter.in_flight("primary"), limiter.in_flight("backup")) == (0, 0)
    assert not fake2.requests


@pytest.mark.parametrize("kind", KINDS)
def test_a_streamed_cache_hit_gives_back_what_the_opening_took(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    """A stream answered by the cache gives back the reservation and the spend hold of its
    opening batch in one more round trip, as a plain call does (and settles nothing twice)."""
    guard = make_guard(
        fake,
        **every_stage(redis_target(kind), rate_limits={"primary": RateLimit(rpm=2, concurrency=5)}),
    )
    guard.chat(ask("what is the capital of France"), tenant="acme", max_tokens=8)
    for attempt in range(3):
        with (
            RoundTrips() as counted,
            guard.chat(
                ask("what is the capital of France"), stream=True, tenant="acme", max_tokens=8
            ) as stream,
        ):
            chunks = list(stream)
        assert len(chunks) == 1
        assert stream.response.route == "cache"
        if attempt:
            assert counted.round_trips == 2  # the batch, then the give-back
            assert counted.commands == 7  # 4 asked; 3 given back (lease, permit, hold)
    limiter = guard.rate_limiter
    assert isinstance(limiter, RedisRateLimiter)
    assert limiter.in_flight("primary") == 0
    assert limiter.reserve("primary").allowed  # the first call's request, and one left
    spend = guard._stages.spend
    assert spend is not None
    (row,) = spend.status(tenant="acme")
    assert row["held_usd"] == 0
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_cache_change_stream_rides_along_with_the_first_round_trip(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    """With ``sync_interval=0`` every call reads the other processes' cache changes; that
    read joins the call's first batch instead of costing a round trip of its own."""
    url, prefix = redis_target(kind)
    store = redis_store(url, prefix)  # one store: one pipeline (another store: its own)
    cache = ResponseCache(store, sync_interval=0.0)
    guard = make_guard(fake, **every_stage((url, prefix), store=store, cache=cache))
    other = make_guard(fake, **every_stage((url, prefix)))
    for index in range(3):
        guard.chat(ask(f"warm up {index}"), tenant="acme", max_tokens=8)
    other.chat(ask("a question from another process"), tenant="acme", max_tokens=8)
    with RoundTrips() as counted:
        guard.chat(ask("what is the capital of France"), tenant="acme", max_tokens=8)
    assert counted.round_trips == 2
    assert counted.commands == 10  # the stream read too
    assert cache.stats.misses >= 1
    cache.close()


@pytest.mark.parametrize("kind", ["memory", "redis", "cluster"])
def test_a_cache_hit_gives_back_the_rate_limit_and_the_spend_hold(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    """The first batch reserves on the bet of a miss; a hit gives the reservation back,
    request included, and releases the spend hold: hits use no rate limit and no budget."""
    url, prefix = ("memory", "llmguard") if kind == "memory" else redis_target(kind)
    store = "memory" if kind == "memory" else redis_store(url, prefix)
    cache = ResponseCache(store)
    filler = make_guard(fake, cache=cache, store=store)
    filler.chat(ask("what is the capital of France"), tenant="acme", max_tokens=8)
    guard = make_guard(
        fake,
        store=store,
        cache=cache,
        rate_limits={"primary": RateLimit(rpm=2, concurrency=5)},
        budgets=Budgets([Budget(1_000.0, scope="tenant")], prices=PRICES),
    )
    for attempt in range(3):
        with RoundTrips() as counted:
            hit = guard.chat(ask("what is the capital of France"), tenant="acme", max_tokens=8)
        assert hit.route == "cache"
        if attempt and kind != "memory":  # the first loaded the scripts
            assert counted.round_trips == 2  # the batch, then the give-back
    limiter = guard.rate_limiter
    assert isinstance(limiter, (MemoryRateLimiter, RedisRateLimiter))
    assert limiter.in_flight("primary") == 0
    assert all(limiter.reserve("primary").allowed for _ in range(2))  # both requests left
    spend = guard._stages.spend
    assert spend is not None
    (row,) = spend.status(tenant="acme")
    assert row["held_usd"] == 0
    assert row["spent_usd"] == 0
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", ["memory", "redis", "cluster"])
def test_a_budget_refusal_gives_back_the_permit_and_the_reservation(
    kind: str, fake: FakeProvider, make_guard: Callable[..., Guard], redis_target: RedisTarget
) -> None:
    url, prefix = ("memory", "llmguard") if kind == "memory" else redis_target(kind)
    guard = make_guard(
        fake,
        store=url,
        key_prefix=prefix,
        rate_limits={"primary": RateLimit(rpm=2, concurrency=5)},
        budgets=Budgets([Budget(0.000001, scope="tenant")], prices=PRICES),
        cache=True,
    )
    for _ in range(3):
        with pytest.raises(BudgetExceededError):
            guard.chat(ask("write a long essay"), tenant="acme", max_tokens=500)
    limiter = guard.rate_limiter
    assert isinstance(limiter, (MemoryRateLimiter, RedisRateLimiter))
    assert limiter.in_flight("primary") == 0
    assert all(limiter.reserve("primary").allowed for _ in range(2))
    assert not fake.requests


@pytest.mark.parametrize("kind", KINDS)
def test_a_route_the_breaker_refuses_gets_its_reservation_back(
    kind: str,
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_target: RedisTarget,
) -> None:
    """Another process opened the primary's breaker; this one did not know, so its first
    batch reserved on the primary. The refusal gives that back (request and lease)."""
    target = redis_target(kind)
    limits = {"primary": RateLimit(rpm=2, concurrency=5), "backup": RateLimit(rpm=100)}
    guard = make_guard(fake, fake2, **every_stage(target, rate_limits=limits))
    other = make_guard(fake, fake2, **every_stage(target, rate_limits=limits))
    breakers = other.breakers
    assert breakers is not None
    breakers.isolate("primary")
    for index in range(3):
        answer = guard.chat(ask(f"question {index}"), tenant="acme", max_tokens=8)
        assert answer.route == "backup"
    limiter = guard.rate_limiter
    assert isinstance(limiter, (MemoryRateLimiter, RedisRateLimiter))
    assert limiter.in_flight("primary") == 0
    assert all(limiter.reserve("primary").allowed for _ in range(2))
    assert not fake.requests


def test_a_batch_reloads_scripts_redis_lost(redis_url: str, redis_prefix: str) -> None:
    """After SCRIPT FLUSH (or a restarted Redis), the batch loads what Redis lacks and sends
    those commands again; the others keep their first answers."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    scripts = RedisScripts(store, "return ARGV[1]", "return redis.call('INCR', KEYS[1])")
    key = store.key("test", "t", "n")

    def both() -> list[Any]:
        return [
            outcome.result()
            for outcome in Batch(
                [_one(scripts, 0, [key], ["a"]), _one(scripts, 1, [key], [])]
            ).run()
        ]

    assert both() == [b"a", 1]
    store.client.script_flush()
    assert both() == [b"a", 2]  # INCR ran once more, not twice
    store.close()


def test_steps_that_wait_and_fail_end_on_their_own(redis_url: str, redis_prefix: str) -> None:
    """A step's own exception ends that step only; a pause is waited once for the round."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    scripts = RedisScripts(store, "return ARGV[1]")

    def broken() -> Any:
        yield Pause(0.01)
        raise ValueError("a bug in a stage")

    outcomes = Batch([broken(), _one(scripts, 0, [store.key("t", "t", "x")], ["ok"])]).run()
    assert isinstance(outcomes[0].error, ValueError)
    assert outcomes[1].result() == b"ok"
    assert run(_one(scripts, 0, [store.key("t", "t", "x")], ["again"])) == b"again"
    store.close()


def _one(scripts: RedisScripts, index: int, keys: list[str], args: list[Any]) -> Any:
    return (yield scripts.command(index, keys, args))


def test_an_unreachable_redis_is_one_failed_round_per_call_at_most() -> None:
    """A batch against a dead Redis fails as a whole: every step falls back locally."""
    store = RedisStore("redis://127.0.0.1:1/0", key_prefix=f"x{uuid.uuid4().hex[:6]}")
    scripts = RedisScripts(store, "return 1")

    def step() -> Any:
        try:
            return (yield scripts.command(0, [store.key("t", "t", "k")]))
        except Exception as exc:  # the Redis error, thrown into the step
            return type(exc).__name__

    outcomes = Batch([step(), step()]).run()
    assert [o.result() for o in outcomes] == ["ConnectionError", "ConnectionError"]
    store.close()


def test_a_budgeted_call_without_max_tokens_hits_the_cache(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    """The budget gives the call its default ``max_tokens`` before the cache looks it up, so
    the lookup sees the request that was stored."""
    guard = make_guard(
        fake, cache=True, budgets=Budgets([Budget(100.0, scope="tenant")], prices=PRICES)
    )
    first = guard.chat(ask("what is the capital of France"), tenant="acme")
    again = guard.chat(ask("what is the capital of France"), tenant="acme")
    assert (first.route, again.route) == ("primary", "cache")
    assert len(fake.requests) == 1
