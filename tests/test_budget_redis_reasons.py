"""What a Redis-backed budget says when Redis did not decide for it, and why: a full
connection pool or a busy event loop (this process's load), Redis refusing the script (it
answered, with an error), or Redis away. Each is said in the refusal of a fail-closed
budget and in a status read alike; a fail-open budget tells ``on_event`` once per outage and
once per episode of load. Real Redis; the pool is held full by taking its connections, the
loop kept busy by a task that blocks it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from llmguard_sdk.budget import BudgetEvent, BudgetUnavailableError
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider
from tests.conftest import USER, RawRedis
from tests.test_redis_loop_lag import PAST_THE_CAP, _work
from tests.test_redis_pool import _apool_held, _pool_held, budgeted

SPEC = CounterSpec("tenant.acme", nano(1.0), "day", 3600.0, (), "tenant", 0)
ROLLING = CounterSpec("tenant.acme", nano(1.0), "rolling", 3600.0, (), "tenant", 0)
HOLD: dict[str, Any] = {"base": nano(0.1), "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}
LOCALLY = BudgetEvent("unavailable", "default", "*", action="counted_locally")


def _status(backend: RedisBudgetBackend, spec: CounterSpec, mode: str) -> BudgetUnavailableError:
    """The error of a status read of ``spec`` (sync, or ``async`` in a loop of its own)."""

    async def aread() -> None:
        try:
            await backend.astatus([spec])
        finally:
            await backend._store.aclose()

    read = (lambda: anyio.run(aread)) if mode == "async" else (lambda: backend.status([spec]))
    with pytest.raises(BudgetUnavailableError) as failed:
        read()
    return failed.value


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_status_read_on_a_full_pool_says_so(
    redis_url: str, redis_prefix: str, tmp_path: Path, mode: str
) -> None:
    """A status read whose round trip found the pool full past ``pool_timeout`` said "Redis
    did not answer" (and noted an outage); it says the pool stayed full, as a refusal does,
    and Redis is not paused."""
    store = RedisStore(
        redis_url,
        key_prefix=redis_prefix,
        max_connections=1,
        pool_timeout=0.05,
        journal_dir=str(tmp_path),
    )
    backend = RedisBudgetBackend(store)

    async def aread() -> BudgetUnavailableError:
        async with _apool_held(store):
            with pytest.raises(BudgetUnavailableError) as failed:
                await backend.astatus([SPEC])
        await store.aclose()
        return failed.value

    if mode == "async":
        error = anyio.run(aread)
    else:
        with _pool_held(store), pytest.raises(BudgetUnavailableError) as failed:
            backend.status([SPEC])
        error = failed.value
    text = str(error)
    assert "did not answer" not in text
    assert "connection pool stayed full for pool_timeout (0.05 s)" in text
    assert "max_connections" in text
    assert error.retry_after == 0.0
    assert (store.health.outages, store.health.failures, store.health.exhausted) == (0, 0, 1)
    assert backend.status([SPEC])[0][:2] == (0, 0)  # the pool free: read from Redis
    store.close()


def test_a_status_read_on_a_busy_event_loop_says_so(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """An async status read whose round trip timed out while the event loop was busy said
    "Redis did not answer" and paused Redis; it says the loop was too busy, Redis not
    paused."""
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, socket_timeout=0.05, journal_dir=str(tmp_path)
    )
    backend = RedisBudgetBackend(store)
    errors: list[BaseException] = []

    async def read() -> None:
        try:
            await backend.astatus([SPEC])
        except BudgetUnavailableError as exc:
            errors.append(exc)

    async def busy_loop() -> None:
        _work(PAST_THE_CAP)  # (a shorter lag is waited out)

    async def calls() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(read)  # starts connecting first
            group.start_soon(busy_loop)
        await store.aclose()

    anyio.run(calls)
    (error,) = errors
    assert "did not answer" not in str(error)
    assert "event loop was too busy" in str(error)
    assert (store.health.outages, store.health.failures, store.health.lagged) == (0, 0, 1)
    store.close()


def _refusing(kind: str, client: RawRedis, backend: RedisBudgetBackend) -> tuple[CounterSpec, str]:
    """Make Redis refuse the budget scripts of a counter: a key of another kind where its
    state is (``wrongtype``), or a rolling bucket the script cannot read (``script``, an
    error of the script as it runs); the counter, and a piece of what Redis says."""
    if kind == "wrongtype":
        client.set(backend._keys([SPEC])[0], "another application's value", ex=60)
        return SPEC, "WRONGTYPE"
    client.hset(backend._keys([ROLLING])[2], "not-a-bucket", "1")
    client.expire(backend._keys([ROLLING])[2], 60)
    return ROLLING, "user_script"


@pytest.mark.parametrize("kind", ["wrongtype", "script"])
def test_a_fail_closed_budget_whose_script_redis_refuses_says_so(
    redis_url: str, redis_prefix: str, tmp_path: Path, kind: str
) -> None:
    """Redis answered the reservation with an error (a key of another kind, a script error):
    the fail-closed refusal said "Redis cannot be reached"; it says Redis refused the
    script, with Redis's own message, and Redis is not paused (``retry_after`` 0). A status
    read says the same."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    backend = RedisBudgetBackend(store)
    client: RawRedis = redis.Redis.from_url(redis_url)
    spec, said = _refusing(kind, client, backend)
    result = backend.reserve("r1", [spec], **HOLD)
    assert (result.allowed, result.unavailable) == (False, True)
    assert "Redis refused the budget script" in result.detail
    assert said in result.detail
    assert result.retry_after == 0.0
    for mode in ("sync", "async"):
        error = _status(backend, spec, mode)
        assert "did not answer" not in str(error)
        assert "Redis refused the budget script" in str(error)
        assert said in str(error)
    assert store.health.failures == 0  # Redis answered: no pause
    client.close()
    store.close()


def test_a_fail_closed_guard_says_redis_refused_the_script(
    fake: FakeProvider, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """What the caller of a Guard sees: :class:`BudgetUnavailableError` with Redis's reason,
    not "Redis cannot be reached"."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    guard = budgeted(fake, store, fail_open=False)
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        guard.chat(USER, max_tokens=3)
        (counter,) = client.keys(f"{redis_prefix}:budget:*:c:*")
        client.delete(counter)
        client.set(counter, "not a counter", ex=60)
        with pytest.raises(BudgetUnavailableError) as refused:
            guard.chat(USER, max_tokens=3)
        text = str(refused.value)
        assert "cannot be reached" not in text
        assert "Redis refused the budget script (WRONGTYPE" in text
        assert fake.stats.requests == 1  # the refused call went nowhere
    finally:
        client.close()
        guard.close()


def test_fail_open_tells_on_event_once_per_episode_of_a_full_pool(
    fake: FakeProvider,
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fail-open budget meeting a full pool counts that call locally and tells
    ``on_event`` once for the episode (not per call); once the pool has served calls again
    for longer than a wait and an attempt, a new episode is told again, as a new outage is.
    It was told once per process."""
    store = RedisStore(
        redis_url,
        key_prefix=redis_prefix,
        max_connections=1,
        pool_timeout=0.05,
        socket_timeout=0.1,
        retry_pause=0.1,
        journal_dir=str(tmp_path),
    )
    events: list[BudgetEvent] = []
    guard = budgeted(fake, store, fail_open=True, on_event=[events.append])

    def told() -> list[BudgetEvent]:
        return [event for event in events if event.kind == "unavailable"]

    quiet = store.pool_timeout + store.health.attempt_seconds + store.health.base
    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"), _pool_held(store):
            guard.chat(USER, max_tokens=3)
            guard.chat(USER, max_tokens=3)
        assert told() == [LOCALLY]  # once for the episode, not per call
        guard.chat(USER, max_tokens=3)  # the pool free: in Redis
        assert told() == [LOCALLY]
        time.sleep(2 * quiet)  # the episode over: no decision made for load meanwhile
        guard.chat(USER, max_tokens=3)
        with _pool_held(store):
            guard.chat(USER, max_tokens=3)
        assert told() == [LOCALLY, LOCALLY]  # a new episode, told again
        assert (store.health.outages, store.health.failures) == (0, 0)
        assert store.health.overloads == 2
    finally:
        guard.close()
