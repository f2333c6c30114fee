"""Budget state that does not grow with calls or time: settled reservation ids are not kept
(memory) or expire (Redis), holds and idle per-tenant counters expire through
deadline-ordered structures and per-window tables (memory) or key TTLs (Redis)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk.budget import MemoryBudgetBackend, RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, CounterState, add_hold, bring_to_now, nano
from tests.conftest import RawRedis, redis_store

DAY = 86400.0


def spec(key: str, window: Any = "day", limit_usd: float = 100.0) -> CounterSpec:
    return CounterSpec(key, nano(limit_usd), window, 3600.0, (), f"tenant:{key}", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # a fixed UTC instant, mid-day

    def __call__(self) -> float:
        return self.now


def reserve(backend: Any, rid: str, specs: list[CounterSpec], usd: float, ttl: float = 60) -> Any:
    return backend.reserve(rid, specs, base=nano(usd), per_token=0.0, want=0, minimum=0, ttl=ttl)


@pytest.mark.slow
@pytest.mark.timeout(600)  # 100,000 calls under tracemalloc: ~120 s on a busy 2-core machine
def test_settled_ids_are_forgotten_and_a_repeated_settle_stays_a_no_op() -> None:
    """100,000 calls from 100,000 tenants: no reservation id is kept once settled, each
    tenant's day counter is kept as its spend alone, and a settle repeated (or of an id
    never reserved here) changes nothing."""
    clock = Clock()
    backend = MemoryBudgetBackend(clock=clock)
    shared = spec("global", limit_usd=1e6)
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    for i in range(100_000):
        counters = [shared, spec(f"tenant-{i}")]
        assert reserve(backend, f"r{i}", counters, 0.002).allowed
        assert backend.settle(f"r{i}", counters, actual=nano(0.001), ttl=DAY).applied
        clock.now += 0.1
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert backend.open_reservations() == 0  # no settled id is remembered
    assert backend.counters() == 100_001  # a day counter per tenant, for its day
    # a 64-bit key digest and a spend per tenant, in a table at most 2/3 full (was ~750 B
    # a call, then ~160 B a tenant with the key string, a dict slot and an int)
    assert grown < 100_000 * 64
    for rid, tenant in (("r0", 0), ("r50000", 50000), ("r99999", 99999), ("never", 7)):
        counters = [shared, spec(f"tenant-{tenant}")]
        before_status = backend.status(counters)
        assert not backend.settle(rid, counters, actual=nano(0.5), ttl=DAY).applied
        assert backend.status(counters) == before_status
    (status,) = backend.status([spec("tenant-7")])
    assert status[:2] == (nano(0.001), 0)
    clock.now += DAY  # a new day: yesterday's counters are dropped, whole
    assert backend.counters() == 0
    assert backend.status([spec("tenant-7")])[0][:2] == (0, 0)


def test_an_unsettled_reservation_is_settleable_for_a_day_past_its_hold() -> None:
    clock = Clock()
    backend = MemoryBudgetBackend(clock=clock)
    counter = [spec("acme", window="month")]
    for rid in ("late", "lost"):
        assert reserve(backend, rid, counter, 0.5, ttl=60).allowed
    assert backend.open_reservations() == 2
    clock.now += 3600  # both holds expired: their calls ran past their deadline
    assert backend.status(counter)[0][:2] == (0, 0)
    assert backend.settle("late", counter, actual=nano(0.2), ttl=DAY).applied  # counted
    assert not backend.settle("late", counter, actual=nano(0.2), ttl=DAY).applied  # once
    clock.now += DAY  # a day past its hold: "lost" is forgotten, its settle changes nothing
    assert backend.open_reservations() == 0
    assert not backend.settle("lost", counter, actual=nano(0.2), ttl=DAY).applied
    assert backend.status(counter)[0][:2] == (nano(0.2), 0)


def test_alerts_fired_are_kept_with_a_quiet_counter_until_its_window_ends() -> None:
    clock = Clock()
    backend = MemoryBudgetBackend(clock=clock)
    counter = [CounterSpec("acme", nano(1.0), "hour", 3600.0, (0.5,), "tenant:acme", 0)]
    fired = []
    for i, usd in enumerate([0.3, 0.3, 0.3]):
        reserve(backend, f"r{i}", counter, usd)
        fired.append(backend.settle(f"r{i}", counter, actual=nano(usd), ttl=60).fired[0])
    assert fired == [(), (0.5,), ()]  # once, though the counter was parked between calls
    assert not backend._states  # parked: its spend and the alerts it fired only
    (table,) = backend._quiet.values()
    assert len(table) == 1
    assert table.get("acme") == (nano(0.9), frozenset({0.5}))
    clock.now += 3600
    reserve(backend, "next-hour", counter, 0.6)
    assert backend.settle("next-hour", counter, actual=nano(0.6), ttl=60).fired == ((0.5,),)


def test_idle_tenant_counters_are_dropped_and_live_ones_kept() -> None:
    clock = Clock()
    backend = MemoryBudgetBackend(clock=clock)
    for i in range(500):  # 500 tenants, each calling once
        tenant = [spec(f"tenant-{i}", window="hour")]
        reserve(backend, f"r{i}", tenant, 0.01)
        backend.settle(f"r{i}", tenant, actual=nano(0.01), ttl=60)
    busy = [spec("busy", window="hour")]
    assert reserve(backend, "long-call", busy, 0.5, ttl=3 * 3600).allowed
    assert backend.counters() == 501
    clock.now += 2 * 3600  # every hour window has ended; the busy tenant's hold lives on
    assert backend.counters() == 1
    (status,) = backend.status(busy)
    assert status[1] == nano(0.5)
    clock.now += 3600 + 1  # its hold expired too
    assert backend.counters() == 0
    (status,) = backend.status([spec("tenant-7", window="hour")])
    assert status[:2] == (0, 0)  # a dropped counter reads as a fresh one


def test_holds_expire_oldest_first_and_settled_ones_do_not_pile_up() -> None:
    state = CounterState()
    counter = spec("c")
    now = 1_000.0
    for i in range(10_000):  # many calls, each settled (released) at once
        add_hold(state, f"r{i}", 5, now + 60)
        state.holds.pop(f"r{i}")
        state.reserved -= 5
    assert len(state.expiries) <= 16 + 2  # rebuilt from the live holds, not one per call
    add_hold(state, "early", 7, now + 10)
    add_hold(state, "late", 11, now + 100)
    bring_to_now(state, counter, now + 50)
    assert set(state.holds) == {"late"}
    assert state.reserved == 11


def test_a_settled_tenant_counter_keeps_no_holds_heap_or_alert_set() -> None:
    """A process keeps a counter per tenant for its whole window: once its calls settled,
    it keeps its window and spend, not the containers of its busiest moment."""
    clock = Clock()
    backend = MemoryBudgetBackend(clock=clock)
    tenants = [[spec(f"tenant-{i}")] for i in range(3)]
    for i, counter in enumerate(tenants):
        for call in range(20):
            reserve(backend, f"r{i}-{call}", counter, 0.01)
        for call in range(20):
            backend.settle(f"r{i}-{call}", counter, actual=nano(0.01), ttl=60)
    assert not backend._states  # nothing held: no whole state is kept
    (table,) = backend._quiet.values()  # one table for the day: key -> spend
    assert all(table.get(counter[0].key) == (nano(0.2), None) for counter in tenants)
    (status,) = backend.status(tenants[0])
    assert status[:2] == (nano(0.2), 0)
    reserve(backend, "again", tenants[0], 0.01)  # a new call: the whole state again
    state = backend._states[tenants[0][0].key]
    assert isinstance(state, CounterState)
    assert table.get(tenants[0][0].key) is None
    assert state.spent == nano(0.2)
    assert state.reserved == nano(0.01)
    assert not hasattr(state, "__dict__")  # slots
    assert state.fired is CounterState().fired  # no alert fired: one shared empty set


def test_redis_counters_and_settled_markers_carry_ttls(redis_url: str, redis_prefix: str) -> None:
    import redis

    store = redis_store(redis_url, redis_prefix)
    backend = RedisBudgetBackend(store, name="expiry")
    counter = [spec("acme", window="hour")]
    assert reserve(backend, "r1", counter, 0.01).allowed
    assert backend.settle("r1", counter, actual=nano(0.01), ttl=120).applied
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{redis_prefix}:*"))
        assert keys
        ttls = {key.decode(): client.ttl(key) for key in keys}
        assert all(0 < ttl <= 3 * 3600 + 3600 + 120 for ttl in ttls.values()), ttls
        marker = [k for k in ttls if k.endswith(":r1")]
        assert marker
        assert ttls[marker[0]] <= 120 + 3600
    finally:
        client.close()
        store.close()


@pytest.mark.slow
def test_the_settle_bench_shows_a_flat_cost_beside_the_scan() -> None:
    bench = Path(__file__).resolve().parents[1] / "bench" / "budget_settle.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout)
    assert set(result["heap"]["us_per_call"]) == {"1000", "3000", "8000"}
    assert result["scan"]["memory_kib"] > 0
    assert result["heap"]["memory_kib"] > 0


def test_redis_counters_read_or_refused_on_carry_ttls(redis_url: str, redis_prefix: str) -> None:
    """A counter that a status read or a refused reservation brings into its window (a new
    tenant refused by the global budget, a tenant looked up) expires like any other."""
    import redis

    store = redis_store(redis_url, redis_prefix)
    backend = RedisBudgetBackend(store, name="expiry")
    full = spec("global", window="hour", limit_usd=0.01)
    assert not reserve(backend, "r1", [full, spec("new-tenant", window="day")], 0.02).allowed
    backend.status([spec("looked-up", window="month")])
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{redis_prefix}:*:c:*"))
        names = {key.decode().rpartition(":c:")[2] for key in keys}
        assert {"new-tenant", "looked-up"} <= names
        ttls = {key.decode(): client.ttl(key) for key in keys}
        assert all(ttl > 0 for ttl in ttls.values()), ttls  # -1: kept forever
    finally:
        client.close()
        store.close()


def test_redis_a_hold_beyond_any_ttl_is_granted_and_expires(
    redis_url: str, redis_prefix: str
) -> None:
    """A call whose deadline is "never" in practice (``timeout=sys.maxsize``): its hold is
    granted and its counter keys get a TTL (EXPIRE refused the overflowing one, failing the
    script half-way: Redis taken for down, a hold left in a key kept forever)."""
    import redis

    store = redis_store(redis_url, redis_prefix)
    backend = RedisBudgetBackend(store, name="expiry")
    counter = [spec("acme", window="hour")]
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        assert reserve(backend, "r1", counter, 0.01, ttl=float(sys.maxsize)).allowed
        assert store.health.up()
        keys = list(client.scan_iter(match=f"{redis_prefix}:*:c:*"))
        assert keys
        assert all(client.ttl(key) > 0 for key in keys)
        assert backend.settle("r1", counter, actual=nano(0.01), ttl=120).applied
    finally:
        client.close()
        store.close()
