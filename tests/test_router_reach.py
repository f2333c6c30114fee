"""A deployment group takes a call (its round goes on, its leader has led) only when the call
reaches it: not when a call that another route, tier or group served ranked it on the way."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest

from llmguard_sdk import DeploymentGroup, Guard, OpenAICompatibleProvider, Rule, TaskRouter
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, RawRedis, redis_store
from .routekinds import route_to
from .test_router import Clock


@pytest.fixture
def fakes() -> Iterator[dict[str, FakeProvider]]:
    servers = {n: FakeProvider(name=n, model=f"m-{n}") for n in ("mini", "s0", "s1", "b0", "b1")}
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        server.stop()


def _group(name: str, *servers: FakeProvider, **options: object) -> DeploymentGroup:
    routes = [route_to(s) for s in servers]
    return DeploymentGroup(name, routes, seed=5, **options)  # type: ignore[arg-type]


def _tiers(mini: FakeProvider, big: DeploymentGroup) -> Guard:
    tasks = TaskRouter(
        tiers={"small": ["mini"], "large": [big.name]},
        rules=[Rule("small", feature="chat")],
        default="large",
    )
    return Guard([route_to(mini), big], tasks=tasks, environ={})


def test_a_tier_that_never_uses_the_group_leaves_its_round_alone(
    fakes: dict[str, FakeProvider],
) -> None:
    big = _group("big", fakes["b0"], fakes["b1"], strategy="round_robin")
    with _tiers(fakes["mini"], big) as guard:
        for _ in range(10):
            assert guard.chat(USER, feature="chat").route == "mini"
            guard.chat(USER)  # the large tier: the group's round
    # (was 0 and 10: each small-tier call ranked the group too, a turn each)
    assert (fakes["b0"].stats.requests, fakes["b1"].stats.requests) == (5, 5)


def test_a_call_served_by_the_group_its_model_selected_leaves_later_groups_alone(
    fakes: dict[str, FakeProvider],
) -> None:
    small = _group("small", fakes["s0"], fakes["s1"], strategy="round_robin")
    big = _group("big", fakes["b0"], fakes["b1"], strategy="round_robin")
    with Guard([small, big], environ={}) as guard:
        for _ in range(10):
            guard.chat(USER, model="small")  # big is its failover only: never reached
            guard.chat(USER, model="big")
    served = {name: server.stats.requests for name, server in fakes.items()}
    assert served == {"mini": 0, "s0": 5, "s1": 5, "b0": 5, "b1": 5}  # (was b0 0, b1 10)


def test_a_call_of_another_tier_does_not_use_up_an_exploration(
    fakes: dict[str, FakeProvider],
) -> None:
    """``b1`` is slow and not fed for five half-lives: the group's next call explores it.
    A small-tier call in between ranked the group and marked ``b1`` as having led it, so
    the large-tier call went to ``b0`` and ``b1`` waited another half-life."""
    clock = Clock()
    big = _group("big", fakes["b0"], fakes["b1"], half_life_s=0.3, clock=clock)
    for name, seconds in (("b0", 0.01), ("b1", 1.0)) * 2:
        big.observe(name, seconds, failed=False)  # measured (the first answer is not)
    clock.now += 1.5
    big.observe("b0", 0.01, failed=False)  # b0 fresh, b1 due for exploring
    with _tiers(fakes["mini"], big) as guard:
        assert guard.chat(USER, feature="chat").route == "mini"
        assert guard.chat(USER).route == "b1"


def test_calls_ranked_together_take_turns_when_they_reach_the_group() -> None:
    routes = [OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name=n) for n in "abc"]
    group = DeploymentGroup("g", routes, strategy="round_robin")
    first, first_turn = group.ranking()
    second, second_turn = group.ranking()
    assert first == second  # ranking alone takes no turn
    assert group.reach(first, first_turn) == first
    again = group.reach(second, second_turn)  # ranked again: the next turn
    assert [r.name for r in again] == ["b", "c", "a"]
    assert [r.name for r in group.ranked()] == ["c", "a", "b"]


def test_a_request_too_long_for_a_deployment_leaves_its_latency_alone(
    fakes: dict[str, FakeProvider],
) -> None:
    """``b0`` says the request is over its context window: the call moves on to ``b1``, and
    ``b0``'s estimate stays what it was (it counted as a failure: ``penalty_s``, 10 s, kept
    the healthy deployment out of every call after it)."""
    clock = Clock()  # (frozen: the estimates read back do not drift)
    big = _group("big", fakes["b0"], fakes["b1"], strategy="ordered", clock=clock)
    with Guard(big, environ={}) as guard:
        for _ in range(4):
            guard.chat(USER, model="big")
        big.observe("b1", 0.01, failed=False)  # (ordered: b1 measured too)
        before = big.latencies()
        fakes["b0"].script(Fault(status=400, error_code="context_length_exceeded"))
        assert guard.chat(USER, model="big").route == "b1"
        assert fakes["b0"].stats.by_status.get(400) == 1
    after = big.latencies()
    assert after["b0"] == before["b0"]
    assert after["b0"] is not None
    assert after["b0"] < big.penalty_s


def test_a_slow_reader_of_a_stream_does_not_make_the_deployment_look_slow(
    fakes: dict[str, FakeProvider],
) -> None:
    """The caller holds each chunk of ``b0``'s answer 0.1 s (it renders slowly): ``b0``'s
    latency is the time spent waiting on ``b0``, not on the caller, and stays below
    ``b1``'s, which answers in 0.3 s (it was measured at the caller's pace: whole seconds,
    and a slow reader sent the group's calls away from a fast deployment)."""
    clock = Clock()  # (frozen: the estimates read back do not drift)
    big = _group("big", fakes["b0"], fakes["b1"], strategy="ordered", clock=clock)
    for _ in range(2):
        big.observe("b1", 0.3, failed=False)  # (the first answer is not measured)
    with Guard(big, environ={}) as guard:
        for _ in guard.chat(USER, stream=True):  # b0's first answer: not measured
            pass
        chunks = 0
        for _ in guard.chat(USER, stream=True):
            chunks += 1
            time.sleep(0.1)
    assert chunks > 3
    latencies = big.latencies()
    assert latencies["b0"] is not None
    assert latencies["b1"] is not None
    assert latencies["b0"] < latencies["b1"]


@pytest.mark.redis
def test_hedged_calls_ranked_together_take_turns_when_they_reach_the_group(
    fakes: dict[str, FakeProvider], redis_url: str, redis_prefix: str
) -> None:
    """A hedged call's first leg goes where the group's turn sends it when the race starts:
    nine concurrent calls (their hedge never fires) spread 3/3/3 over a round robin of three
    (the race kept the route ranked at the call's start, the same for calls ranked
    together: 9/0/0 with the state in Redis, where each call's opening awaits it)."""
    servers = [fakes["s0"], fakes["s1"], fakes["b0"]]
    for server in servers:
        server.always(Fault(latency=0.2))
    group = _group("g", *servers, strategy="round_robin")

    async def burst() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(9):
                tasks.start_soon(guard.achat, USER)

    store = redis_store(redis_url, redis_prefix)
    with Guard(group, hedge_after=30.0, store=store, environ={}) as guard:
        anyio.run(burst)
    assert [s.stats.requests for s in servers] == [3, 3, 3]


def test_a_group_the_call_never_reaches_counts_no_call_in_flight(
    fakes: dict[str, FakeProvider], redis_url: str, redis_prefix: str
) -> None:
    """Every group in the call's order took a lease when its route loop started, held to
    its end: a call the first group answered counted as in flight on a deployment of each
    later group too (in Redis for ``least_outstanding``, which sent other calls away from
    it; in the process for the others, where ``latency`` multiplies a cost by it). A group
    takes the call's lease when the call reaches it."""
    import redis

    from llmguard_sdk import RedisStore

    small = _group("small", fakes["s0"], fakes["s1"], strategy="round_robin")
    mid = _group("mid", fakes["mini"])
    big = _group("big", fakes["b0"], fakes["b1"], strategy="least_outstanding")
    client: RawRedis = redis.Redis.from_url(redis_url)

    def in_flight() -> tuple[int, int, int]:
        keys = list(client.scan_iter(match=f"{redis_prefix}:rt:*"))
        local = [sum(g.local_leases.counts(g.name, g.names)) for g in (small, mid)]
        return local[0], local[1], sum(client.zcard(k) for k in keys)

    def streamed(guard: Guard) -> tuple[str, tuple[int, int, int]]:
        with guard.chat(USER, stream=True) as stream:  # in flight until read to its end
            next(iter(stream))
            during = in_flight()
            for _ in stream:
                pass
        return stream.response.route, during

    store = RedisStore(redis_url, key_prefix=redis_prefix)
    with Guard([small, mid, big], environ={}, store=store, retry=None) as guard:
        answered = streamed(guard)
        fakes["s0"].always(Fault(status=503))
        fakes["s1"].always(Fault(status=503))
        failed_over = streamed(guard)
        after = in_flight()
    client.close()
    assert answered == ("s0", (1, 0, 0))  # (was 1, 1, 1)
    assert failed_over == ("mini", (1, 1, 0))  # reached: leased there (was 1, 1, 1)
    assert after == (0, 0, 0)
