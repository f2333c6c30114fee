"""A live, healthy process adopts the spend journal a crashed process left (its owner dead:
its lock gone with it) in bounded time, by a background sweep: it used to adopt dead files
only as it started or after a Redis failure of its own, so a fleet that stayed healthy kept
a crashed worker's spend off Redis for good."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from redis_cluster import RedisServer

from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget import journal as journal_module
from llmguard_sdk.budget.policy import CounterSpec
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.store import RedisStore

pytestmark = pytest.mark.redis

SPEC = CounterSpec("global-sweep", 10**12, "day", 3600.0, (), "global", 0)
HOLD = {"base": 1, "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}

_CRASHING = """
import os, sys, time
from llmguard_sdk.budget.journal import SpendJournal, record
from llmguard_sdk.budget.policy import CounterSpec
spec = CounterSpec("global-sweep", 10**12, "day", 3600.0, (), "global", 0)
journal = SpendJournal(sys.argv[1], sys.argv[2])
journal.append(record("dead-1", (spec,), 3000, 60.0, time.time()))
journal.append(record("dead-2", (spec,), 4000, 60.0, time.time()))
print(journal.path, flush=True)
os._exit(1)  # a crash: no close, the file stays; the kernel drops its lock
"""


def _crash_with_records(directory: Path, name: str) -> Path:
    """A real process that journals two settles (7000 nano-dollars) and dies."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING, str(directory), name],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    path = Path(done.stdout.strip())
    assert path.exists()
    return path


def test_a_healthy_process_adopts_a_crashed_processes_journal_in_bounded_time(
    redis_url: str, redis_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "_SWEEP_EVERY_S", 0.05, raising=False)
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    try:
        backend = RedisBudgetBackend(store, name="sweep")
        assert backend.reserve("own-1", [SPEC], **HOLD).allowed  # type: ignore[arg-type]
        backend.settle("own-1", [SPEC], actual=500, ttl=600)  # healthy: straight to Redis
        dead = _crash_with_records(tmp_path, backend.journal.name)
        deadline = time.monotonic() + 10  # (the sweep runs every 0.05 s here)
        while (dead.exists() or backend.journal.pending) and time.monotonic() < deadline:
            time.sleep(0.02)  # (the file gone: adopted; nothing pending: replayed)
        assert not dead.exists()  # adopted by the live process, which never failed
        assert backend.journal.pending == 0
        assert backend.reserve("own-2", [SPEC], **HOLD).allowed  # type: ignore[arg-type]
        backend.settle("own-2", [SPEC], actual=500, ttl=600)
        assert backend.status([SPEC])[0][0] == 500 + 7000 + 500  # each record once
    finally:
        store.close()


def test_the_sweep_replays_what_it_adopted_without_a_call(
    redis_url: str, redis_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle process (an admin process, a draining worker) that adopts a crashed worker's
    journal sends its spend to Redis from the sweep thread: it used to wait for the live
    process's next budgeted call, which may never come."""
    monkeypatch.setattr(journal_module, "_SWEEP_EVERY_S", 0.05, raising=False)
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    try:
        backend = RedisBudgetBackend(store, name="sweep-idle")
        assert backend.reserve("own-1", [SPEC], **HOLD).allowed  # type: ignore[arg-type]
        backend.settle("own-1", [SPEC], actual=500, ttl=600)
        dead = _crash_with_records(tmp_path, backend.journal.name)
        deadline = time.monotonic() + 10  # (the sweep runs every 0.05 s here)
        spent = backend.status([SPEC])[0][0]  # a read: it replays nothing
        while (dead.exists() or spent != 500 + 7000) and time.monotonic() < deadline:
            time.sleep(0.02)
            spent = backend.status([SPEC])[0][0]
        assert not dead.exists()
        assert spent == 500 + 7000  # no budgeted call since the crash
        assert backend.journal.pending == 0
    finally:
        store.close()


def test_no_sweep_runs_on_a_calls_path(
    redis_url: str, redis_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call does not look for dead files (the directory is not listed per call): only
    the first replay after a start or a failure, and the background sweep, do."""
    listed: list[Path] = []
    calling = threading.current_thread()
    real_glob = Path.glob

    def glob(self: Path, pattern: str) -> object:
        if threading.current_thread() is calling:  # (the background sweep may list it)
            listed.append(self)
        return real_glob(self, pattern)

    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    try:
        backend = RedisBudgetBackend(store, name="sweep-calls")
        assert backend.reserve("warm", [SPEC], **HOLD).allowed  # type: ignore[arg-type]
        monkeypatch.setattr(Path, "glob", glob)
        for n in range(20):
            assert backend.reserve(f"call-{n}", [SPEC], **HOLD).allowed  # type: ignore[arg-type]
        assert tmp_path not in listed
    finally:
        store.close()


def test_a_sweep_racing_close_leaves_the_journal_closed_and_the_orphan_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() lands between the sweep's check of the closed flag and its adoption: the
    adoption's append used to reopen the closed journal (its file and lock held again, the
    orphan's records moved into a journal nobody replays); it fails now, and the orphan
    stays for another process."""
    live = journal_module.SpendJournal(tmp_path, "race")
    dead = _crash_with_records(tmp_path, "race")
    adopt = journal_module.SpendJournal.adopt_orphans

    def closed_first(journal: journal_module.SpendJournal, limit: int | None = None) -> int:
        live.close()  # (the sweep has read the flag: not closed)
        return adopt(journal, limit)

    monkeypatch.setattr(journal_module.SpendJournal, "adopt_orphans", closed_first)
    assert live.sweep() == 0
    assert live._closed  # not reopened: no file (nor lock) held again
    assert live._file is None
    assert not live.path.exists()
    assert dead.exists()
    assert len(journal_module._read(dead)) == 2  # nothing lost
    monkeypatch.undo()
    heir = journal_module.SpendJournal(tmp_path, "race")
    try:
        assert heir.adopt_orphans() == 2  # another process's sweep adopts it whole
    finally:
        heir.close()


def test_the_sweep_interval_is_the_stores_journal_sweep_every_s(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A fleet sets how often its processes sweep (``RedisStore(journal_sweep_every_s=)``):
    it was fixed at 30 s. Here the default is an hour (conftest), the store's 0.05 s."""
    assert journal_module._SWEEP_EVERY_S == 3600.0
    store = RedisStore(
        redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path), journal_sweep_every_s=0.05
    )
    try:
        backend = RedisBudgetBackend(store, name="sweep-knob")
        assert backend.journal.sweep_every_s == 0.05
        dead = _crash_with_records(tmp_path, backend.journal.name)
        deadline = time.monotonic() + 10  # (the sweep runs every 0.05 s here)
        while (dead.exists() or backend.journal.pending) and time.monotonic() < deadline:
            time.sleep(0.02)  # (the file gone is adopted, not yet replayed: wait for both)
        assert not dead.exists()  # adopted by the store's interval, not the hour's
        assert backend.journal.pending == 0
        assert backend.status([SPEC])[0][0] == 7000
        slow = RedisBudgetBackend(store, name="sweep-knob-slow", journal_sweep_every_s=7200)
        assert slow.journal.sweep_every_s == 7200.0  # (the backend's own, over the store's)
    finally:
        store.close()


def test_the_default_sweep_interval_is_read_at_each_turn(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    try:
        assert store.journal_sweep_every_s is None
        backend = RedisBudgetBackend(store, name="sweep-default")
        assert backend.journal.sweep_every_s is None
        journal = backend.journal
        assert journal.sweep_due() == journal.swept_at + journal_module._SWEEP_EVERY_S
    finally:
        store.close()


@pytest.mark.parametrize("every", [0, -1.0, float("nan"), float("inf"), True, "30", [30]])
def test_a_bad_sweep_interval_is_a_configuration_error(
    redis_url: str, redis_prefix: str, every: object
) -> None:
    """A positive finite number of seconds, or None: anything else is refused where it is
    given, before any Redis round trip."""
    with pytest.raises(ConfigurationError, match="journal_sweep_every_s"):
        RedisStore(redis_url, key_prefix=redis_prefix, journal_sweep_every_s=every)  # type: ignore[arg-type]
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    try:
        with pytest.raises(ConfigurationError, match="journal_sweep_every_s"):
            RedisBudgetBackend(store, name="sweep-bad", journal_sweep_every_s=every)  # type: ignore[arg-type]
    finally:
        store.close()


def _a_script_waits(admin: Any) -> bool:
    """Whether a client's script waits in Redis (held back by ``CLIENT PAUSE``)."""
    return any(c["cmd"] == "evalsha" and "b" in c["flags"] for c in admin.client_list())


def test_a_store_closed_under_a_replay_is_a_redis_failure_and_loses_no_spend(
    redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``store.close()`` disconnects the connections in use too: a replay (the sweep
    thread's) waiting for its answer read a closed socket file, and redis-py's ``ValueError``
    ("I/O operation on closed file") escaped as no Redis error (the sweep logged a crash).
    It is a connection failure now; the records stay in the journal for the next replay."""
    import redis

    store = RedisStore(redis_server.url, key_prefix="closed-under", journal_dir=str(tmp_path))
    admin = redis.Redis.from_url(redis_server.url)
    try:
        backend = RedisBudgetBackend(store, name="closed-under")
        assert backend.status([SPEC])[0][0] == 0  # (a connection in the pool)
        _crash_with_records(tmp_path, backend.journal.name)
        assert backend.journal.adopt_orphans() == 2
        admin.client_pause(10_000, all=False)  # writes (the settle scripts) wait
        replayed: list[object] = []

        def replay() -> None:
            try:
                replayed.append(backend.replay())
            except Exception as exc:
                replayed.append(exc)

        thread = threading.Thread(target=replay)
        thread.start()
        while not _a_script_waits(admin):
            time.sleep(0.01)
        store.close()
        admin.client_unpause()
        thread.join()
        assert replayed == [False]  # a Redis failure, no ValueError
        assert backend.journal.pending == 2  # nothing lost
        assert backend.replay()
        assert backend.status([SPEC])[0][0] == 7000  # each record once
    finally:
        admin.client_unpause()
        admin.close()
        store.close()
