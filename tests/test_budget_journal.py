"""The spend journal's replay after an outage: its cost per replayed chunk does not grow with
the journal, and what a crash leaves behind is exactly what was not replayed."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from llmguard_sdk.budget.journal import SpendJournal, record
from llmguard_sdk.budget.policy import CounterSpec

SPEC = CounterSpec("global-x", 10**12, "day", 3600.0, (), "global", 0)
IO_COUNTERS = Path("/proc/self/io")


def _filled(directory: Path, count: int) -> SpendJournal:
    """A journal holding ``count`` records (written in one go: an outage's worth)."""
    journal = SpendJournal(directory, "set")
    now = time.time()
    journal._append_lines(  # one synced write, not one per record
        [
            f'{{"rid":"rid-{n}","actual":10,"ttl":60.0,"at":{now},"specs":[]}}\n'
            for n in range(count)
        ]
    )
    return journal


def _bytes_moved() -> int:
    """Bytes this process has read and written through system calls so far."""
    fields = dict(line.split(": ") for line in IO_COUNTERS.read_text().splitlines())
    return int(fields["rchar"]) + int(fields["wchar"])


def _replay_in_chunks(journal: SpendJournal, chunk: int) -> list[str]:
    replayed: list[str] = []
    while journal.pending:
        entries = journal.own_records(chunk)
        replayed += [entry["rid"] for entry in entries]
        journal.own_replayed(len(entries))
    return replayed


@pytest.mark.skipif(not IO_COUNTERS.exists(), reason="needs Linux's per-process I/O counters")
def test_replaying_a_long_journal_moves_it_about_once_in_all(tmp_path: Path) -> None:
    """Each call after an outage replays 32 records; the file was read twice and rewritten
    whole for every 32 (an hour's outage at 100 calls/s journals about 70 MB: 70 MB read
    per call, for 11,000 calls)."""
    journal = _filled(tmp_path, 4000)
    size = journal.path.stat().st_size
    before = _bytes_moved()
    replayed = _replay_in_chunks(journal, 32)
    moved = _bytes_moved() - before
    assert replayed == [f"rid-{n}" for n in range(4000)]  # each once, in order
    assert moved < 4 * size, (moved, size)  # it moved about 190 times the file
    journal.close()
    assert not journal.path.exists()


def test_a_crash_mid_replay_leaves_only_what_was_not_replayed(tmp_path: Path) -> None:
    journal = _filled(tmp_path, 300)
    assert [entry["rid"] for entry in journal.own_records(100)][-1] == "rid-99"
    journal.own_replayed(100)
    journal.own_records(50)
    journal.own_replayed(20)  # of 50 read, 20 reached Redis before the next call
    journal.append(record("late", (SPEC,), 5, 60.0, time.time()))
    journal._file.close()  # type: ignore[union-attr]  # the process died: its lock went with it
    with SpendJournal(tmp_path, "set").orphans() as found:
        ((path, entries),) = found
    assert path == journal.path
    assert [entry["rid"] for entry in entries] == [f"rid-{n}" for n in range(120, 300)] + ["late"]


def test_a_mostly_replayed_journal_is_copied_down_to_what_is_left(tmp_path: Path) -> None:
    journal = _filled(tmp_path, 4000)
    size = journal.path.stat().st_size
    for _ in range(100):  # 3,200 of the 4,000 records
        journal.own_replayed(len(journal.own_records(32)))
    assert journal.path.stat().st_size < size / 2  # the replayed part is gone from disk
    assert journal.pending == 800
    assert _replay_in_chunks(journal, 500) == [f"rid-{n}" for n in range(3200, 4000)]
    with SpendJournal(tmp_path, "set").orphans() as found:
        assert found == []  # the copy is locked too: still this live process's file
    journal.close()


class HeldFsync:
    """``os.fsync`` whose first call waits (at most 10 s) until :meth:`release` before it
    syncs; counts the calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.released_in_time: bool | None = None
        self._fsync = os.fsync

    def __call__(self, descriptor: int) -> None:
        self.calls += 1
        if not self.entered.is_set():
            self.entered.set()
            self.released_in_time = self.gate.wait(10)
        self._fsync(descriptor)

    def release(self) -> None:
        self.gate.set()


def test_appends_made_while_an_fsync_runs_share_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads append while a fifth's fsync runs: they wrote their records and wait for
    one fsync together, and none returns before it (each took the lock and synced in turn:
    five fsyncs, the disk's latency paid five times over)."""
    journal = SpendJournal(tmp_path, "set")

    def append(n: int) -> None:
        journal.append(record(f"rid-{n}", (SPEC,), 10, 60.0, time.time()))

    append(0)  # (the file made)
    fsync = HeldFsync()
    monkeypatch.setattr(os, "fsync", fsync)
    first = threading.Thread(target=append, args=(1,))
    first.start()
    assert fsync.entered.wait(10)
    others = [threading.Thread(target=append, args=(n,)) for n in range(2, 6)]
    for thread in others:
        thread.start()
    waited = time.monotonic() + 10
    while journal.path.read_text().count('"rid"') < 6 and time.monotonic() < waited:
        time.sleep(0.01)
    written = journal.path.read_text().count('"rid"')
    returned = [not thread.is_alive() for thread in others]
    fsync.release()
    for thread in (first, *others):
        thread.join(10)
    assert written == 6  # all written while the first fsync was held
    assert returned == [False] * 4  # none returned before an fsync covered it
    assert fsync.calls == 2  # the first one's, and one for the four
    assert fsync.released_in_time
    assert sorted(entry["rid"] for entry in journal.own_records()) == [f"rid-{n}" for n in range(6)]
    journal.close()


def test_an_async_settle_journals_without_blocking_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While Redis is down, an async settle's journal append (its fsync waits for the disk)
    ran on the event loop: every other task waited for the disk. The loop now goes on: here
    it is the loop that lets the held fsync finish."""
    from llmguard_sdk.budget import RedisBudgetBackend
    from llmguard_sdk.store import RedisStore

    with socket.socket() as probe:  # a port where no Redis listens: Redis is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}", key_prefix="journal-async")
    backend = RedisBudgetBackend(store, name="j", fail_open=True, journal_dir=str(tmp_path))
    hold: dict[str, Any] = {"base": 1000, "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}
    fsync = HeldFsync()

    async def main() -> None:
        assert (await backend.areserve("r1", [SPEC], **hold)).allowed  # counted locally
        monkeypatch.setattr(os, "fsync", fsync)
        settling = asyncio.ensure_future(backend.asettle("r1", [SPEC], actual=500, ttl=60.0))
        await anyio.to_thread.run_sync(fsync.entered.wait, 10)  # (the loop free meanwhile)
        fsync.release()  # (from the loop: it runs while the fsync waits)
        await settling

    asyncio.run(main())
    assert fsync.released_in_time
    assert [entry["rid"] for entry in backend.journal.own_records()] == ["r1"]
    backend.journal.close()
    store.close()
