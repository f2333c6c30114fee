"""Budgets that fail open tell ``on_event`` that Redis is away: once per outage, at the
first call counted in the process's memory (its reservation or a retry's top-up), and again
at the next outage once Redis has answered in between (a redis-server of its own, killed and
restarted from its file)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest
from redis_cluster import RedisServer

from llmguard_sdk import BudgetExceededError, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, BudgetEvent, Budgets
from llmguard_sdk.budget.journal import record
from llmguard_sdk.budget.memory import HoldArgs
from llmguard_sdk.budget.policy import CounterSpec
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, RawRedis
from .test_budget_guard import CALL_USD, PRICES
from .test_fake_provider import wait_until

pytestmark = pytest.mark.redis
LOCALLY = BudgetEvent("unavailable", "default", "*", action="counted_locally")


def _guard(
    fake: FakeProvider, store: RedisStore, events: list[BudgetEvent], **options: object
) -> Guard:
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        store=store,
        budgets=Budgets(
            [Budget(limit_usd=1.0)], prices=PRICES, fail_open=True, on_event=[events.append]
        ),
        environ={},
        **options,  # type: ignore[arg-type]
    )


def _outages(events: list[BudgetEvent]) -> list[BudgetEvent]:
    return [event for event in events if event.kind == "unavailable"]


def _served(guard: Guard, twin: str) -> float | None:
    if twin == "sync":
        return guard.chat(USER, max_tokens=3).cost_usd
    return anyio.run(lambda: guard.achat(USER, max_tokens=3)).cost_usd


def test_fail_open_tells_on_event_once_per_outage(
    redis_server: RedisServer, fake: FakeProvider, tmp_path: Path
) -> None:
    """Calls counted per process while Redis was away (the budget not enforced across the
    fleet) told ``on_event`` nothing: only failing closed sent an "unavailable" event."""
    store = RedisStore(
        redis_server.url, key_prefix="outage", socket_timeout=0.25, journal_dir=str(tmp_path)
    )
    events: list[BudgetEvent] = []
    guard = _guard(fake, store, events)
    try:
        assert _served(guard, "sync") == pytest.approx(CALL_USD)
        assert _outages(events) == []  # Redis answers: nothing to tell
        redis_server.kill()
        for twin in ("sync", "async", "sync", "async"):  # every call let through
            assert _served(guard, twin) == pytest.approx(CALL_USD)
        assert _outages(events) == [LOCALLY]  # once for the outage, not per call
        redis_server.start()  # from its append-only file
        deadline = time.monotonic() + 10
        while store.health.failures and time.monotonic() < deadline:
            _served(guard, "sync")  # counted locally until a call finds Redis back
            time.sleep(0.05)
        assert store.health.failures == 0  # Redis answered: that outage is over
        _served(guard, "async")
        assert _outages(events) == [LOCALLY]
        redis_server.kill()  # a new outage, told again (an async call first this time)
        for twin in ("async", "sync", "async"):
            assert _served(guard, twin) == pytest.approx(CALL_USD)
        assert _outages(events) == [LOCALLY, LOCALLY]
        assert fake.stats.requests >= 10
    finally:
        guard.close()


def test_a_retry_counted_locally_tells_on_event(
    redis_server: RedisServer, fake: FakeProvider, tmp_path: Path
) -> None:
    """Redis went away during a call's first attempt: the top-up before its retry was the
    first decision of the outage counted in memory, and told nothing."""
    store = RedisStore(
        redis_server.url, key_prefix="outage", socket_timeout=0.25, journal_dir=str(tmp_path)
    )
    events: list[BudgetEvent] = []
    guard = _guard(
        fake,
        store,
        events,
        retry=RetryPolicy(attempts=2, base=0.01, cap=0.05),
        attempt_timeout=2.0,
        timeout=20,
    )
    fake.script(Fault(latency=4.0), None)  # the first attempt times out after it went out

    def kill_redis_once_sent() -> None:
        if wait_until(lambda: fake.stats.requests == 1):
            redis_server.kill()

    killer = threading.Thread(target=kill_redis_once_sent)
    killer.start()
    try:
        answer = guard.chat(USER, max_tokens=3)
        killer.join()
        assert fake.stats.requests == 2  # the retry went out, topped up in memory
        assert answer.cost_usd is not None
        assert _outages(events) == [LOCALLY]
    finally:
        killer.join()
        guard.close()


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_reservation_script_redis_refuses_is_told_once(
    fake: FakeProvider, redis_url: str, redis_prefix: str, tmp_path: Path, twin: str
) -> None:
    """Redis answers but refuses the reservation (a key of another kind where a counter
    is): the calls are counted per process, as during an outage, and ``on_event`` is told
    once while the refusal stays the same."""
    import redis

    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    events: list[BudgetEvent] = []
    guard = _guard(fake, store, events)
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        _served(guard, twin)
        (counter,) = client.keys(f"{redis_prefix}:budget:*:c:*")
        client.delete(counter)
        client.set(counter, "not a counter")
        for _ in range(3):
            assert _served(guard, twin) == pytest.approx(CALL_USD)
        assert store.health.failures == 0  # Redis answered: no outage
        assert _outages(events) == [LOCALLY]
    finally:
        client.close()
        guard.close()


def _share_guard(fake: FakeProvider, store: RedisStore, events: list[BudgetEvent]) -> Guard:
    """A fail-open Guard with a tenant budget of 40 calls (a process's part of what is
    left, while Redis is away: a quarter of it, some 9 calls)."""
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        store=store,
        budgets=Budgets(
            [Budget(limit_usd=40 * CALL_USD, scope="tenant")],
            prices=PRICES,
            fail_open=True,
            on_event=[events.append],
        ),
        environ={},
    )


def _spend_share(guard: Guard) -> tuple[int, BudgetExceededError | None]:
    """Calls served until this process's part is spent, and the refusal that ended them."""
    for served in range(40):
        try:
            guard.chat(USER, max_tokens=3, tenant="acme")
        except BudgetExceededError as exc:
            return served, exc
    return 40, None


def test_a_process_share_counted_locally_fires_no_alerts(
    redis_server: RedisServer, fake: FakeProvider, tmp_path: Path
) -> None:
    """While Redis is away, a fail-open process counts its part of what the budget had left
    (a quarter of it here): reaching that part is no alert of the budget's, which fired 50,
    80 and 100 % of a $0.048 limit at $0.013, $0.020 and $0.023 spent by this process."""
    store = RedisStore(
        redis_server.url, key_prefix="outage", socket_timeout=0.25, journal_dir=str(tmp_path)
    )
    events: list[BudgetEvent] = []
    guard = _share_guard(fake, store, events)
    try:
        guard.chat(USER, max_tokens=3, tenant="acme")
        redis_server.kill()
        served, refusal = _spend_share(guard)
        assert 0 < served < 40
        assert refusal is not None
        assert [event.kind for event in events if event.kind == "alert"] == []
    finally:
        guard.close()


def test_a_refusal_counted_locally_says_redis_is_away(
    redis_server: RedisServer, fake: FakeProvider, tmp_path: Path
) -> None:
    """A call refused on this process's part of what was left says so, and how much that
    part is: it said only "$0.010800 spent of $0.048000", a limit far from spent."""
    store = RedisStore(
        redis_server.url, key_prefix="outage", socket_timeout=0.25, journal_dir=str(tmp_path)
    )
    guard = _share_guard(fake, store, [])
    try:
        guard.chat(USER, max_tokens=3, tenant="acme")
        redis_server.kill()
        _, refusal = _spend_share(guard)
        assert refusal is not None
        message = str(refusal)
        assert "counted in this process's memory, Redis did not answer" in message
        assert "its part of what the budget had left is $0.0116" in message
    finally:
        guard.close()


def test_an_alert_crossed_by_replayed_spend_fires_at_the_next_settle(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Spend journaled while Redis was away, replayed, took the counter past 50 % of its
    limit: the next settle that reaches Redis tells that alert (the replay marked it fired
    and told no one: it never reached ``on_event``)."""
    spec = CounterSpec("global-alerts", 1000, "day", 3600.0, (0.5,), "global", 0)
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    backend = RedisBudgetBackend(store, name="replayed-alerts")
    try:
        backend.journal.append(record("away-1", (spec,), 600, 60.0, time.time()))
        assert backend.replay()
        hold: HoldArgs = {"base": 10, "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}
        assert backend.reserve("next", [spec], **hold).allowed
        settled = backend.settle("next", [spec], actual=10, ttl=60.0)
        assert settled.spent == (610,)
        assert settled.fired == ((0.5,),)
    finally:
        store.close()
