"""Fail-open overspend bounded for the fleet, not per process: while Redis is away, the
processes together spend at most ``fail_open_share`` of what each budget had left, whatever
their number; failing closed stays exact."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from redis_cluster import RedisServer

from llmguard_sdk.budget import Budgets, RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.store import RedisStore

pytestmark = pytest.mark.redis
DRILL_LIMIT_USD = 0.3


def _spec(limit_usd: float = 1.0) -> CounterSpec:
    return CounterSpec("global", nano(limit_usd), "day", 3600.0, (), "global", 0)


def _reserve(backend: RedisBudgetBackend, rid: str, usd: float, limit_usd: float = 1.0) -> bool:
    result = backend.reserve(
        rid, [_spec(limit_usd)], base=nano(usd), per_token=0.0, want=0, minimum=0, ttl=60
    )
    return result.allowed


def _process(server: RedisServer, journal: Path, share: float | None = None) -> RedisBudgetBackend:
    store = RedisStore(server.url, key_prefix="fleet", socket_timeout=0.2, journal_dir=str(journal))
    return RedisBudgetBackend(store, fail_open=True, fleet_share=share)


@pytest.mark.parametrize("processes", [3, 12])
def test_the_fleet_spends_at_most_its_share_of_what_was_left(
    redis_server: RedisServer, tmp_path: Path, processes: int
) -> None:
    fleet = [_process(redis_server, tmp_path) for _ in range(processes)]
    spent = 0.0
    for i, backend in enumerate(fleet):  # $0.60 of $1 spent, every process seen by Redis
        assert _reserve(backend, f"before-{i}", 0.6 / processes)
        backend.settle(f"before-{i}", [_spec()], actual=nano(0.6 / processes), ttl=600)
        spent += 0.6 / processes
    for backend in fleet:  # a last reservation each, so each knows how many are alive
        assert _reserve(backend, f"probe-{id(backend)}", 0.0001)
        backend.settle(f"probe-{id(backend)}", [_spec()], actual=0, ttl=600)
    redis_server.kill()
    local = 0.0
    for n, backend in enumerate(fleet):  # each spends all it may on its own
        for call in range(10_000):
            rid = f"down-{n}-{call}"
            if not _reserve(backend, rid, 0.001):
                break
            backend.settle(rid, [_spec()], actual=nano(0.001), ttl=600)
            local += 0.001
    left = 1.0 - spent
    assert local <= 0.25 * left + 1e-9  # a quarter of what was left, for all of them
    assert local >= 0.25 * left - processes * 0.001 - 1e-9  # and each got its part
    redis_server.start()
    for backend in fleet:  # nothing lost: every local settle reaches Redis
        assert backend.replay()
    ((settled, held, _),) = fleet[0].status([_spec()])
    assert settled == pytest.approx(nano(spent + local), abs=processes)
    assert held == 0
    assert settled <= nano(1.0 + 0.25 * 1.0)  # the default bound: a quarter of the limit
    for backend in fleet:
        backend._store.close()


def test_failing_closed_spends_nothing_while_redis_is_away(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    store = RedisStore(redis_server.url, key_prefix="fleet", socket_timeout=0.2)
    backend = RedisBudgetBackend(store, journal_dir=str(tmp_path))
    assert _reserve(backend, "a", 0.5)
    redis_server.kill()
    result = backend.reserve("b", [_spec()], base=1, per_token=0.0, want=0, minimum=0, ttl=60)
    assert not result.allowed
    assert result.unavailable
    store.close()


def test_a_bad_fleet_share_is_a_configuration_error(tmp_path: Path) -> None:
    from llmguard_sdk.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        Budgets(fail_open_share=1.5)
    store = RedisStore("redis://127.0.0.1:1/0", journal_dir=str(tmp_path))
    with pytest.raises(ConfigurationError):
        RedisBudgetBackend(store, fleet_share=-0.1)


def _drill_worker(url: str, journal: str, fail_open: bool, until: float, out: Any) -> None:
    """One process of the drill: reserve $0.001 and settle it, again and again, until
    ``until`` (epoch s); then replay its journal and report what it settled (and how much
    of it was counted in its memory, Redis away)."""
    store = RedisStore(
        url, key_prefix="drill", socket_timeout=0.2, journal_dir=journal, retry_pause=0.2
    )
    backend = RedisBudgetBackend(store, fail_open=fail_open)
    recorded = calls = local = 0
    while time.time() < until:
        rid = uuid.uuid4().hex
        if _reserve(backend, rid, 0.001, DRILL_LIMIT_USD):
            backend.settle(rid, [_spec(DRILL_LIMIT_USD)], actual=nano(0.001), ttl=600)
            recorded += nano(0.001)
            local += nano(0.001) if rid in backend._local else 0
        calls += 1
        time.sleep(0.003)
    deadline = time.monotonic() + 30
    while not backend.replay() and time.monotonic() < deadline:
        time.sleep(0.1)
    out.put(
        {"recorded": recorded, "local": local, "calls": calls, "pending": backend.journal.pending}
    )
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("fail_open", [True, False])
def test_a_three_process_drill_with_redis_killed_and_restarted(
    redis_server: RedisServer, tmp_path: Path, fail_open: bool
) -> None:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    until = time.time() + 12
    workers = [
        context.Process(
            target=_drill_worker, args=(redis_server.url, str(tmp_path), fail_open, until, out)
        )
        for _ in range(3)
    ]
    try:
        for worker in workers:
            worker.start()
        time.sleep(6)  # the limit (300 calls' worth) is spent by then
        redis_server.kill()
        time.sleep(3)
        redis_server.start()
        reports = [out.get(timeout=90) for _ in workers]
        for worker in workers:
            worker.join(timeout=30)
        store = RedisStore(redis_server.url, key_prefix="drill", journal_dir=str(tmp_path))
        ((settled, held, _),) = RedisBudgetBackend(store).status([_spec(DRILL_LIMIT_USD)])
        store.close()
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
    recorded = sum(report["recorded"] for report in reports)
    assert all(report["pending"] == 0 for report in reports)
    assert settled == recorded  # nothing lost, nothing counted twice
    # a reservation whose reply was lost when Redis died is held until it expires by itself
    assert held <= nano(0.001) * 10
    limit = nano(DRILL_LIMIT_USD)
    if fail_open:
        # each process counts in memory at most its part of a quarter of the room its last
        # reservation saw, so at most a quarter of the limit; the parts add up to a quarter
        # for the fleet only when every process's last reservation saw all three alive: one
        # whose first calls time out (a loaded machine) never reached Redis and counts
        # alone, as does one that saw only the processes that registered before it
        local = [report["local"] for report in reports]
        assert all(part <= limit // 4 for part in local)
        assert settled <= limit + sum(local)  # Redis itself let no more than the limit through
        assert settled <= limit + len(workers) * (limit // 4)
    else:
        assert settled <= limit  # exact
