"""A Redis Cluster master fails over under traffic from two processes.

A 3-master cluster with one replica each (tools/redis_cluster.RedisCluster(replicas=1)); the
master that holds the budget's keys is killed (SIGKILL) while two processes make calls, and
its replica takes over after the cluster's node timeout. The SDK keeps answering every call
(budgets fail open, spend journaled while the slots have no master), and afterwards the
budget's settled spend in the cluster equals the sum of what the processes recorded.
Every wait is bounded.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_cluster import RedisCluster

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.budget.control import SpendControl
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisClusterStore
from llmguard_sdk.testing import FakeProvider

from .conftest import RawRedis
from .test_redis_faults import LIMIT_USD, PRICES, USER, _results

pytestmark = pytest.mark.cluster

PREFIX = "failover"


def _store(url: str, journal: str) -> RedisClusterStore:
    return RedisClusterStore(
        url, key_prefix=PREFIX, socket_timeout=0.25, journal_dir=journal, retry_pause=0.2
    )


def _worker(base_url: str, url: str, journal: str, calls: int, out: Any, started: Any) -> None:
    """One process of traffic: ``calls`` calls, half of them uncached; reports what it
    answered and spent after replaying its journal (bounded: 20 s)."""
    guard = Guard(
        OpenAICompatibleProvider(base_url, model="fake-model", name="primary"),
        store=_store(url, journal),
        rate_limits={"primary": RateLimit(rpm=100_000, tpm=100_000_000)},
        budgets=Budgets([Budget(LIMIT_USD)], prices=PRICES, fail_open=True),
        cache=True,
        retry=None,
        environ={},
    )
    answered = spent = 0.0
    errors: list[str] = []
    for index in range(calls):
        try:
            answer = guard.chat(USER, max_tokens=8, cacheable=index % 2 == 0)
            answered += 1
            spent += answer.cost_usd or 0.0
        except Exception as exc:
            errors.append(type(exc).__name__)
        if index == 5:
            started.put(True)
        time.sleep(0.02)
    spend = guard._stages.spend
    assert spend is not None
    backend = spend.backend
    assert isinstance(backend, RedisBudgetBackend)
    deadline = time.monotonic() + 20
    while not backend.replay() and time.monotonic() < deadline:
        time.sleep(0.1)
    out.put(
        {
            "answered": answered,
            "spent": spent,
            "errors": errors,
            "left": backend.journal.pending,
            "journaled": backend.journal.appended,
        }
    )
    guard.close()


def _budget_master(cluster: RedisCluster) -> int:
    """The index of the master that holds the budget's keys (bounded: 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for index, port in enumerate(cluster.ports):
            client: RawRedis = redis.Redis(port=port, socket_timeout=2)
            try:
                if client.execute_command("ROLE")[0] not in (b"master", "master"):
                    continue
                if any(client.scan_iter(match=f"{PREFIX}:budget:*", count=1000)):
                    return index
            finally:
                client.close()
        time.sleep(0.05)
    raise AssertionError("no master holds the budget's keys")


def _spent(url: str) -> float:
    """The budget's settled spend in the cluster (the workers replayed their journals)."""
    store = RedisClusterStore(url, key_prefix=PREFIX)
    try:
        (row,) = SpendControl(Budgets([Budget(LIMIT_USD)], prices=PRICES), (), store).status()
        return float(row["spent_usd"])
    finally:
        store.close()


def test_a_master_failing_over_loses_no_spend(fake: FakeProvider, tmp_path: Path) -> None:
    with RedisCluster(replicas=1, node_timeout_ms=1000) as cluster:
        context = multiprocessing.get_context("spawn")
        out, started = context.Queue(), context.Queue()
        workers = [
            context.Process(
                target=_worker, args=(fake.base_url, cluster.url, str(tmp_path), 200, out, started)
            )
            for _ in range(2)
        ]
        for worker in workers:
            worker.start()
        for _ in workers:
            started.get(timeout=60)
        master = _budget_master(cluster)
        cluster.kill(master)
        promoted = cluster.wait_failover(master)
        assert promoted != master
        results = _results([out, *workers], 2)
        assert sum(r["journaled"] for r in results) > 0  # the traffic met the outage
        assert sum(r["answered"] for r in results) == 400  # every call answered
        assert all(r["left"] == 0 for r in results)  # every journal replayed
        recorded = sum(r["spent"] for r in results)
        assert recorded > 0
        assert _spent(cluster.url) == pytest.approx(recorded, rel=1e-9)
