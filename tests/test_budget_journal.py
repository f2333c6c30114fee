"""The spend journal's replay after an outage: its cost per replayed chunk does not grow with
the journal, and what a crash leaves behind is exactly what was not replayed."""

from __future__ import annotations

import time
from pathlib import Path

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
