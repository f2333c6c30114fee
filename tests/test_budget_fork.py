"""A budget set built before the process forks (a server that loads its app, then forks its
workers: ``gunicorn --preload``, Celery's prefork pool): each worker counts as a process of
its own in the fleet, and journals its spend in a file of its own."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_cluster import RedisServer

from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.store import RedisStore

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
]
SPEC = CounterSpec("global", nano(1.0), "day", 3600.0, (), "global", 0)


def _spend(backend: RedisBudgetBackend, rid: str) -> None:
    assert backend.reserve(rid, [SPEC], base=nano(0.001), per_token=0.0, want=0, minimum=0, ttl=60)
    backend.settle(rid, [SPEC], actual=nano(0.001), ttl=600)


def _worker(backend: RedisBudgetBackend, n: int, hold: Any, done: Any) -> None:
    _spend(backend, f"worker-{n}")
    done.put(n)
    hold.wait(30)  # a live worker keeps its journal (and its lock) while it serves


def _forked(backend: RedisBudgetBackend, workers: int) -> list[int]:
    """Fork ``workers`` workers of ``backend``'s process, each spending $0.001 once while
    the others live on; the workers that finished (all of them, unless one hung)."""
    context = multiprocessing.get_context("fork")
    hold, done = context.Event(), context.Queue()
    forked = [
        context.Process(target=_worker, args=(backend, n, hold, done)) for n in range(workers)
    ]
    finished = []
    try:
        for process in forked:
            process.start()
        for _ in forked:
            finished.append(done.get(timeout=10))
    except Exception:  # (queue.Empty: a worker hung)
        pass
    finally:
        hold.set()
        for process in forked:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
    return sorted(finished)


def _backend(server: RedisServer, journal: Path) -> RedisBudgetBackend:
    store = RedisStore(server.url, key_prefix="fork", socket_timeout=0.2, journal_dir=str(journal))
    return RedisBudgetBackend(store, fail_open=True)


def test_each_forked_worker_counts_as_a_process_of_the_fleet(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """What a worker may spend alone while Redis is away is divided among the processes
    Redis saw alive: the forked workers had the parent's id, so three counted as one (and
    each would spend the whole fleet's share)."""
    backend = _backend(redis_server, tmp_path)
    _spend(backend, "parent")
    assert _forked(backend, 3) == [0, 1, 2]
    client = redis.Redis.from_url(redis_server.url)
    (processes,) = client.scan_iter(match="fork:budget:*:p")
    assert client.zcard(processes) == 4  # the parent and its three workers
    client.close()
    backend._store.close()


def test_forked_workers_journal_apart_and_none_waits_for_another(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With Redis away, each worker journals its spend in a file of its own: they shared the
    parent's file name, and the second worker to journal waited for the first one's lock
    (held while it lives: for good)."""
    backend = _backend(redis_server, tmp_path)
    _spend(backend, "parent")
    redis_server.kill()
    assert _forked(backend, 2) == [0, 1]
    assert len(list(tmp_path.glob("*.jsonl"))) == 2
    _spend(backend, "parent-meanwhile")  # (it learns of the outage: it adopts dead files)
    redis_server.start()
    assert backend.replay()  # its own and the workers' files: nothing lost
    ((settled, held, _),) = backend.status([SPEC])
    assert (settled, held) == (nano(0.004), 0)
    backend._store.close()
