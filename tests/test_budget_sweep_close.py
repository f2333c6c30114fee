"""``store.close()`` and the budgets' journal sweep: close stops the sweeps of its store (a
dead process's file stays whole for another process; the store's pool is not opened again
behind the caller's back) and waits for a sweep under way to end its round trip (it used to
disconnect under it: the replay failed, its records waited for a later one)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from redis_cluster import RedisServer

from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget import journal as journal_module
from llmguard_sdk.store import RedisStore

from .test_budget_journal_sweep import SPEC, _a_script_waits, _crash_with_records

pytestmark = pytest.mark.redis


def test_no_sweep_runs_once_its_store_is_closed(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path), journal_sweep_every_s=0.01
    )
    try:
        backend = RedisBudgetBackend(store, name="sweep-closed")
        store.close()
        dead = _crash_with_records(tmp_path, backend.journal.name)
        journal = backend.journal
        seen = {journal.swept_at}
        deadline = time.monotonic() + 10  # (a turn every 0.01 s here)
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
            seen.add(journal.swept_at)
        assert len(seen) >= 3  # two turns since the file came
        assert dead.exists()  # left whole for another process (was adopted and replayed)
        assert journal.pending == 0
    finally:
        store.close()


def test_close_waits_for_the_sweep_under_way(redis_server: RedisServer, tmp_path: Path) -> None:
    import redis

    store = RedisStore(
        redis_server.url, key_prefix="sweep-wait", journal_dir=str(tmp_path), socket_timeout=5
    )
    admin = redis.Redis.from_url(redis_server.url)
    try:
        backend = RedisBudgetBackend(store, name="sweep-wait")
        assert backend.status([SPEC])[0][0] == 0
        dead = _crash_with_records(tmp_path, backend.journal.name)
        admin.client_pause(1000, all=False)  # writes (the sweep's settle scripts) wait 1 s
        backend.journal.sweep_every_s = 0.01  # (read at each turn)
        journal_module._SWEEPER._wake.set()
        deadline = time.monotonic() + 10
        while not _a_script_waits(admin) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _a_script_waits(admin)  # its replay waits
        assert not dead.exists()  # adopted
        store.close()  # waits for the replay's answer (it disconnected under it)
        assert backend.journal.pending == 0  # (was 2: the replay failed)
        assert backend.status([SPEC])[0][0] == 7000
    finally:
        admin.client_unpause()
        admin.close()
        store.close()
