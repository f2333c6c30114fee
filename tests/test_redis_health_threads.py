"""A store's :class:`RedisHealth` is shared by every thread that calls through it (a sync
Guard called from a thread pool): its counters and its pause stay consistent however the
threads interleave. Each test switches threads as often as CPython allows, so an update
that is not atomic loses counts (it did: ``exhausted`` short, two outages for one)."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisHealth, RedisStore
from tests.conftest import RawRedis

THREADS = 8
T = TypeVar("T")


@contextlib.contextmanager
def _switching_often() -> Iterator[None]:
    """Threads switch every microsecond meanwhile (races likely), as before afterwards."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _together(work: Callable[[], object], threads: int = THREADS) -> None:
    """Run ``work`` in ``threads`` threads that start at once; re-raise a thread's error."""
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait(30)
            work()
        except BaseException as exc:  # (told to the test below)
            errors.append(exc)

    with _switching_often():
        running = [threading.Thread(target=run) for _ in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join(60)
    assert not errors, errors


def _repeat(call: Callable[[], T], times: int, into: list[T] | None = None) -> None:
    """Call ``call`` ``times`` times, its answers added to ``into``."""
    answers = [call() for _ in range(times)]
    if into is not None:
        into.extend(answers)  # (one list.extend: atomic)


def test_a_full_pool_counted_from_many_threads_loses_no_count() -> None:
    """N threads x M decisions made without Redis for a full pool: ``exhausted`` is N*M,
    and exactly one of them is told to warn (the warning comes once a minute). Repeated on
    fresh stores' health, so the threads race at the first warning every time."""
    calls = 200
    for _ in range(50):
        health = RedisHealth()
        warned: list[bool] = []
        _together(functools.partial(_repeat, health.pool_ran_out, calls, warned))
        assert health.exhausted == THREADS * calls
        assert warned.count(True) == 1
        assert (health.failures, health.outages) == (0, 0)


def test_failures_reported_at_once_start_one_outage() -> None:
    """Many threads meeting the same dead Redis at once start one outage, paused once: one
    failure (the next pause is not doubled per thread), not one outage per thread. Repeated,
    each round after Redis answered again, so the threads race at every outage's start."""
    health = RedisHealth(base=30.0, cap=30.0)  # (a pause far longer than the test)
    rounds = 50
    pauses: list[float] = []
    for number in range(1, rounds + 1):
        _together(lambda: pauses.append(health.failed()))
        assert (health.outages, health.failures) == (number, 1)
        assert not health.up()
        health.succeeded()  # Redis answered: the outage is over
        health.down_until = 0.0  # (and its pause, so the next failure starts another)
    assert len(pauses) == THREADS * rounds


def test_one_probe_after_a_pause_however_many_threads_ask() -> None:
    """When a pause ends, exactly one of the threads asking at once takes the probe; the
    others decide locally until it ends (Redis is not tried once per thread)."""
    health = RedisHealth(base=30.0, cap=30.0)
    for _ in range(50):
        health.failed()
        health.down_until = 0.0  # the pause is over
        taken: list[bool] = []
        _together(functools.partial(_repeat, health.may_try, 20, taken))
        assert taken.count(True) == 1
        health.succeeded()


def test_a_held_pool_met_from_many_threads_counts_every_decision(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A real store whose every connection is held: N threads x M rate-limit decisions each
    wait out ``pool_timeout`` and are made without Redis; every one is counted, one warning
    is logged, and Redis is not paused."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, max_connections=1, pool_timeout=0.001)
    limiter = RedisRateLimiter(store, {"r": RateLimit(rpm=10**9, concurrency=10**6)})
    calls = 40
    pool: RawRedis = store._pool
    held = pool.get_connection()
    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            _together(functools.partial(_repeat, functools.partial(limiter.reserve, "r"), calls))
    finally:
        pool.release(held)
    assert store.health.exhausted == THREADS * calls
    assert (store.health.outages, store.health.failures) == (0, 0)
    assert len([r for r in caplog.records if "max_connections" in r.getMessage()]) == 1
    assert limiter.in_flight("r") == 0  # none reached Redis
    store.close()


def test_a_dead_redis_met_from_many_threads_is_one_outage_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Threads meeting a Redis that refuses connections at once: one outage, logged once
    (repeated on fresh stores, so the threads race at each outage's start)."""
    for _ in range(20):
        caplog.clear()
        store = RedisStore("redis://127.0.0.1:1/0", retry_pause=30)
        limiter = RedisRateLimiter(store, {"r": RateLimit(rpm=10**9)})
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            _together(functools.partial(_repeat, functools.partial(limiter.reserve, "r"), 3))
        assert (store.health.outages, store.health.failures) == (1, 1)
        assert len([r for r in caplog.records if "Redis unavailable" in r.getMessage()]) == 1
        store.close()
