"""The spend journal: settles that could not reach Redis, kept on disk until they do.

Each process appends to a file of its own (JSON Lines, one settle per line, flushed and
fsynced before the call returns) and holds an exclusive lock on it while it lives. When Redis
answers again, the process replays its file, and the files of processes that died (nobody
holds their lock), then truncates or removes them. Every record carries its reservation id,
and the settle script marks each id once, so replaying a record twice counts it once: no
spend record is lost and none is counted twice.

Files: ``<directory>/<name>.<pid>.<random>.jsonl``; ``name`` identifies the budget set (key
prefix and set hash), so only backends of the same set replay them.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from .._json import canonical_json
from .policy import CounterSpec

try:  # POSIX: locks tell a live writer from a dead one
    import fcntl
except ImportError:  # pragma: no cover - Windows: each process replays its own file only
    fcntl = None  # type: ignore[assignment]

__all__ = ["JournalRecord", "SpendJournal", "default_journal_dir"]

JournalRecord = dict[str, Any]
"""One settle: ``rid``, ``actual`` (nano-dollars), ``ttl``, ``specs``, ``at`` (epoch s)."""


def default_journal_dir() -> Path:
    """``$XDG_CACHE_HOME/llmguard/journal`` (``~/.cache/...``), else a per-user temp dir."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if os.path.isdir(base) and os.access(base, os.W_OK):
        return Path(base) / "llmguard" / "journal"
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"llmguard-journal-{uid}"


def record(
    rid: str, specs: tuple[CounterSpec, ...], actual: int, ttl: float, at: float
) -> JournalRecord:
    """A journal record of one settle."""
    return {"rid": rid, "actual": actual, "ttl": ttl, "at": at, "specs": [asdict(s) for s in specs]}


def specs_of(entry: JournalRecord) -> tuple[CounterSpec, ...]:
    """The counters of a journal record."""
    return tuple(
        CounterSpec(**{**spec, "alerts": tuple(spec["alerts"])}) for spec in entry["specs"]
    )


class SpendJournal:
    """The append-only journal of one process for one budget set (see the module docs)."""

    def __init__(self, directory: str | os.PathLike[str] | None, name: str) -> None:
        self.directory = Path(directory) if directory is not None else default_journal_dir()
        self.name = name
        self._path = self.directory / f"{name}.{os.getpid()}.{os.urandom(4).hex()}.jsonl"
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self.pending = 0  # records of this process not yet replayed
        self.appended = 0  # records this process wrote
        self.orphans_checked = False

    @property
    def path(self) -> Path:
        """This process's journal file (created on the first record)."""
        return self._path

    def append(self, entry: JournalRecord) -> None:
        """Write one record durably (flushed and fsynced)."""
        line = canonical_json(entry) + "\n"
        with self._lock:
            if self._file is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._file = self._open_locked()
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
            self.pending += 1
            self.appended += 1

    def _open_locked(self) -> IO[str]:
        """This process's file, locked before it bears the name other processes' sweeps look
        for: an unlocked file there is a dead process's, which a sweep adopts and removes."""
        if fcntl is None or self._path.exists():  # (exists: reopened after close())
            handle: IO[str] = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            return handle
        fresh = self._path.with_name(self._path.name + ".new")  # not a journal name yet
        handle = open(fresh, "a", encoding="utf-8")  # noqa: SIM115
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        os.replace(fresh, self._path)
        return handle

    def has_work(self) -> bool:
        """Whether a replay may find anything (own records, or unchecked orphans)."""
        return self.pending > 0 or not self.orphans_checked

    def own_records(self) -> list[JournalRecord]:
        """This process's records not yet replayed."""
        with self._lock:
            if self._file is None or self.pending == 0:
                return []
            return _read(self._path)

    def own_replayed(self, count: int) -> None:
        """The first ``count`` own records reached Redis: forget them (and what came after,
        when every record did)."""
        with self._lock:
            if self._file is None:
                return
            left = _read(self._path)[count:]
            self._file.seek(0)
            self._file.truncate()
            for entry in left:
                self._file.write(canonical_json(entry) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
            self.pending = len(left)

    @contextmanager
    def orphans(self) -> Iterator[list[tuple[Path, list[JournalRecord]]]]:
        """The files of dead processes of this set, locked while the caller replays them;
        the caller deletes each file it finished (:meth:`finished`)."""
        found: list[tuple[Path, list[JournalRecord]]] = []
        handles: list[IO[str]] = []
        try:
            if fcntl is not None and self.directory.is_dir():
                for path in sorted(self.directory.glob(f"{self.name}.*.jsonl")):
                    if path == self._path:
                        continue
                    try:
                        handle: IO[str] = open(path, encoding="utf-8")  # noqa: SIM115
                    except OSError:
                        continue
                    try:
                        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:  # its writer is alive: it replays its own file
                        handle.close()
                        continue
                    handles.append(handle)
                    found.append((path, _read(path)))
            yield found
        finally:
            for handle in handles:
                handle.close()

    @staticmethod
    def finished(path: Path) -> None:
        """Remove a replayed orphan file."""
        with suppress(FileNotFoundError):
            path.unlink()

    def close(self) -> None:
        """Close this process's file; remove it when nothing is left in it."""
        with self._lock:
            if self._file is None:
                return
            self._file.close()
            self._file = None
            if self.pending == 0:
                self.finished(self._path)


def _read(path: Path) -> list[JournalRecord]:
    entries: list[JournalRecord] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return entries
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # a torn last line (a crash mid-write): it never returned
            continue
        if isinstance(entry, dict) and "rid" in entry:
            entries.append(entry)
    return entries
