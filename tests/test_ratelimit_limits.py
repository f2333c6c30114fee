"""Rate limits beyond requests and tokens: tenants, input/output tokens, concurrency, the queue,
burst. Contract tests run the same cases on the memory limiter (injected clock) and on a real
Redis (clock offset); concurrency from threads and from several processes."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
import redis

from llmguard_sdk import ConfigurationError
from llmguard_sdk._state.steps import run
from llmguard_sdk.ratelimit import LimitsConfig, MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.ratelimit.policy import CellState, reserve, reserve_all, settle
from llmguard_sdk.store import RedisStore, hash_id
from tests.conftest import RawRedis, RedisTarget, redis_store

Make = Callable[[LimitsConfig], Any]


class Backend:
    """Builds limiters of one backend; ``advance`` moves their clock."""

    def __init__(self, kind: str, redis_url: str, prefix: str) -> None:
        self.kind, self.redis_url, self.prefix = kind, redis_url, prefix
        self.now = [1000.0]
        self.made: list[Any] = []
        self.stores: list[RedisStore] = []

    def make(self, limits: LimitsConfig) -> Any:
        if self.kind == "memory":
            limiter: Any = MemoryRateLimiter(limits, clock=lambda: self.now[0])
        else:
            store = redis_store(self.redis_url, self.prefix)
            self.stores.append(store)
            limiter = RedisRateLimiter(store, limits)
        self.made.append(limiter)
        return limiter

    async def aclose(self) -> None:
        """Close the stores' async clients on the running loop, before the loop ends (one
        left on a closed loop reports itself unclosed to the loop running when it is
        collected: another test's)."""
        for store in self.stores:
            await store.aclose()

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds
        for limiter in self.made:
            if isinstance(limiter, RedisRateLimiter):
                limiter.clock_offset += seconds


@pytest.fixture(params=["memory", "redis", "cluster"])
def backend(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Backend]:
    url, prefix = redis_target(request.param) if request.param != "memory" else ("", "")
    made = Backend(request.param, url, prefix)
    yield made
    for store in made.stores:
        store.close()


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"concurrency": 0},
        {"concurrency": 1.5},
        {"rpm": 10, "burst": 0},
        {"rpm": 10, "burst": 1.5},
        {"rpm": 10, "max_queue": -1},
        {"rpm": 10, "per_tenant": "yes"},
        {"rpm": 10, "lease_seconds": 0},
        {"input_tpm": -5},
        {"rpm": True},
        {"rpm": 10, "max_wait": -1},
    ],
)
def test_bad_limits_raise_typed_errors(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        RateLimit(**bad)


@pytest.mark.parametrize(
    "name",
    ["max_wait", "batch_headroom", "reserve_output_tokens", "period", "burst", "max_queue"],
)
@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_is_no_number_of_a_limit(name: str, flag: bool) -> None:
    # bool is an int: max_wait=True waited a second, reserve_output_tokens=True reserved one
    with pytest.raises(ConfigurationError, match=name):
        RateLimit(rpm=10, **{name: flag})


@pytest.mark.parametrize(
    "bad", [{"r": "fast"}, {"r": []}, {"": RateLimit(rpm=1)}, ["r"], {"r": 5}, {"r": None}]
)
def test_bad_limit_maps_raise_typed_errors(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        MemoryRateLimiter(bad)


@pytest.mark.parametrize("limit", [RateLimit(rpm=0.5), RateLimit(rpm=1.5, burst=0.5)])
def test_a_request_rate_that_never_admits_a_request_is_a_configuration_error(
    limit: RateLimit,
) -> None:
    """rpm=0.5 (meant: one request every two minutes) with a burst of one period has room
    for half a request: every call was refused, as "larger than the limit allows at once"."""
    with pytest.raises(ConfigurationError, match=r"rate_limits\['r'\].*period"):
        MemoryRateLimiter({"r": limit})
    meant = MemoryRateLimiter(
        {"r": RateLimit(rpm=1, period=120, batch_headroom=0)}
    )  # what the error suggests
    assert meant.reserve("r").allowed
    assert not meant.reserve("r").allowed


def test_a_concurrency_cap_alone_is_a_limit() -> None:
    assert RateLimit(concurrency=3).concurrency == 3


# -- pure policy --------------------------------------------------------------------------


def test_burst_limits_what_goes_out_at_once() -> None:
    limit = RateLimit(rpm=60, burst=0.1)
    state, granted = CellState(), 0
    for _ in range(20):
        grant, state = reserve(state, 0.0, limit)
        granted += grant.allowed
    assert granted == 6  # a tenth of the minute's 60
    assert not reserve(state, 0.0, limit, tokens=0)[0].allowed
    assert reserve(state, 1.0, limit)[0].allowed  # then one a second, as before
    big = RateLimit(tpm=1000, burst=0.1)
    refused, _ = reserve(CellState(), 0.0, big, tokens=200)
    assert (refused.allowed, refused.retry_after, refused.reason) == (False, math.inf, "never")


def test_all_limits_of_a_call_or_none() -> None:
    route, tenant = RateLimit(rpm=100), RateLimit(rpm=1, per_tenant=True)
    cells = [(CellState(), route), (CellState(), tenant)]
    grant, after = reserve_all(cells, 0.0)
    assert grant.allowed
    refused, unchanged = reserve_all(list(zip(after, (route, tenant), strict=True)), 0.0)
    assert not refused.allowed
    assert unchanged == after  # the route's request was not taken either


def test_a_refund_of_unknown_split_leaves_input_and_output_limits_alone() -> None:
    limit = RateLimit(tpm=1000, input_tpm=500)
    _, state = reserve(CellState(), 0.0, limit, input_tokens=400, output_tokens=100)
    refunded = settle(state, 0.0, limit, token_delta=-400)
    assert refunded.tats[1] < state.tats[1]
    assert refunded.tats[2] == state.tats[2]  # which part was unused is unknown: kept


# -- contract: memory and Redis -----------------------------------------------------------


def test_contract_per_tenant_limits(backend: Backend) -> None:
    limiter = backend.make({"r": [RateLimit(rpm=5), RateLimit(rpm=2, per_tenant=True)]})
    assert [limiter.reserve("r", tenant="acme").allowed for _ in range(3)] == [True, True, False]
    assert [limiter.reserve("r", tenant="globex").allowed for _ in range(2)] == [True, True]
    assert limiter.reserve("r").allowed  # no tenant: one shared state of its own
    refused = limiter.reserve("r", tenant="initech")  # the route's 5 are used up
    assert not refused.allowed
    assert 11.9 < refused.retry_after <= 12.0


def test_memory_forgets_idle_tenants_without_scanning() -> None:
    now = [0.0]
    limiter = MemoryRateLimiter(
        {"r": [RateLimit(rpm=60_000), RateLimit(rpm=60, per_tenant=True)]}, clock=lambda: now[0]
    )
    sizes = []
    for n in range(20_000):  # a new tenant every 10 ms; each one idle 1 s after its call
        now[0] = n / 100
        assert limiter.reserve("r", tenant=f"t{n}").allowed
        sizes.append(len(limiter._cells))
    assert max(sizes[1000:]) <= 2 * 100 + 1  # about a second of tenants, and the route's
    live = [limiter.reserve("r", tenant="t19999").allowed for _ in range(60)]
    assert live == [True] * 59 + [False]  # a tenant still in its period was not forgotten


def test_contract_input_and_output_tokens(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(tpm=10_000, input_tpm=1000, output_tpm=500)})
    assert limiter.reserve("r", input_tokens=800, output_tokens=400).allowed
    refused = limiter.reserve("r", input_tokens=100, output_tokens=200)
    assert not refused.allowed  # output short; the input was not taken either
    assert limiter.reserve("r", input_tokens=200, output_tokens=0).allowed
    assert not limiter.reserve("r", input_tokens=1, output_tokens=200).allowed
    limiter.settle("r", input_delta=0, output_delta=-350)  # it wrote 50 of its 400
    assert limiter.reserve("r", input_tokens=0, output_tokens=300).allowed


def test_contract_concurrency_leases(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(concurrency=2, lease_seconds=30)})
    first, second = limiter.reserve("r"), limiter.reserve("r")
    assert first.lease
    assert second.lease
    assert first.lease != second.lease
    refused = limiter.reserve("r")
    assert (refused.allowed, refused.reason) == (False, "concurrency")
    assert limiter.in_flight("r") == 2
    limiter.settle("r", lease=first.lease)
    third = limiter.reserve("r")
    assert third.allowed
    limiter.release("r", lease=third.lease)
    assert limiter.in_flight("r") == 1
    backend.advance(31)  # the second's process crashed: its lease lapses
    assert limiter.in_flight("r") == 0
    assert limiter.reserve("r").allowed


def test_contract_per_tenant_concurrency(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(concurrency=1, per_tenant=True)})
    held = limiter.reserve("r", tenant="acme")
    assert held.allowed
    assert not limiter.reserve("r", tenant="acme").allowed
    assert limiter.reserve("r", tenant="globex").allowed


def test_contract_the_queue_is_bounded(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(rpm=60, max_wait=10, max_queue=2)})
    started = time.monotonic()  # Redis's clock runs on: what passes shortens the wait
    for _ in range(60):
        assert limiter.reserve("r").allowed
    waits = [limiter.reserve("r") for _ in range(2)]
    assert all(g.allowed and g.wait > 0 for g in waits)
    shed = limiter.reserve("r")
    passed = time.monotonic() - started
    assert (shed.allowed, shed.reason) == (False, "queue")
    assert 3.0 - passed - 0.05 <= shed.retry_after <= 3.0 + 0.05
    backend.advance(1.5)  # the first waiter has started: a place is free
    assert limiter.reserve("r").allowed


def test_contract_provider_counters_of_each_kind(backend: Backend) -> None:
    limiter = backend.make(
        {"r": [RateLimit(tpm=10_000, output_tpm=1000), RateLimit(rpm=5, per_tenant=True)]}
    )
    limiter.learn("r", remaining_output_tokens=100, remaining_tokens=5000)
    assert limiter.reserve("r", tenant="a", input_tokens=10, output_tokens=100).allowed
    assert not limiter.reserve("r", tenant="a", input_tokens=10, output_tokens=10).allowed


def test_contract_waiting_for_a_concurrency_slot(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(concurrency=1, max_wait=5)})
    held = limiter.reserve("r")
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.reserve("r")))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # waiting for the slot
    limiter.settle("r", lease=held.lease)
    waiter.join(10)
    assert got
    assert got[0].allowed
    assert not limiter.reserve("r", max_wait=0).allowed  # the waiter holds it now


def test_contract_async_waiting_for_a_concurrency_slot(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(concurrency=1, max_wait=5)})

    async def run() -> bool:
        held = await limiter.areserve("r")
        async with anyio.create_task_group() as tasks:
            got: list[Any] = []

            async def wait_for_slot() -> None:
                got.append(await limiter.areserve("r"))

            tasks.start_soon(wait_for_slot)
            await anyio.sleep(0.1)
            assert not got
            await limiter.asettle("r", lease=held.lease)
        await backend.aclose()
        return bool(got[0].allowed)

    assert anyio.run(run)


def test_contract_threads_never_exceed_the_concurrency_cap(backend: Backend) -> None:
    limiter = backend.make({"r": RateLimit(concurrency=3, max_wait=5)})
    inside, most, lock = [0], [0], threading.Lock()
    granted: list[bool] = []

    def worker() -> None:
        for _ in range(15):
            grant = limiter.reserve("r")
            granted.append(grant.allowed)
            if not grant.allowed:
                continue
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            with lock:
                inside[0] -= 1
            limiter.settle("r", lease=grant.lease)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert most[0] <= 3
    assert all(granted)  # every call got a slot within its wait
    assert limiter.in_flight("r") == 0


def test_redis_keys_share_the_route_tag_and_hide_the_tenant(
    redis_url: str, redis_prefix: str
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    limiter = RedisRateLimiter(
        store,
        {"openai": [RateLimit(rpm=10, max_queue=1), RateLimit(concurrency=2, per_tenant=True)]},
    )
    grant = limiter.reserve("openai", tenant="acme-corp")
    assert grant.allowed
    client: RawRedis = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.scan_iter(match=f"{redis_prefix}:*")]
    client.close()
    store.close()
    assert keys
    assert all("{" + hash_id("openai") + "}" in key for key in keys)  # one slot
    assert not any("acme" in key for key in keys)
    assert any(hash_id("acme-corp") in key for key in keys)


_DAY = 86_400.0


def _process_reserves(redis_url: str, prefix: str, results: Any) -> None:
    store = RedisStore(redis_url, key_prefix=prefix)
    limiter = RedisRateLimiter(
        store,
        {  # stated per day: nothing comes back while the processes start (seconds apart
            # on a busy machine: per minute, the route's 30 grew by one every 2 s)
            "shared": [
                RateLimit(rpm=30, period=_DAY),
                RateLimit(rpm=4, per_tenant=True, period=_DAY),
            ]
        },
    )
    granted = sum(limiter.reserve("shared", tenant=f"t{i % 10}").allowed for i in range(40))
    store.close()
    results.put(granted)


def test_several_processes_share_route_and_tenant_limits(redis_url: str, redis_prefix: str) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(target=_process_reserves, args=(redis_url, redis_prefix, results))
        for _ in range(3)
    ]
    for process in processes:
        process.start()
    counts = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
    # 120 attempts over 10 tenants allowed 4 each would pass 40; the route allows 30
    assert sum(counts) == 30


def test_redis_concurrency_queue_forgets_its_waiters(redis_url: str, redis_prefix: str) -> None:
    """Without ``max_queue``, calls that queued for a slot leave the queue when their wait is
    over or when they get the slot (it does not grow with calls)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    limiter = RedisRateLimiter(store, {"r": RateLimit(concurrency=1, max_wait=5)})
    client: RawRedis = redis.Redis.from_url(redis_url)
    queue = store.key("rl", hash_id("r"), "0") + ":q"
    try:
        held = limiter.reserve("r")
        for _ in range(4):  # each waits in the queue, gives up, and is long gone
            assert not limiter.reserve("r", max_wait=0.01).allowed
            limiter.clock_offset += 60
        assert client.zcard(queue) <= 1
        limiter.settle("r", lease=held.lease)
        assert limiter.reserve("r").allowed
        assert client.zcard(queue) == 0
    finally:
        client.close()
        store.close()


def _enter(limiter: Any, operation: str, entry: str, args: dict[str, Any]) -> Any:
    """``operation`` on route "r" through one of its public entry points."""
    if entry == "async":
        return anyio.run(lambda: getattr(limiter, f"a{operation}")("r", **args))
    if entry == "steps":
        return run(getattr(limiter, f"{operation}_steps")("r", **args))
    return getattr(limiter, operation)("r", **args)


@pytest.mark.parametrize(
    ("operation", "args"),
    [
        ("reserve", {"tokens": math.nan}),
        ("reserve", {"lease_seconds": math.nan}),
        ("settle", {"token_delta": math.inf}),
        ("settle", {"input_delta": math.nan, "output_delta": 0}),
        ("learn", {"remaining_tokens": math.nan}),
        ("learn", {"pause": math.inf}),
    ],
)
@pytest.mark.parametrize("entry", ["blocking", "async", "steps"])
def test_contract_a_nan_or_infinite_amount_is_a_typed_error(
    backend: Backend, operation: str, args: dict[str, float], entry: str
) -> None:
    limiter = backend.make({"r": RateLimit(tpm=1000, concurrency=5)})
    with pytest.raises(ConfigurationError, match="finite"):
        _enter(limiter, operation, entry, args)
    for _ in range(2):  # the shared state still limits
        assert limiter.reserve("r", tokens=600).allowed is (_ == 0)


@pytest.mark.parametrize(
    ("operation", "args"),
    [
        ("reserve", {"tokens": "100"}),  # the memory limiter failed with a TypeError, Redis took it
        ("reserve", {"tokens": None}),
        ("reserve", {"input_tokens": "x"}),
        ("reserve", {"tokens": -5000}),  # a refund dressed as a reservation: room for free
        ("reserve", {"requests": -1}),
        ("reserve", {"max_wait": -1}),
        ("reserve", {"lease_seconds": 0}),  # a lease lapsed at once: no concurrency cap at all
        ("reserve", {"priority": "urgent"}),
        ("reserve", {"tenant": 123}),
        ("settle", {"token_delta": None}),
        ("settle", {"request_delta": "x"}),
        ("settle", {"lease": 5}),
        ("learn", {"remaining_tokens": -1}),
        ("learn", {"pause": "soon"}),
        ("reserve", {"tokens": True}),  # bool is an int: a reservation of one token
        ("settle", {"request_delta": False}),
        ("learn", {"pause": True}),
    ],
)
@pytest.mark.parametrize("entry", ["blocking", "async", "steps"])
def test_contract_a_bad_argument_is_a_typed_error(
    backend: Backend, operation: str, args: dict[str, Any], entry: str
) -> None:
    """Every public entry point checks (the Guard's own calls skip the checks: their
    arguments are sound)."""
    limiter = backend.make(
        {"r": [RateLimit(tpm=1000, concurrency=1), RateLimit(rpm=5, per_tenant=True)]}
    )
    with pytest.raises(ConfigurationError, match=next(iter(args))):
        _enter(limiter, operation, entry, args)
    held = limiter.reserve("r", tokens=600)  # the state is untouched: the cap still holds
    assert held.allowed
    assert not limiter.reserve("r", tokens=1).allowed


def test_redis_state_far_in_the_future_still_expires(redis_url: str, redis_prefix: str) -> None:
    """A provider's absurd pause (a finite Retry-After of 1e16 s), a huge settle or lease: the
    script still sets a TTL, and Redis is not taken for down by every stage."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    limits = {"r": RateLimit(rpm=60), "s": RateLimit(tpm=1000, concurrency=1, lease_seconds=1e16)}
    limiter = RedisRateLimiter(store, limits)
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        limiter.learn("r", pause=1e16)
        held = limiter.reserve("s", tokens=10)
        limiter.settle("s", token_delta=1e17)
        assert store.health.up()  # every script answered
        assert not limiter.reserve("r", max_wait=0).allowed
        assert held.lease
        assert not limiter.reserve("s", max_wait=0).allowed
        for route in ("r", "s"):
            [(state, _, leases)] = [names for names, _ in limiter._cells(route, None)]
            for key in (state, leases) if route == "s" else (state,):
                assert client.ttl(key) > 0, key
    finally:
        client.close()
        store.close()
