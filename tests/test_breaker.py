"""Circuit breakers: the pure state machine with an injected clock, and the same contract
against the memory backend and a real Redis (time driven, never slept)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.breaker import (
    BreakerPolicy,
    Breakers,
    BreakerState,
    BreakerTransition,
    MemoryBreakerBackend,
    RedisBreakerBackend,
)
from llmguard_sdk.breaker.policy import acquire, outcome_of, record
from llmguard_sdk.errors import (
    BadRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.store import RedisStore, hash_id
from llmguard_sdk.testing import FakeProvider, Fault
from tests.conftest import USER, RawRedis, RedisTarget, redis_store

POLICY = BreakerPolicy(
    window=10,
    minimum_calls=4,
    failure_rate=0.5,
    open_seconds=10,
    backoff_factor=2,
    max_open_seconds=35,
    half_open_permits=2,
)


def feed(
    state: BreakerState, now: float, outcomes: list[Any], policy: BreakerPolicy = POLICY
) -> BreakerState:
    for outcome in outcomes:
        state = record(state, now, policy, outcome)
    return state


def test_stays_closed_below_minimum_calls_then_opens_at_the_failure_rate() -> None:
    state = feed(BreakerState(), 0.0, ["fail", "fail", "fail"])
    assert state.state == "closed"  # 3 < minimum_calls, however bad
    state = feed(state, 0.0, ["ok"])
    assert state.state == "open"  # 3 of 4 failed >= 50 %
    assert state.open_until == 10.0


def test_a_healthy_window_stays_closed() -> None:
    state = feed(BreakerState(), 0.0, ["ok", "fail", "ok", "ok", "fail", "ok", "ok"])
    assert state.state == "closed"


def test_the_count_window_forgets_old_outcomes() -> None:
    state = feed(BreakerState(), 0.0, ["ok"] * 4 + ["fail"] * 3 + ["ok"] * 10)
    assert state.state == "closed"  # 3 of 7, then 3 of 10: below 50 %, and then forgotten
    assert (state.calls, state.failures, state.slow_calls) == (10, 0, 0)


def test_the_time_window_forgets_old_outcomes() -> None:
    policy = BreakerPolicy(window_type="time", window=5, minimum_calls=4)
    state = feed(BreakerState(), 0.0, ["fail"] * 3, policy)
    state = feed(state, 10.0, ["ok"], policy)  # the failures are 10 s old: out of the window
    assert state.state == "closed"
    assert (state.calls, state.failures) == (1, 0)


def test_slow_calls_open_the_breaker() -> None:
    policy = BreakerPolicy(minimum_calls=4, slow_call_rate=0.75, slow_call_seconds=2.0)
    outcomes = [outcome_of(None, seconds=s, policy=policy) for s in (3.0, 2.5, 0.1, 4.0)]
    assert outcomes == ["slow", "slow", "ok", "slow"]
    assert feed(BreakerState(), 0.0, outcomes, policy).state == "open"


def test_open_refuses_then_half_open_probes_then_closes() -> None:
    state = feed(BreakerState(), 0.0, ["fail"] * 4)
    permit, state = acquire(state, 5.0, POLICY)
    assert not permit.allowed
    assert permit.retry_after == 5.0
    first, state = acquire(state, 10.0, POLICY)
    second, state = acquire(state, 10.0, POLICY)
    third, state = acquire(state, 10.0, POLICY)
    assert (first.allowed, first.probe, second.allowed, third.allowed) == (True, True, True, False)
    state = record(state, 10.5, POLICY, "ok")
    assert state.state == "half_open"
    state = record(state, 10.6, POLICY, "ok")
    assert state.state == "closed"
    assert state.trips == 0


def test_a_failed_probe_reopens_for_longer_each_time_up_to_the_cap() -> None:
    state, now, durations = feed(BreakerState(), 0.0, ["fail"] * 4), 0.0, []
    for _ in range(4):
        durations.append(state.open_until - now)
        now = state.open_until
        _, state = acquire(state, now, POLICY)
        state = record(state, now, POLICY, "fail")
    assert durations == [10.0, 20.0, 35.0, 35.0]


def test_a_429_opens_for_its_retry_after() -> None:
    state = record(BreakerState(), 100.0, POLICY, "rate_limited", hint=7.0)
    assert state.state == "open"
    assert state.open_until == 107.0
    assert state.trips == 0  # the provider asked for a pause; it is not sick


def test_client_errors_are_not_recorded() -> None:
    assert outcome_of(BadRequestError("bad", status_code=400), seconds=1, policy=POLICY) is None
    assert outcome_of(ProviderUnavailableError("x"), seconds=1, policy=POLICY) == "fail"
    assert outcome_of(ProviderTimeoutError("x"), seconds=1, policy=POLICY) == "fail"
    assert outcome_of(RateLimitedError("x"), seconds=1, policy=POLICY) == "rate_limited"


@pytest.mark.parametrize(
    "bad",
    [
        {"window_type": "hours"},
        {"minimum_calls": 0},
        {"failure_rate": 0},
        {"open_seconds": 100, "max_open_seconds": 10},
        {"half_open_permits": 0},
        # wrong types: TypeError from a comparison (or, for counts, a fraction accepted)
        {"window": "20"},
        {"failure_rate": None},
        {"open_seconds": "30"},
        {"probe_every": "5"},
        {"minimum_calls": 2.5},
        {"half_open_permits": 1.5},
        {"window": True},
    ],
)
def test_bad_policies(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        BreakerPolicy(**bad)


def test_a_count_window_smaller_than_minimum_calls_is_refused() -> None:
    # window=5 with the default minimum_calls=10: the window never holds 10 outcomes, so the
    # breaker never judged a rate and stayed closed through any number of failures
    with pytest.raises(ConfigurationError, match="minimum_calls"):
        BreakerPolicy(window=5)
    policy = BreakerPolicy(window=5, minimum_calls=5)  # as large as the window: it trips
    assert feed(BreakerState(), 0.0, ["fail"] * 5, policy).state == "open"
    BreakerPolicy(window_type="time", window=5)  # a time window holds any number of calls


def test_a_steep_backoff_factor_reaches_the_longest_open_duration() -> None:
    # 1e10 ** 31 overflowed: OverflowError from record() (the Redis script got inf, so only
    # the memory backend crashed), on the 32nd consecutive trip
    policy = BreakerPolicy(backoff_factor=1e10, open_seconds=1, max_open_seconds=600)
    assert [policy.open_duration(trips) for trips in (1, 2, 32, 100)] == [1, 600, 600, 600]
    state = BreakerState(state="half_open", trips=40)
    assert record(state, 0.0, policy, "fail").open_until == 600.0
    with pytest.raises(ConfigurationError):
        BreakerPolicy(backoff_factor=float("nan"))


class Driven:
    """A backend whose clock the test moves: memory (injected clock) or Redis (clock offset)."""

    def __init__(self, backend: Any, advance: Any) -> None:
        self.backend, self.advance = backend, advance


def drive(kind: str, redis_target: RedisTarget, policy: BreakerPolicy) -> Iterator[Driven]:
    """A :class:`Driven` backend of ``kind`` (memory, redis, cluster) under ``policy``."""
    if kind == "memory":
        now = [1000.0]

        def advance(seconds: float) -> None:
            now[0] += seconds

        yield Driven(MemoryBreakerBackend(policy, clock=lambda: now[0]), advance)
        return
    store = redis_store(*redis_target(kind))
    backend = RedisBreakerBackend(store, policy)

    def shift(seconds: float) -> None:
        backend.clock_offset += seconds

    yield Driven(backend, shift)
    store.close()


@pytest.fixture(params=["memory", "redis", "cluster"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from drive(request.param, redis_target, POLICY)


def test_contract_trip_probe_close(driven: Driven) -> None:
    b = driven.backend
    for outcome in ["fail", "ok", "fail", "fail"]:
        assert b.acquire("r").allowed
        b.record("r", outcome)
    assert b.state("r") == "open"
    refused = b.acquire("r")
    assert not refused.allowed
    assert 9.0 < refused.retry_after <= 10.0
    assert b.acquire("other").allowed  # routes are independent
    driven.advance(10.5)
    probes = [b.acquire("r") for _ in range(3)]
    assert [p.allowed for p in probes] == [True, True, False]
    assert probes[0].state == "half_open"
    assert b.record("r", "ok") == "half_open"
    assert b.record("r", "ok") == "closed"
    assert b.acquire("r").allowed


def test_contract_a_passed_probe_ends_the_open_wait(driven: Driven) -> None:
    b = driven.backend
    b.end_open_wait("r")  # closed: nothing changes
    assert b.state("r") == "closed"
    for _ in range(4):
        b.record("r", "fail")
    assert not b.acquire("r").allowed
    b.end_open_wait("r")
    permit = b.acquire("r")  # no time passed: the probe's success is what half-opens it
    assert (permit.allowed, permit.state) == (True, "half_open")
    b.isolate("r")
    b.end_open_wait("r")
    assert not b.acquire("r").allowed  # isolated stays isolated
    b.reset("r")


def test_contract_a_passed_probe_does_not_cut_a_429_pause_short(driven: Driven) -> None:
    b = driven.backend
    assert b.record("r", "rate_limited", 30.0) == "open"  # Retry-After: 30
    b.end_open_wait("r")  # a background probe's one-token request got through
    refused = b.acquire("r")
    assert not refused.allowed
    assert 29.0 < refused.retry_after <= 30.0  # the provider's pause still holds
    driven.advance(30.5)
    assert b.acquire("r").allowed
    for _ in range(4):  # a trip by failures after it: a passed probe ends that wait
        b.record("r", "fail")
    assert b.state("r") == "open"
    b.end_open_wait("r")
    assert b.acquire("r").allowed


def test_contract_failed_probe_reopens_longer(driven: Driven) -> None:
    b = driven.backend
    for _ in range(4):
        b.record("r", "fail")
    driven.advance(10.5)
    assert b.acquire("r").allowed
    assert b.record("r", "fail") == "open"
    refused = b.acquire("r")
    assert 19.0 < refused.retry_after <= 20.0


def test_contract_a_slow_probe_reopens_a_breaker_that_trips_on_slow_calls(
    driven: Driven,
) -> None:
    """A probe slower than ``slow_call_seconds`` counted as a success: a route tripped by
    slow calls closed again on slow probes, then tripped again (open, half-open, open...)."""
    b = driven.backend
    for _ in range(4):
        b.record("r", "slow")
    assert b.state("r") == "open"
    driven.advance(10.5)
    assert b.acquire("r").allowed
    assert b.record("r", "slow", probe=True) == "open"
    assert 19.0 < b.acquire("r").retry_after <= 20.0  # reopened for longer, as a failure


def test_contract_rate_limit_and_manual_control(driven: Driven) -> None:
    b = driven.backend
    assert b.record("r", "rate_limited", 3.0) == "open"
    assert 2.0 < b.acquire("r").retry_after <= 3.0
    b.isolate("r")
    driven.advance(1000)
    assert b.acquire("r").state == "isolated"
    b.reset("r")
    assert b.acquire("r").allowed


def test_half_open_permits_are_atomic_under_concurrency(driven: Driven) -> None:
    b = driven.backend
    for _ in range(4):
        b.record("r", "fail")
    driven.advance(10.5)
    granted: list[bool] = []
    barrier = threading.Barrier(12)

    def ask() -> None:
        barrier.wait()
        granted.append(b.acquire("r").allowed)

    threads = [threading.Thread(target=ask) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(granted) == [False] * 10 + [True] * 2


def test_a_route_name_that_is_no_string_is_a_configuration_error(driven: Driven) -> None:
    breakers = Breakers(driven.backend)
    for bad in (5, None, ""):
        for use in (
            breakers.permit,
            breakers.state,
            breakers.isolate,
            breakers.reset,
            breakers.release,
            breakers.probe_passed,
        ):
            with pytest.raises(ConfigurationError):
                use(bad)  # type: ignore[arg-type]  # memory took it, Redis raised AttributeError
        with pytest.raises(ConfigurationError):
            breakers.record(bad, None, seconds=0.1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        breakers.record("r", None, seconds="0.1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Breakers(driven.backend, hooks=5)  # type: ignore[arg-type]
    assert breakers.state("r") == "closed"


def test_two_processes_see_one_breaker(redis_url: str, redis_prefix: str) -> None:
    first = RedisBreakerBackend(RedisStore(redis_url, key_prefix=redis_prefix), POLICY)
    second = RedisBreakerBackend(RedisStore(redis_url, key_prefix=redis_prefix), POLICY)
    for _ in range(4):
        first.record("shared", "fail")
    assert not second.acquire("shared").allowed
    second.reset("shared")
    assert first.acquire("shared").allowed


def test_transitions_are_reported_once() -> None:
    seen: list[BreakerTransition] = []
    now = [0.0]
    breakers = Breakers(MemoryBreakerBackend(POLICY, clock=lambda: now[0]), [seen.append])
    for _ in range(4):
        breakers.record("r", ProviderUnavailableError("down"), seconds=0.1)
    breakers.record("r", BadRequestError("ignored", status_code=400), seconds=0.1)
    now[0] = 11
    breakers.permit("r")
    breakers.record("r", None, seconds=0.1)
    breakers.record("r", None, seconds=0.1)
    assert [(t.before, t.after) for t in seen] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


def test_lost_probes_do_not_hold_the_breaker_half_open_forever(driven: Driven) -> None:
    b = driven.backend
    for _ in range(4):
        b.record("r", "fail")
    driven.advance(10.5)
    assert [b.acquire("r").allowed for _ in range(3)] == [True, True, False]
    # The two probes' callers were cancelled: no outcome ever comes back.
    driven.advance(5)
    assert not b.acquire("r").allowed  # still waiting for them
    driven.advance(6)  # open_seconds after turning half-open: probe again
    assert b.acquire("r").allowed
    assert b.record("r", "ok") == "half_open"


def test_a_call_let_through_before_the_trip_is_no_probe(driven: Driven) -> None:
    b = driven.backend
    earlier = b.acquire("r")  # closed: this call's outcome comes back half-open
    assert not earlier.probe
    for _ in range(4):
        b.record("r", "fail")
    driven.advance(10.5)
    probes = [b.acquire("r") for _ in range(2)]
    assert [(p.allowed, p.probe) for p in probes] == [(True, True), (True, True)]
    b.release("r", probe=earlier.probe)  # cancelled: it frees no probe permit
    assert not b.acquire("r").allowed  # still exactly half_open_permits probes
    assert b.record("r", "ok", probe=earlier.probe) == "half_open"  # not a probe's success
    assert b.record("r", "fail", probe=False) == "half_open"  # nor a probe's failure
    assert b.record("r", "ok", probe=True) == "half_open"
    assert b.record("r", "ok", probe=True) == "closed"  # the two probes closed it


def test_breakers_pass_on_whether_a_permit_was_a_probe() -> None:
    now = [0.0]
    breakers = Breakers(MemoryBreakerBackend(POLICY, clock=lambda: now[0]))
    earlier = breakers.permit("r")
    for _ in range(4):
        breakers.record("r", ProviderUnavailableError("down"), seconds=0.1)
    now[0] = 11
    assert breakers.permit("r").probe
    assert breakers.permit("r").probe
    breakers.record("r", BadRequestError("no", status_code=400), seconds=0.1, probe=False)
    breakers.release("r", probe=earlier.probe)
    assert not breakers.permit("r").allowed
    breakers.record("r", None, seconds=0.1, probe=earlier.probe)
    assert breakers.state("r") == "half_open"


def test_breakers_record_the_provider_sdks_own_errors(fake: FakeProvider) -> None:
    """A standalone breaker around openai calls records openai's errors as the SDK classifies
    them (a 503 fails, a 429 pauses for its Retry-After); they were taken for a caller's own
    errors, not recorded, and the breaker never opened."""
    now = [0.0]
    breakers = Breakers(MemoryBreakerBackend(POLICY, clock=lambda: now[0]))

    def call(route: str) -> None:
        permit = breakers.permit(route)
        try:
            client.chat.completions.create(model="fake-model", messages=USER)
        except openai.APIError as error:
            breakers.record(route, error, seconds=0.1, probe=permit.probe)

    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:
        fake.script(*[Fault(status=503)] * 4)
        for _ in range(4):
            call("down")
        assert breakers.state("down") == "open"
        fake.script(Fault(status=429, retry_after=7))
        call("limited")
        assert breakers.permit("limited").retry_after == 7.0
    for _ in range(4):
        breakers.record("mine", ValueError("a bug of the caller's"), seconds=0.1)
    assert breakers.backend.state("mine") == "closed"


def test_a_breaker_tripped_in_another_os_process_is_open_here(
    redis_url: str, redis_prefix: str
) -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from llmguard_sdk.breaker import BreakerPolicy, RedisBreakerBackend\n"
        "from llmguard_sdk.store import RedisStore\n"
        "policy = BreakerPolicy(window=10, minimum_calls=4, open_seconds=10)\n"
        "backend = RedisBreakerBackend(RedisStore(sys.argv[1], key_prefix=sys.argv[2]), policy)\n"
        "for _ in range(4):\n"
        "    backend.record('shared-route', 'fail')\n"
    )
    subprocess.run([sys.executable, "-c", script, redis_url, redis_prefix], check=True, timeout=60)
    here = RedisBreakerBackend(RedisStore(redis_url, key_prefix=redis_prefix), POLICY)
    permit = here.acquire("shared-route")
    assert not permit.allowed
    assert permit.state == "open"


def test_redis_a_long_open_duration_still_trips_in_redis(redis_url: str, redis_prefix: str) -> None:
    """A policy whose longest open duration is beyond any TTL (finite, so it is accepted):
    the trip is recorded in Redis (EXPIRE refused the overflowing TTL, failing the script:
    Redis taken for down by every stage, the trip kept in this process only)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    policy = BreakerPolicy(minimum_calls=2, open_seconds=10, max_open_seconds=1e16)
    backend = RedisBreakerBackend(store, policy)
    for _ in range(2):
        assert backend.acquire("r").allowed
        backend.record("r", "fail")
    assert store.health.up()
    assert backend.state("r") == "open"
    client: RawRedis = store.client
    assert client.ttl(store.key("cb", hash_id("r"), "s")) > 0
    store.close()


def test_redis_down_the_state_is_the_local_breakers() -> None:
    """While Redis cannot be reached, ``state()`` reads the local breakers the calls use
    (it raised redis' ConnectionError, after a socket timeout each time)."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.2)
    breakers = Breakers(RedisBreakerBackend(store, POLICY))
    assert breakers.state("r") == "closed"
    for _ in range(4):
        assert breakers.permit("r").allowed
        breakers.record("r", ProviderUnavailableError("down"), seconds=0.1)
    assert breakers.state("r") == "open"  # the local breaker the calls saw trip
    assert store.health.outages == 1
    store.close()


def test_redis_down_isolate_and_reset_act_on_the_local_breakers() -> None:
    """While Redis cannot be reached, the calls use the local breakers: ``isolate`` and
    ``reset`` act on those (they raised redis' ConnectionError and left the route open to
    calls, or an open local breaker refusing them)."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.2)
    breakers = Breakers(RedisBreakerBackend(store, POLICY))
    breakers.isolate("r")
    assert breakers.state("r") == "isolated"
    assert not breakers.permit("r").allowed
    breakers.reset("r")
    assert breakers.state("r") == "closed"
    assert breakers.permit("r").allowed
    for _ in range(4):
        breakers.record("r", ProviderUnavailableError("down"), seconds=0.1)
    assert not breakers.permit("r").allowed  # tripped locally
    breakers.reset("r")
    assert breakers.permit("r").allowed
    store.close()


def test_memory_breakers_forget_routes_left_idle_as_redis_expires_their_keys() -> None:
    """Every route's state stayed in memory for good (breakers keyed per tenant or host grew
    without bound), where Redis expires an idle route's keys after ``forget_after``."""
    import gc
    import tracemalloc

    from llmguard_sdk.breaker.memory import FORGET_PER_CALL, forget_after

    now = [0.0]
    breakers = Breakers(MemoryBreakerBackend(POLICY, clock=lambda: now[0]))
    idle = forget_after(POLICY)
    assert idle == 3600
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(3000):  # one breaker per tenant, each with something in its window
            breakers.record(f"tenant-{i}", ProviderUnavailableError("down"), seconds=0.1)
        breakers.isolate("kept")
        for _ in range(3):
            breakers.record("r", ProviderUnavailableError("down"), seconds=0.1)
        full = tracemalloc.get_traced_memory()[0] - base
        now[0] += idle  # none of them heard of for that long: forgotten, a few a call
        for _ in range(3000 // FORGET_PER_CALL + 1):
            assert breakers.permit("other").allowed
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert full > 300_000  # (what 3000 breakers take: the measure sees them)
    assert left < full / 5  # (what stays is the table's room for that many, not the states)
    breakers.record("r", ProviderUnavailableError("down"), seconds=0.1)
    assert breakers.state("r") == "closed"  # 3 failures forgotten: 1 of minimum_calls 4
    assert breakers.state("kept") == "isolated"  # isolated: until reset, never forgotten
    now[0] += 2 * idle
    assert breakers.state("kept") == "isolated"
    breakers.reset("kept")
    assert breakers.state("kept") == "closed"


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: MemoryBreakerBackend("strict"), "BreakerPolicy"),  # type: ignore[arg-type]
        (lambda: MemoryBreakerBackend(POLICY, clock=5), "clock"),  # type: ignore[arg-type]
        (lambda: RedisBreakerBackend("redis://localhost", POLICY), "RedisStore"),  # type: ignore[arg-type]
        (lambda: Breakers("memory"), "breaker backend"),  # type: ignore[arg-type]
    ],
)
def test_a_breaker_built_of_the_wrong_parts_is_a_configuration_error(
    build: Any, named: str
) -> None:
    """A wrong policy, clock, store or backend was taken and raised AttributeError or
    TypeError at the first call (inside the Guard's pipeline)."""
    with pytest.raises(ConfigurationError, match=named):
        build()
