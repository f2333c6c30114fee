"""Calls in flight per deployment (least_outstanding): leases in this process and shared by
processes through a real Redis, crash-safe by deadline."""

from __future__ import annotations

import time

import pytest

from llmguard_sdk import DeploymentGroup, Guard, OpenAICompatibleProvider, RedisStore
from llmguard_sdk._state.steps import in_place
from llmguard_sdk.router.leases import LeaseAsk, MemoryLeases, RedisLeases
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, RawRedis
from .heldanswer import AnswerHeld
from .test_router import Clock

NAMES = ("a", "b", "c")


def test_memory_leases_pick_the_least_loaded_and_run_out() -> None:
    clock = Clock()
    leases = MemoryLeases(clock=clock)
    picks = [leases.take(LeaseAsk("g", NAMES, None, 0, f"call-{i}", 10.0))[0] for i in range(6)]
    assert sorted(picks) == [0, 0, 1, 1, 2, 2]
    leases.give_back("g", "a", "call-0")
    assert leases.counts("g", NAMES) == [1, 2, 2]
    assert leases.take(LeaseAsk("g", NAMES, None, 0, "call-6", 10.0)) == (0, [1, 2, 2])
    assert leases.take(LeaseAsk("g", NAMES, 2, 0, "call-7", 1.0))[0] == 2  # asked for: taken there
    clock.now += 5  # call-7's lease ran out: a caller that died holds nothing for long
    assert leases.counts("g", NAMES) == [2, 2, 2]
    clock.now += 6
    assert leases.counts("g", NAMES) == [0, 0, 0]


def test_memory_leases_never_given_back_end_even_where_no_call_asks_again() -> None:
    """Leases were pruned only when their own deployment was counted: those a stuck caller
    left on a group (or deployment) no later call asked about stayed for good, and every
    deployment once leased kept its entry."""
    import gc
    import tracemalloc

    clock = Clock()
    leases = MemoryLeases(clock=clock)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(5000):  # stuck callers, on groups no call goes to again
            leases.take(LeaseAsk(f"old-{i % 50}", NAMES, i % 3, 0, f"stuck-{i}", 5.0))
        for i in range(1000):  # calls that end, each on a deployment of its own
            leases.take(LeaseAsk("g", (f"d-{i}",), None, 0, f"done-{i}", 5.0))
            leases.give_back("g", f"d-{i}", f"done-{i}")
        full = tracemalloc.get_traced_memory()[0] - base
        clock.now += 6  # every stuck lease ran out; one call on another group
        assert leases.take(LeaseAsk("new", NAMES, None, 0, "live", 5.0)) == (0, [0, 0, 0])
        leases.give_back("new", "a", "live")
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert full > 500_000  # (what 5000 leases take: the measure sees them)
    assert left < full / 20  # nothing of them stays (a table's room at most)
    assert leases.counts("old-0", NAMES) == [0, 0, 0]


def test_processes_count_each_others_calls_in_flight_through_redis(
    redis_url: str, redis_prefix: str
) -> None:
    first = RedisLeases(RedisStore(redis_url, key_prefix=redis_prefix))
    second = RedisLeases(RedisStore(redis_url, key_prefix=redis_prefix))
    taken = []
    for i in range(6):  # the two "processes" take turns, each with its own tie rotation
        leases = first if i % 2 else second
        taken.append(leases.take_steps(LeaseAsk("g", NAMES, None, 0, f"call-{i}", 30.0)))
    from llmguard_sdk._state.steps import run

    picks = [run(step)[0] for step in taken]
    assert sorted(picks) == [0, 0, 1, 1, 2, 2]
    run(first.give_back_steps("g", NAMES[picks[0]], "call-0"))
    index, counts = run(second.take_steps(LeaseAsk("g", NAMES, None, 1, "call-6", 30.0)))
    assert (index, sorted(counts)) == (picks[0], [1, 2, 2])


def test_redis_leases_run_out_by_deadline_and_stay_bounded(
    redis_url: str, redis_prefix: str
) -> None:
    import redis

    from llmguard_sdk._state.steps import run

    store = RedisStore(redis_url, key_prefix=redis_prefix)
    leases = RedisLeases(store)
    for i in range(3):  # callers that crash: their leases are never given back
        run(leases.take_steps(LeaseAsk("g", NAMES, 0, 0, f"lost-{i}", 0.2)))
    assert run(leases.take_steps(LeaseAsk("g", NAMES, None, 0, "x", 30.0))) == (1, [3, 0, 0])
    time.sleep(0.4)
    assert run(leases.take_steps(LeaseAsk("g", NAMES, None, 0, "y", 30.0)))[1] == [0, 1, 0]
    for i in range(200):  # many calls come and go: the sets hold only those in flight
        index, _ = run(leases.take_steps(LeaseAsk("g", NAMES, None, i, f"call-{i}", 30.0)))
        run(leases.give_back_steps("g", NAMES[index], f"call-{i}"))
    client: RawRedis = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{redis_prefix}:rt:*"))
    assert 1 <= len(keys) <= 3  # one sorted set per deployment, gone when empty
    assert sum(client.zcard(k) for k in keys) == 2  # x and y
    assert all(0 < client.ttl(k) <= 3600 for k in keys)
    assert len({k.split(b"{")[1].split(b"}")[0] for k in keys}) == 1  # one hash tag
    client.close()


def _guard(servers: list[FakeProvider], store: RedisStore | None = None) -> Guard:
    deployments = [
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers
    ]
    group = DeploymentGroup("fake-model", deployments, strategy="least_outstanding")
    return Guard(group, environ={}, store=store)


def test_least_outstanding_spreads_calls_and_avoids_a_deployment_busy_in_another_guard(
    servers: list[FakeProvider], redis_url: str, redis_prefix: str
) -> None:
    store_a = RedisStore(redis_url, key_prefix=redis_prefix)
    store_b = RedisStore(redis_url, key_prefix=redis_prefix)
    with _guard(servers, store_a) as first, _guard(servers, store_b) as second:
        routes = [second.chat(USER).route for _ in range(6)]
        assert sorted(routes) == ["dep-0", "dep-0", "dep-1", "dep-1", "dep-2", "dep-2"]
        stream = first.chat(USER, stream=True)  # in flight until read to its end
        next(iter(stream))
        busy = next(s.name for s in servers if s.stats.requests == 3)
        routes = [second.chat(USER).route for _ in range(6)]
        stream.close()
        assert busy not in routes  # the other Guard's open stream counts there
        assert sorted(set(routes)) == sorted({"dep-0", "dep-1", "dep-2"} - {busy})
        after = [second.chat(USER).route for _ in range(3)]
        assert sorted(after) == ["dep-0", "dep-1", "dep-2"]  # the stream's lease ended


def test_async_calls_take_and_give_back_leases_through_redis(
    servers: list[FakeProvider], redis_url: str, redis_prefix: str
) -> None:
    import anyio
    import redis

    from llmguard_sdk._state.steps import run

    other = RedisLeases(RedisStore(redis_url, key_prefix=redis_prefix))  # another process
    names = ("dep-0", "dep-1", "dep-2")
    for i, pick in enumerate((0, 0, 1, 1)):
        run(other.take_steps(LeaseAsk("fake-model", names, pick, 0, f"busy-{i}", 60.0)))

    async def calls() -> list[str]:
        async with _guard(servers, RedisStore(redis_url, key_prefix=redis_prefix)) as guard:
            return [(await guard.achat(USER)).route for _ in range(3)]

    assert anyio.run(calls) == ["dep-2"] * 3  # dep-0 and dep-1 hold two calls each elsewhere
    client: RawRedis = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{redis_prefix}:rt:*"))
    assert sum(client.zcard(k) for k in keys) == 4  # the async calls gave theirs back
    client.close()


def test_a_lease_decides_among_the_deployments_the_call_may_take() -> None:
    from llmguard_sdk._state.steps import run

    routes = [OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name=n) for n in NAMES]
    group = DeploymentGroup("g", routes, strategy="least_outstanding")
    leases = group.local_leases
    picked = [
        [r.name for r in run(group.lease_steps(routes[1:], leases, f"call-{i}", 30.0))]
        for i in range(4)
    ]
    assert all(sorted(p) == ["b", "c"] for p in picked)  # a tier holding two of the three
    assert leases.counts("g", NAMES) == [0, 2, 2]


def test_a_short_lease_does_not_cut_a_long_ones_life_in_redis(
    redis_url: str, redis_prefix: str
) -> None:
    """Each lease set its deployment's key to expire after its own length (+60 s): a short
    call after a long one (an hour's stream) made the key, and the long call's lease with it,
    vanish a minute later while that call was still in flight (counted as 0 calls)."""
    import redis

    from llmguard_sdk._state.steps import run

    store = RedisStore(redis_url, key_prefix=redis_prefix)
    leases = RedisLeases(store)
    run(leases.take_steps(LeaseAsk("g", NAMES, 0, 0, "long", 3000.0)))
    run(leases.take_steps(LeaseAsk("g", NAMES, 0, 0, "short", 1.0)))
    client: RawRedis = redis.Redis.from_url(redis_url)
    (key,) = client.scan_iter(match=f"{redis_prefix}:rt:*")
    assert client.ttl(key) >= 3000  # the key outlives every lease it holds
    client.close()
    store.close()


class _BrokenLeases(MemoryLeases):
    """Leases whose every take fails (a bug or a store's unexpected answer)."""

    def take(self, ask: LeaseAsk) -> tuple[int, list[int]]:
        raise RuntimeError(f"cannot lease on {ask.group}")

    take_steps, atake = in_place(take)


def test_a_failed_lease_gives_back_the_leases_taken_before_it(
    servers: list[FakeProvider], redis_url: str, redis_prefix: str
) -> None:
    """With two groups, an error while taking the second group's lease left the first
    group's lease held until it ran out (the call's deadline plus a margin). The call
    reaches the broken group (a group's lease is taken when the call reaches it): the
    deployments before it fail."""
    import anyio
    import pytest
    import redis

    routes = [
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers
    ]
    shared = DeploymentGroup("shared", routes[:1], strategy="least_outstanding")
    local = DeploymentGroup("local", routes[1:2], strategy="round_robin")
    broken = DeploymentGroup("broken", routes[2:], strategy="round_robin")
    broken.local_leases = _BrokenLeases()
    for server in servers[:2]:
        server.always(Fault(status=503))
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    client: RawRedis = redis.Redis.from_url(redis_url)

    def held() -> tuple[int, int]:
        keys = list(client.scan_iter(match=f"{redis_prefix}:rt:*"))
        return sum(client.zcard(k) for k in keys), local.local_leases.counts("local", ["dep-1"])[0]

    async def acall() -> None:
        async with Guard([shared, local, broken], environ={}, store=store, retry=None) as guard:
            await guard.achat(USER)

    with (
        Guard([shared, local, broken], environ={}, store=store, retry=None) as guard,
        pytest.raises(RuntimeError, match="cannot lease on broken"),
    ):
        guard.chat(USER)
    assert held() == (0, 0)
    with pytest.raises(RuntimeError, match="cannot lease on broken"):
        anyio.run(acall)
    assert held() == (0, 0)
    client.close()


async def _read(guard: Guard, stream: bool) -> None:
    """One async call, a stream read to its end."""
    if not stream:
        await guard.achat(USER)
        return
    async with await guard.achat(USER, stream=True) as chunks:
        async for _ in chunks:
            pass


@pytest.mark.parametrize("stream", [False, True])
def test_an_async_call_cancelled_while_its_lease_is_taken_gives_its_leases_back(
    servers: list[FakeProvider], redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """A call cancelled (asyncio's own cancellation, which a shielded round trip does not
    stop) while its lease on a second group was in Redis: the batch closed the lease step,
    and the first group's lease and the one taken in Redis stayed held until they ran out
    (the call's deadline plus a margin), counted as calls in flight. The call reaches the
    second group: the first one's deployment fails."""
    import asyncio

    import redis

    routes = [
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers
    ]
    local = DeploymentGroup("local", routes[:1], strategy="round_robin")
    shared = DeploymentGroup("shared", routes[1:], strategy="least_outstanding")
    servers[0].always(Fault(status=503))
    client: RawRedis = redis.Redis.from_url(redis_url)

    def held() -> tuple[int, int]:
        keys = list(client.scan_iter(match=f"{redis_prefix}:rt:*"))
        return local.local_leases.counts("local", ["dep-0"])[0], sum(client.zcard(k) for k in keys)

    async def cancelled_in_the_take() -> tuple[tuple[int, int], tuple[int, int]]:
        proxy = AnswerHeld(redis_url, f"{redis_prefix}:rt:".encode())
        async with proxy as url:
            store = RedisStore(url, key_prefix=redis_prefix)
            async with Guard([local, shared], environ={}, store=store, retry=None) as guard:
                call = asyncio.ensure_future(_read(guard, stream))
                await proxy.holding.wait()  # the take ran in Redis, its answer held back
                taken = held()
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                return taken, held()

    taken, after = asyncio.run(cancelled_in_the_take())
    client.close()
    assert taken == (1, 1)  # the first group's lease, and the second's in Redis
    assert after == (0, 0)  # both given back as the call ended
