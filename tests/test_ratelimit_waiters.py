"""Calls that wait for a concurrency slot: the wait they were allowed bounds all their waiting,
and a call that stopped waiting holds no place in the queue. Memory limiter (real clock) and a
real Redis."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk._state.steps import Call, Command, Step, _execute
from llmguard_sdk.ratelimit import (
    Grant,
    LimitsConfig,
    MemoryRateLimiter,
    RateLimit,
    RedisRateLimiter,
)
from llmguard_sdk.ratelimit.policy import CellState, reserve_all
from llmguard_sdk.store import hash_id
from tests.conftest import RawRedis, RedisTarget, redis_store


@pytest.fixture(params=["memory", "redis"])
def make(
    request: pytest.FixtureRequest, redis_target: RedisTarget
) -> Iterator[Callable[[LimitsConfig], Any]]:
    stores = []

    def build(limits: LimitsConfig) -> Any:
        if request.param == "memory":
            return MemoryRateLimiter(limits)
        store = redis_store(*redis_target("redis"))
        stores.append(store)
        return RedisRateLimiter(store, limits)

    yield build
    for store in stores:
        store.close()


def in_queue(limiter: Any) -> int:
    """Calls in the queue of route ``r``'s first limit (lapsed or not)."""
    if isinstance(limiter, MemoryRateLimiter):
        return len(limiter._cells[("r", 0, None)].queue)
    store = limiter._store
    return int(store.client.zcard(store.key("rl", hash_id("r"), "0") + ":q"))


def queued(limiter: Any, lease: str) -> tuple[Step[Grant], object]:
    """A call on ``r`` that asked once and queued for a slot, caught between two of its
    asks: (its step, what it waits on before asking again)."""
    step: Step[Grant] = limiter.reserve_steps("r", lease=lease)
    request = step.send(None)
    if isinstance(request, Command):  # Redis: its first ask's answer
        request = step.send(_execute(request.store, [request])[0])
    assert not isinstance(request, Command)  # it waits before asking again
    return step, request


def asks_again(step: Step[Grant], request: object) -> Grant:
    """Let a :func:`queued` call go on (without its pause) to its grant."""
    while True:
        if isinstance(request, Call):
            reply = request.sync()
        elif isinstance(request, Command):
            reply = _execute(request.store, [request])[0]
        else:  # a pause before it asks again: none here
            reply = None
        try:
            request = step.send(reply)
        except StopIteration as finished:
            grant: Grant = finished.value
            return grant


def test_a_freed_slot_goes_to_the_call_waiting_for_it_not_to_a_later_one(
    make: Callable[[LimitsConfig], Any],
) -> None:
    """A call that queued for a concurrency slot asks again every few tens of milliseconds;
    a slot freed meanwhile went to whichever call asked first, so a worker that settles and
    reserves again in a loop took every slot and the waiter was refused after its whole
    wait. Now a call not yet waiting leaves a free slot to the calls waiting for one."""
    limiter = make({"r": RateLimit(concurrency=1, max_wait=30)})
    held = limiter.reserve("r")
    assert held.allowed
    waiting, request = queued(limiter, "waiter")
    limiter.settle("r", lease=held.lease)  # the slot is free, and the waiter's
    later = limiter.reserve("r", max_wait=0)  # a later call asks before the waiter does
    assert (later.allowed, later.reason) == (False, "concurrency")
    grant = asks_again(waiting, request)
    assert grant.allowed
    assert grant.lease == "waiter"
    assert limiter.reserve("r", max_wait=0).reason == "concurrency"  # it holds the slot
    limiter.settle("r", lease="waiter")
    assert limiter.reserve("r", max_wait=0).allowed  # nobody waits: a free slot is anyone's


def ask_once(limiter: Any, lease: str, tenant: str | None = None) -> Grant | None:
    """One ask of a call on ``r`` that may wait (its limits' ``max_wait``): its grant, or
    None when it is queued for a slot (it keeps its place, and asks no more here)."""
    step: Step[Grant] = limiter.reserve_steps("r", lease=lease, tenant=tenant)
    reply: object = None
    try:
        request = step.send(reply)
        if isinstance(request, Command):  # Redis: the ask's answer
            request = step.send(_execute(request.store, [request])[0])
    except StopIteration as finished:
        grant: Grant = finished.value
        return grant
    step.close()  # (it would wait, then ask again)
    return None


def test_a_freed_slot_goes_to_the_call_that_has_waited_longest(
    make: Callable[[LimitsConfig], Any],
) -> None:
    """Among the calls waiting for a slot, whichever asked first after it was freed took it
    (in Redis, the waiter whose jittered pause happened to end first): a call could wait its
    whole ``max_wait`` while later ones went. Now the one whose wait ends first goes (the
    earliest, for calls allowed the same wait); the names sort the other way."""
    limiter = make({"r": RateLimit(concurrency=1, max_wait=30)})
    held = limiter.reserve("r")
    assert held.allowed
    assert ask_once(limiter, "z-first") is None
    assert ask_once(limiter, "a-second") is None
    limiter.settle("r", lease=held.lease)
    assert ask_once(limiter, "a-second") is None  # it asks first: still the first's slot
    grant = ask_once(limiter, "z-first")
    assert grant is not None
    assert (grant.allowed, grant.lease) == (True, "z-first")
    limiter.settle("r", lease="z-first")
    second = ask_once(limiter, "a-second")
    assert second is not None
    assert (second.allowed, second.lease) == (True, "a-second")


def test_a_waiter_ahead_that_waits_for_another_limit_leaves_a_free_slot_to_the_next(
    make: Callable[[LimitsConfig], Any],
) -> None:
    """A call ahead in the route's queue that also waits for its tenant's slot cannot take
    the route's free one: at its next ask it steps out of that queue, and the call behind
    it goes (else a tenant at its own cap would hold the route's slots from the others)."""
    limiter = make(
        {
            "r": [
                RateLimit(concurrency=2, max_wait=30),
                RateLimit(concurrency=1, per_tenant=True, max_wait=30),
            ]
        }
    )
    busy, other = limiter.reserve("r", tenant="busy"), limiter.reserve("r", tenant="other")
    assert busy.allowed
    assert other.allowed
    assert ask_once(limiter, "ahead", tenant="busy") is None  # both its limits full
    assert ask_once(limiter, "behind", tenant="free") is None  # the route's full
    limiter.settle("r", tenant="other", lease=other.lease)  # a route slot; busy's still held
    assert ask_once(limiter, "behind", tenant="free") is None  # "ahead" has not asked yet
    assert ask_once(limiter, "ahead", tenant="busy") is None  # it still waits for busy's
    grant = ask_once(limiter, "behind", tenant="free")
    assert grant is not None
    assert grant.allowed
    limiter.settle("r", tenant="busy", lease=busy.lease)  # its tenant's slot, and the route's
    ahead = ask_once(limiter, "ahead", tenant="busy")
    assert ahead is not None
    assert ahead.allowed


def test_waiters_are_served_in_the_order_they_came(make: Callable[[LimitsConfig], Any]) -> None:
    """Threads that queued one after another for the one slot get it in that order, each
    through the blocking entry point as a caller would wait."""
    limiter = make({"r": RateLimit(concurrency=1, max_wait=20)})
    held = limiter.reserve("r")
    assert held.allowed
    served: list[int] = []

    def call(number: int) -> None:
        grant = limiter.reserve("r", lease=f"w{9 - number}")  # (names: the other order)
        assert grant.allowed
        served.append(number)
        time.sleep(0.02)
        limiter.settle("r", lease=grant.lease)

    threads = [threading.Thread(target=call, args=(number,)) for number in range(4)]
    for count, thread in enumerate(threads, start=1):
        thread.start()
        deadline = time.monotonic() + 5
        while in_queue(limiter) < count and time.monotonic() < deadline:
            time.sleep(0.005)
    limiter.settle("r", lease=held.lease)
    for thread in threads:
        thread.join(20)
    assert served == [0, 1, 2, 3]


def test_a_call_keeps_one_place_in_every_queue_it_waits_in() -> None:
    """A call that waited on one limit's queue and then found another limit full too joined
    it with the deadline of its ask (the wait left, on the limiter's clock: a little off its
    first): two calls could each be ahead of the other on one of them, and wait for each
    other until one gave up."""
    route, tenant = RateLimit(concurrency=1, max_wait=30), RateLimit(concurrency=1, max_wait=30)
    cells = [
        (CellState(leases={"held": 100.0}, queue={"a": 40.0}), route),
        (CellState(leases={"held": 100.0}), tenant),
    ]
    grant, after = reserve_all(cells, 20.0, call_id="a", max_wait=19.99)
    assert grant.queued
    assert [state.queue["a"] for state in after] == [40.0, 40.0]


def test_a_call_keeps_one_place_in_every_redis_queue_it_waits_in(
    redis_target: RedisTarget,
) -> None:
    """reserve.lua as the policy: the deadline it first joined a queue with, on each."""
    store = redis_store(*redis_target("redis"))
    client: RawRedis = store.client
    try:
        limit = RateLimit(concurrency=1, max_wait=30)
        limiter = RedisRateLimiter(
            store, {"r": [limit, dataclasses.replace(limit, per_tenant=True)]}
        )
        (route, _), (tenant, _) = limiter._cells("r", "t")
        seconds, micros = client.time()
        first = seconds + micros / 1e6 + 40  # (its first ask's deadline: 40 s from now)
        client.zadd(route[1], {"a": first})
        for leases in (route[2], tenant[2]):
            client.zadd(leases, {"held": first + 100})
        assert ask_once(limiter, "a", tenant="t") is None
        assert client.zscore(route[1], "a") == client.zscore(tenant[1], "a") == first
    finally:
        store.close()


def test_a_call_that_just_queued_waits_before_it_asks_again() -> None:
    """In memory a call that queued for a slot asked again at once, so a worker that settled
    and reserved again took the slot it had just given back from the call waiting for it
    (every time: the waiter was refused after its whole wait)."""
    limiter = MemoryRateLimiter({"r": RateLimit(concurrency=1, max_wait=30)})
    served: list[str] = []

    async def reserve(name: str) -> None:
        grant = await limiter.areserve("r")
        assert grant.allowed
        served.append(name)
        await limiter.asettle("r", lease=grant.lease)

    async def run() -> None:
        held = await limiter.areserve("r")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reserve, "waiter")
            await anyio.wait_all_tasks_blocked()
            assert in_queue(limiter) == 1  # the waiter asked, and waits to ask again
            await limiter.asettle("r", lease=held.lease)
            await reserve("the worker again")  # at once, as a worker in a loop does

    anyio.run(run)
    assert served == ["waiter", "the worker again"]


def test_a_waiter_that_gave_up_leaves_the_queue(make: Callable[[LimitsConfig], Any]) -> None:
    limiter = make({"r": RateLimit(concurrency=1, max_wait=0.3, max_queue=1)})
    held = limiter.reserve("r")
    assert held.allowed
    gave_up = limiter.reserve("r")  # waits for the slot, then gives up
    assert (gave_up.allowed, gave_up.reason) == (False, "concurrency")
    assert in_queue(limiter) == 0  # its place did not wait to lapse (a moment later)
    # the queue's one place is free again: the next call waits there too (not shed at once)
    assert limiter.reserve("r").reason == "concurrency"
    limiter.settle("r", lease=held.lease)
    assert limiter.reserve("r").allowed


def test_async_a_waiter_that_gave_up_leaves_the_queue(make: Callable[[LimitsConfig], Any]) -> None:
    limiter = make({"r": RateLimit(concurrency=1, max_wait=0.3, max_queue=1)})

    async def run() -> tuple[str, str]:
        held = await limiter.areserve("r")
        assert held.allowed
        gave_up = await limiter.areserve("r")
        assert in_queue(limiter) == 0
        return gave_up.reason, (await limiter.areserve("r")).reason

    assert anyio.run(run) == ("concurrency", "concurrency")


def test_the_wait_for_a_slot_counts_against_the_wait_allowed(
    make: Callable[[LimitsConfig], Any],
) -> None:
    """A call that waited for its tenant's concurrency slot has only what is left of its
    ``max_wait`` to wait for the route's rate (other tenants moved it on meanwhile)."""
    limiter = make(
        {
            "r": [
                RateLimit(
                    rpm=60, burst=1 / 60, max_wait=2, batch_headroom=0
                ),  # one a second, a second ahead
                RateLimit(concurrency=1, per_tenant=True, max_wait=2),
            ]
        }
    )
    held = limiter.reserve("r", tenant="x")
    assert held.allowed
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.reserve("r", tenant="x")))
    waiter.start()
    time.sleep(1.0)  # half of its wait passes in the queue
    for _ in range(2):  # another tenant takes the next two seconds of the route's rate
        grant = limiter.reserve("r", tenant="y")
        assert grant.allowed
        limiter.settle("r", tenant="y", lease=grant.lease)
    limiter.settle("r", tenant="x", lease=held.lease)
    waiter.join(10)
    (grant,) = got
    # 2 s more would end a second past its bound: refused for the rate instead
    assert (grant.allowed, grant.reason) == (False, "rate")


def test_a_waiter_cut_short_gives_its_place_in_the_queue_back(
    make: Callable[[LimitsConfig], Any],
) -> None:
    """A call cancelled while it waits for a slot is released by its name (as the Guard
    does): the queue's place it held is free for the next call."""
    limiter = make({"r": RateLimit(concurrency=1, max_wait=30, max_queue=1)})

    async def run() -> str:
        held = await limiter.areserve("r")
        assert held.allowed
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: limiter.areserve("r", lease="cut-short"))
            await anyio.sleep(0.2)  # it waits in the queue
            tasks.cancel_scope.cancel()
        await limiter.arelease("r", lease="cut-short")
        return str((await limiter.areserve("r", max_wait=0.1)).reason)

    assert anyio.run(run) == "concurrency"  # it waited its 0.1 s (not shed for the queue)


def test_a_long_call_settles_its_tokens_on_redis(redis_target: RedisTarget) -> None:
    """A call still running when its reservation's moment has passed (Redis would let the
    state lapse a second later) settles what it used beyond it, as in memory."""
    store = redis_store(*redis_target("redis"))
    try:
        limiter = RedisRateLimiter(store, {"r": RateLimit(tpm=600)})  # 10 tokens a second
        assert limiter.reserve("r", tokens=10).allowed  # a second of the allowance
        time.sleep(2.2)  # the call runs on
        limiter.settle("r", token_delta=500)  # it used 510: 51 s of the allowance
        assert limiter.reserve("r", tokens=200).reason == "rate"
    finally:
        store.close()


def test_a_tenants_cell_is_kept_while_its_call_may_settle() -> None:
    now = [1000.0]
    limiter = MemoryRateLimiter({"r": RateLimit(tpm=600, per_tenant=True)}, clock=lambda: now[0])
    assert limiter.reserve("r", tenant="a", tokens=10).allowed
    now[0] += 2.5  # the call runs on; other tenants' calls tidy idle cells away
    for _ in range(3):
        assert limiter.reserve("r", tenant="b", tokens=1).allowed
    limiter.settle("r", tenant="a", token_delta=500)
    assert limiter.reserve("r", tenant="a", tokens=200).reason == "rate"
    now[0] += 3600  # long after: idle cells are forgotten again
    for _ in range(3):
        limiter.reserve("r", tenant="b", tokens=1)
    assert len(limiter._cells) == 1


def test_a_tenants_cell_is_forgotten_once_its_calls_settled() -> None:
    """A settled call holds its tenant's cell no longer: each cell stayed a whole lease after
    its call ended (600 s by default), so memory grew with the tenants of the last ten
    minutes rather than of the last second or so (the soak bench: +21 MB at 100k tenants)."""
    now = [1000.0]
    limiter = MemoryRateLimiter({"r": RateLimit(tpm=600, per_tenant=True)}, clock=lambda: now[0])
    for index in range(5000):  # 5,000 tenants, a call each, 0.01 s apart: 50 s in all
        grant = limiter.reserve("r", tenant=f"t{index}", tokens=10)
        assert grant.allowed
        limiter.settle("r", tenant=f"t{index}", token_delta=0, lease=grant.lease)
        now[0] += 0.01
    # a cell is idle a second after its 10 tokens: about the last 100 tenants' are still kept
    assert len(limiter._cells) < 400
    # a call in flight still holds its cell past idle (its settle must not be lost)
    assert limiter.reserve("r", tenant="long", tokens=10).allowed
    now[0] += 30
    for index in range(300):
        limiter.reserve("r", tenant=f"u{index}", tokens=1)
    assert ("r", 0, hash_id("long")) in limiter._cells


def test_a_tenants_token_state_in_redis_lapses_once_its_calls_settled(
    redis_target: RedisTarget,
) -> None:
    """In Redis as in memory, a tenant's token state is held while calls on it may settle,
    not a whole lease after they did: Redis kept every tenant's state for the lease (a
    Guard's deadline + 5 s; 600 s by default), so its memory grew with the tenants of the
    last ten minutes."""
    store = redis_store(*redis_target("redis"))
    client: RawRedis = store.client
    try:
        limiter = RedisRateLimiter(store, {"r": RateLimit(tpm=600_000, per_tenant=True)})
        [([state, _, _], _)] = limiter._cells("r", "a")
        first, second = (limiter.reserve("r", tenant="a", tokens=10) for _ in range(2))
        assert first.allowed
        assert second.allowed
        assert first.lease
        assert second.lease
        assert client.ttl(state) > 500  # both calls may still settle on it
        limiter.settle("r", tenant="a", token_delta=5, lease=first.lease)
        assert client.ttl(state) > 500  # the second still may
        limiter.settle("r", tenant="a", token_delta=5, lease=second.lease)
        assert 0 < client.ttl(state) <= 2  # its 30 tokens' moment, and a second
        assert limiter.in_flight("r", tenant="a") == 0  # token holds are not concurrency
        # a settle without its lease (a caller that kept none) shortens nothing
        held = limiter.reserve("r", tenant="a", tokens=10)
        limiter.settle("r", tenant="a", token_delta=5)
        assert client.ttl(state) > 500
        limiter.settle("r", tenant="a", lease=held.lease)
        assert 0 < client.ttl(state) <= 2
    finally:
        store.close()
