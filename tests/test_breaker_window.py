"""Breaker windows of bounded size: trips at the same points as the window of every outcome
they replaced, time windows in buckets that expire, a state whose size does not grow with
traffic, and the Redis script in step with the pure policy (clocks driven, never slept)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk.breaker import (
    BreakerPolicy,
    BreakerState,
    MemoryBreakerBackend,
    RedisBreakerBackend,
)
from llmguard_sdk.breaker.policy import TIME_BUCKETS, Outcome, acquire, record
from tests.conftest import RedisTarget, redis_store

OUTCOMES = ["ok", "ok", "slow", "fail", "rate_limited"]


class Reference:
    """The breaker as it was: a list of every ``(time, outcome)`` since the window was last
    emptied, filtered and counted afresh on each record. ``bucketed`` keeps what the time
    window keeps now (whole buckets); otherwise the last ``window`` seconds, to the instant.
    The paths that never touch the window (open, half-open, a 429's hint) are the policy's."""

    def __init__(self, policy: BreakerPolicy, *, bucketed: bool = True) -> None:
        self.policy, self.bucketed = policy, bucketed
        self.state = BreakerState()
        self.seen: list[tuple[Fraction, str]] = []

    def kept(self, now: Fraction) -> list[str]:
        p = self.policy
        if p.window_type == "count":
            return [o for _, o in self.seen[-int(p.window) :]]
        if not self.bucketed:
            return [o for t, o in self.seen if t > now - Fraction(p.window)]
        newest = math.floor(now * TIME_BUCKETS / Fraction(p.window))
        return [
            o
            for t, o in self.seen
            if math.floor(t * TIME_BUCKETS / Fraction(p.window)) > newest - TIME_BUCKETS
        ]

    def record(self, now: Fraction, outcome: Any, hint: float | None) -> None:
        before = self.state
        if before.state != "closed" or hint is not None:
            self.state = record(before, float(now), self.policy, outcome, hint=hint)
            if self.state.state != before.state:
                self.seen = []
            return
        self.seen.append((now, outcome))
        kept = self.kept(now)
        failures = sum(o in ("fail", "rate_limited") for o in kept)
        slow = sum(o == "slow" for o in kept)
        p = self.policy
        if len(kept) >= p.minimum_calls and (
            failures / len(kept) >= p.failure_rate or slow / len(kept) >= p.slow_call_rate
        ):
            trips = before.trips + 1
            until = float(now) + p.open_duration(trips)
            self.state = BreakerState(state="open", open_until=until, trips=trips)
            self.seen = []


def events() -> st.SearchStrategy[list[tuple[str, int, Any]]]:
    """(what, eighths of a second to wait first, outcome or hint)."""
    step = st.sampled_from([0, 0, 1, 3, 8, 40])
    recorded = st.tuples(st.just("record"), step, st.sampled_from(OUTCOMES))
    limited = st.tuples(st.just("429"), step, st.sampled_from([0.5, 3.0]))
    asked = st.tuples(st.just("acquire"), step, st.none())
    return st.lists(st.one_of(recorded, recorded, recorded, limited, asked), max_size=150)


def policies(window_type: str) -> st.SearchStrategy[BreakerPolicy]:
    if window_type == "count":  # a count window holds at most ``window`` calls
        sizes = st.integers(1, 25).map(lambda size: (size, min(size, 12)))
    else:
        sizes = st.sampled_from([1, 2, 4, 5, 10]).map(lambda size: (size, 12))
    return sizes.flatmap(lambda size: _policies(window_type, *size))


def _policies(window_type: str, window: int, most_calls: int) -> st.SearchStrategy[BreakerPolicy]:
    return st.builds(
        BreakerPolicy,
        window_type=st.just(window_type),
        window=st.just(window),
        minimum_calls=st.integers(1, most_calls),
        failure_rate=st.sampled_from([0.2, 0.5, 0.75, 1.0]),
        slow_call_rate=st.sampled_from([0.3, 0.6, 1.0]),
        open_seconds=st.sampled_from([1.0, 4.0]),
        half_open_permits=st.integers(1, 3),
    )


def replay(policy: BreakerPolicy, steps: list[tuple[str, int, Any]]) -> None:
    """Run ``steps`` through the policy and the reference side by side; they must agree on
    every state, and the window's counts on what the reference keeps."""
    state, reference, now = BreakerState(), Reference(policy), Fraction(0)
    exact = Reference(policy, bucketed=False)  # for time windows: the bounds below
    for what, eighths, value in steps:
        now += Fraction(eighths, 8)
        if what == "acquire":
            _, state = acquire(state, float(now), policy)
            _, reference.state = acquire(reference.state, float(now), policy)
            continue
        outcome: Outcome
        outcome, hint = ("rate_limited", value) if what == "429" else (value, None)
        state = record(state, float(now), policy, outcome, hint=hint)
        reference.record(now, outcome, hint)
        assert state == BreakerState(**{**vars(reference.state), "window": state.window})
        if state.state != "closed":
            assert state.window == ()
            continue
        kept = reference.kept(now)
        assert state.calls == len(kept)
        assert state.failures == sum(o in ("fail", "rate_limited") for o in kept)
        assert state.slow_calls == sum(o == "slow" for o in kept)
        if policy.window_type == "time":
            # Whole buckets: nothing older than the window, all of its last 9/10.
            exact.seen = reference.seen
            width = Fraction(policy.window) / TIME_BUCKETS
            assert len(exact.kept(now + width)) <= state.calls <= len(exact.kept(now))


@settings(max_examples=300, deadline=None)
@given(policies("count"), events())
def test_count_windows_trip_where_the_list_of_outcomes_did(
    policy: BreakerPolicy, steps: list[tuple[str, int, Any]]
) -> None:
    replay(policy, steps)


@settings(max_examples=300, deadline=None)
@given(policies("time"), events())
def test_time_windows_count_whole_buckets(
    policy: BreakerPolicy, steps: list[tuple[str, int, Any]]
) -> None:
    replay(policy, steps)


def test_a_time_window_forgets_each_bucket_when_it_leaves() -> None:
    policy = BreakerPolicy(window_type="time", window=10, minimum_calls=4)
    state = record(BreakerState(), 100.5, policy, "fail")  # bucket [100, 101)
    state = record(state, 101.5, policy, "fail")  # bucket [101, 102)
    state = record(state, 101.7, policy, "fail")
    assert (state.calls, state.failures) == (3, 3)
    later = record(state, 110.9, policy, "ok")  # bucket [100, 101) has just left
    assert (later.state, later.calls, later.failures) == ("closed", 3, 2)
    later = record(later, 111.0, policy, "ok")  # and now [101, 102)
    assert (later.state, later.calls, later.failures) == ("closed", 2, 0)
    assert record(state, 109.9, policy, "ok").state == "open"  # 3 of 4 failed, all in the window
    idle = record(state, 5000.0, policy, "fail")  # an idle route: every bucket forgotten at once
    assert (idle.calls, idle.failures, len(idle.window)) == (1, 1, 7)


def test_100k_records_keep_the_state_the_same_size() -> None:
    now = [1_000.0]
    for policy in (
        BreakerPolicy(window_type="time", window=10, minimum_calls=5, failure_rate=0.5),
        BreakerPolicy(window=20, minimum_calls=5, failure_rate=0.5),
    ):
        backend = MemoryBreakerBackend(policy, clock=lambda: now[0])
        sizes = set()
        for i in range(100_000):
            now[0] += 0.001  # 1,000 calls a second: 10,000 in the time window
            assert backend.record("r", "fail" if i % 4 == 0 else "ok") == "closed"
            sizes.add(len(backend._states["r"].window))
        state = backend._states["r"]
        if policy.window_type == "time":
            assert max(sizes) == 4 + 3 * TIME_BUCKETS
            assert 9_000 <= state.calls <= 10_000  # the last 9 to 10 seconds
            assert abs(state.failures * 4 - state.calls) <= 4  # every 4th call failed
        else:
            assert sizes == {4}
            assert (state.calls, state.failures) == (20, 5)
            assert state.window[3].bit_length() <= 2 * 20  # the ring: 2 bits a call


# ------------------------------------------------------------------- Redis, in step


COUNT = BreakerPolicy(
    window=8, minimum_calls=4, slow_call_rate=0.75, open_seconds=100, max_open_seconds=400
)
TIME = BreakerPolicy(
    window_type="time",
    window=1000,
    minimum_calls=4,
    slow_call_rate=0.75,
    open_seconds=100,
    max_open_seconds=400,
)


class Pair:
    """A memory backend and a Redis one on clocks moved together. Both start 5 s into a
    bucket (of 100 s for ``TIME``) and move in steps of 10 s, so the few seconds the test
    takes never carry the Redis clock across a boundary the memory clock has not crossed."""

    def __init__(self, redis: RedisBreakerBackend, policy: BreakerPolicy) -> None:
        self.redis, self.now = redis, [1_000_005.0]
        self.memory = MemoryBreakerBackend(policy, clock=lambda: self.now[0])
        seconds, _ = redis._store.client.time()  # type: ignore[misc]  # redis-py: Awaitable | Any
        started = float(seconds)
        redis.clock_offset = math.ceil(started / 100) * 100 + 5 - started

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds
        self.redis.clock_offset += seconds


@pytest.fixture(params=["redis", "cluster"])
def target(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Any]:
    store = redis_store(*redis_target(request.param))
    yield store
    store.close()


@pytest.mark.parametrize("policy", [COUNT, TIME], ids=["count", "time"])
def test_the_redis_script_keeps_step_with_the_policy(target: Any, policy: BreakerPolicy) -> None:
    pair = Pair(RedisBreakerBackend(target, policy), policy)
    rng = random.Random(22)
    for _ in range(400):
        roll = rng.random()
        if roll < 0.15:
            pair.advance(10 * rng.randint(1, 12))
        elif roll < 0.3:
            mine, theirs = pair.memory.acquire("r"), pair.redis.acquire("r")
            assert (theirs.allowed, theirs.state) == (mine.allowed, mine.state)
        elif roll < 0.32:
            assert pair.redis.record("r", "rate_limited", 50.0) == pair.memory.record(
                "r", "rate_limited", 50.0
            )
        else:
            outcome: Outcome = rng.choice(["ok", "ok", "ok", "slow", "fail", "fail"])
            assert pair.redis.record("r", outcome) == pair.memory.record("r", outcome)
    window_key = pair.redis._keys("r")[1]
    assert target.client.hlen(window_key) <= 4 + (
        int(policy.window) if policy.window_type == "count" else 3 * TIME_BUCKETS
    )


@pytest.mark.parametrize("policy", [COUNT, TIME], ids=["count", "time"])
def test_a_redis_window_stays_the_same_size(target: Any, policy: BreakerPolicy) -> None:
    backend = RedisBreakerBackend(target, policy)
    window_key = backend._keys("r")[1]
    sizes = set()
    for i in range(2_000):
        backend.clock_offset += 7.0  # 2,000 calls over four hours: 143 in a time window
        assert backend.record("r", "fail" if i % 4 == 0 else "ok") == "closed"
        sizes.add(target.client.hlen(window_key))
    bound = 4 + (8 if policy.window_type == "count" else 3 * TIME_BUCKETS)
    assert max(sizes) == bound
    fields = target.client.hgetall(window_key)
    calls, failures = int(fields[b"n"]), int(fields[b"f"])
    if policy.window_type == "count":
        assert (calls, failures) == (8, 2)
    else:
        assert 128 <= calls <= 143  # 900 to 1,000 s of calls every 7 s
        assert abs(failures * 4 - calls) <= 4


def test_the_redis_time_window_forgets_each_bucket(target: Any) -> None:
    pair = Pair(RedisBreakerBackend(target, TIME), TIME)
    both = (pair.memory, pair.redis)
    for backend in both:
        for _ in range(3):
            backend.record("r", "fail")
    pair.advance(990)  # the window's last bucket: the failures still count
    assert pair.redis.record("r", "ok") == pair.memory.record("r", "ok") == "open"
    for backend in both:
        backend.reset("r")
        for _ in range(3):  # 95 s into their bucket
            backend.record("r", "fail")
    pair.advance(910)  # 905 s after their bucket ended: it has left the window
    assert pair.redis.record("r", "ok") == pair.memory.record("r", "ok") == "closed"
    fields = target.client.hgetall(pair.redis._keys("r")[1])
    assert (int(fields[b"n"]), int(fields[b"f"])) == (1, 0)
    assert (pair.memory._states["r"].calls, pair.memory._states["r"].failures) == (1, 0)


def test_a_window_left_by_0_1_0_does_not_get_in_the_way(target: Any) -> None:
    """0.1.0 kept every outcome in a list at ``:w``; the counts live at ``:c`` now, so a
    fleet upgraded while such a list is alive records as usual (the list expires)."""
    backend = RedisBreakerBackend(target, COUNT)
    old_key = backend._keys("r")[0][: -len(":s")] + ":w"
    target.client.lpush(old_key, "1800000000.000000|fail", "1800000000.000000|ok")
    outcomes: list[Outcome] = ["fail", "ok", "fail", "fail"]
    assert [backend.record("r", o) for o in outcomes] == ["closed"] * 3 + ["open"]
    assert backend.state("r") == "open"  # in Redis, not in the local fallback of an outage
