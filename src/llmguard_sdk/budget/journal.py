"""The spend journal: settles that could not reach Redis, kept on disk until they do.

Each process appends to a file of its own (JSON Lines, one settle per line, flushed and
fsynced before the call returns) and holds an exclusive lock on it while it lives. The
fsyncs are a group commit: one caller syncs what every caller wrote so far, and the callers
that write while it runs wait for it and share the next one, so threads (and async calls,
which journal in worker threads) that settle together while Redis is down pay about one
fsync per batch instead of one each, in turn; none returns before its record is on disk. When Redis
answers again, the process first adopts the files of processes that died (nobody holds their
lock: the kernel drops a process's lock as it dies, so the lock is its lease): their records
are appended to its own file, durably, before the dead file is removed. A process that stays
healthy adopts them too: a daemon thread (one a process) sweeps the journal directory of
every Redis budget set in use every ``sweep_every_s`` seconds (the store's
``journal_sweep_every_s``; default ``_SWEEP_EVERY_S``, 30 s; at most ``_SWEEP_FILES`` dead
files a sweep) and, while records are left in its journal, has its backend replay them from
that thread, so a crashed worker's spend reaches Redis within about that time even in a
process that makes no further call; a call itself never lists the directory. A sweep that
finds its journal closed (``close()`` ran meanwhile), or its store closed (the store's
``close()`` stops its sweeps and waits for one under way), adopts nothing: a dead file stays
whole for another process. A dead file gone is adopted, not yet counted: its records are in Redis
once the journal's ``pending`` is 0 (:meth:`RedisBudgetBackend.status` reads Redis only).
Then it replays its file a few records per call (see
:class:`~llmguard_sdk.budget.redis.RedisBudgetBackend`). The file's first line, a header of
fixed width, says where the records not yet replayed start; each replayed chunk moves it
(rewritten in place and synced: the work of a chunk does not grow with the journal). Once
most of the file is replayed, what is left is copied to a new file (written under another
name, locked, then renamed over it: a crash at any instant leaves every record in one file
or the other), so the copies cost about one pass over the journal in all. Every record
carries its reservation id, and the settle script marks each id once (for an hour past the
hold), so replaying a record twice (a crash between its replay and the header's move) counts
it once: no spend record is lost and none is counted twice, unless Redis ran a settle whose
answer was lost and the record is replayed more than an hour later (then it counts twice).

Files: ``<directory>/<name>.<pid>.<random>.jsonl``; ``name`` identifies the budget set (key
prefix and set hash), so only backends of the same set replay them.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from .._forks import per_process
from .._json import canonical_json
from .._state.background import Background
from .policy import CounterSpec

try:  # POSIX: locks tell a live writer from a dead one
    import fcntl
except ImportError:  # pragma: no cover - Windows: each process replays its own file only
    fcntl = None  # type: ignore[assignment]

__all__ = ["JournalRecord", "SpendJournal", "default_journal_dir"]

JournalRecord = dict[str, Any]
"""One settle: ``rid``, ``actual`` (nano-dollars), ``ttl``, ``specs``, ``at`` (epoch s)."""

_HEADER_PREFIX = b'{"replayed":"'
_HEADER_DIGITS = 16
_HEADER_SIZE = len(_HEADER_PREFIX) + _HEADER_DIGITS + len(b'"}\n')
_COMPACT_FROM = 64 * 1024  # replayed bytes kept in the file before a copy may pay off
_SWEEP_EVERY_S = 30.0  # how often a live process adopts dead processes' files (see above)
_SWEEP_FILES = 16  # dead files one sweep adopts at most (the next sweep takes the rest)
logger = logging.getLogger("llmguard_sdk")


def _header(start: int) -> bytes:
    """The first line of a journal file: where its records not yet replayed start (a JSON
    object without ``rid``: a reader that knows no header skips it as no record)."""
    return _HEADER_PREFIX + b"%0*d" % (_HEADER_DIGITS, start) + b'"}\n'


def _start_of(head: bytes) -> int:
    """Where the records not yet replayed start, given a file's first bytes (0: the file has
    no header)."""
    digits = head[len(_HEADER_PREFIX) : len(_HEADER_PREFIX) + _HEADER_DIGITS]
    if not head.startswith(_HEADER_PREFIX) or len(head) < _HEADER_SIZE or not digits.isdigit():
        return 0
    return max(int(digits), _HEADER_SIZE)


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

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        name: str,
        *,
        sweep_every_s: float | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_journal_dir()
        self.name = name
        self.sweep_every_s = sweep_every_s  # (None: _SWEEP_EVERY_S, read at each turn)
        self.swept_at = 0.0  # when the background sweep last swept it (or began to watch it)
        self._file: IO[str] | None = None
        self._swept = False  # the background sweep adopts dead files into this journal
        self._replay: weakref.WeakMethod[Callable[[], object]] | None = None  # (see sweep)
        self._background = Background()  # (its store's, once swept: see sweep)
        self._closed = False
        per_process(self, SpendJournal._own_file)

    def _own_file(self) -> None:
        """This process's file (not created yet) and the state of its records: at the start,
        and in a forked child, which leaves its parent's file (and lock) to the parent."""
        inherited, self._file = self._file, None
        if inherited is not None:
            with suppress(OSError):  # (the parent's lock stays: it has the file open too)
                inherited.close()
        self._path = self.directory / f"{self.name}.{os.getpid()}.{os.urandom(4).hex()}.jsonl"
        self._start = _HEADER_SIZE  # where this process's records not yet replayed start
        self._read_ends: list[int] = []  # where each record own_records gave ends
        self._lock = threading.Lock()
        self._synced = threading.Condition()  # the group commit (see the module's docs)
        self._written = 0  # appends written to the file (flushed), in order
        self._durable = 0  # of them, those an fsync has covered
        self._syncing = False  # a caller's fsync is under way
        self.pending = 0  # records of this process not yet replayed
        self.appended = 0  # records this process wrote
        self.orphans_checked = False
        if self._swept:  # (a forked child: its own sweep, its parent's thread is not here)
            _SWEEPER.watch(self)

    @property
    def path(self) -> Path:
        """This process's journal file (created on the first record)."""
        return self._path

    def append(self, entry: JournalRecord) -> None:
        """Write one record durably (flushed and fsynced)."""
        self._append_lines([canonical_json(entry) + "\n"])
        self.appended += 1

    def _append_lines(self, lines: list[str], *, reopen: bool = True) -> bool:
        """Write ``lines`` durably; False (nothing written) when the journal is closed and
        not to be reopened (an adoption racing :meth:`close`)."""
        with self._lock:
            if self._closed and not reopen:
                return False
            self._closed = False
            if self._file is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._file = self._open_locked()
            self._file.writelines(lines)
            self._file.flush()
            self.pending += len(lines)
            self._written += 1
            written = self._written
        self._sync(written)
        return True

    def _sync(self, written: int) -> None:
        """Return once the first ``written`` appends are on disk: this caller fsyncs all
        that was written so far, unless another's fsync is under way, which it waits for
        (and then fsyncs what was written meanwhile, its own included, unless a caller that
        waited with it did so first)."""
        with self._synced:
            while self._durable < written and self._syncing:
                self._synced.wait()
            if self._durable >= written:
                return
            self._syncing = True
        durable = self._durable
        try:
            with self._lock:  # what is written now, on a descriptor of its own: a
                durable = self._written  # compaction may replace (and close) the file
                descriptor = os.dup(self._file.fileno()) if self._file is not None else -1
            if descriptor >= 0:  # (closed meanwhile: close() synced it)
                try:
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
        except BaseException:
            durable = self._durable  # (not synced: the next caller tries again)
            raise
        finally:
            with self._synced:
                self._durable, self._syncing = durable, False
                self._synced.notify_all()

    def _open_locked(self) -> IO[str]:
        """This process's file, locked before it bears the name other processes' sweeps look
        for: an unlocked file there is a dead process's, which a sweep adopts and removes."""
        if fcntl is None or self._path.exists():  # (exists: reopened after close())
            handle: IO[str] = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            if handle.tell() == 0:
                handle.write(_header(_HEADER_SIZE).decode())
                handle.flush()
            self._start = _replay_start(self._path)
            return handle
        return self._renamed_into_place(b"")

    def _renamed_into_place(self, records: bytes) -> IO[str]:
        """A new file holding a header and ``records`` (synced), locked, then renamed to this
        process's journal name (replacing the file there): no sweep sees it unlocked, and a
        crash at any instant leaves the records in the old file or in the new one."""
        assert fcntl is not None
        fresh = self._path.with_name(self._path.name + ".new")  # not a journal name yet
        with open(fresh, "wb") as raw:
            raw.write(_header(_HEADER_SIZE) + records)
            raw.flush()
            os.fsync(raw.fileno())
        handle = open(fresh, "a", encoding="utf-8")  # noqa: SIM115
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        os.replace(fresh, self._path)
        self._start = _HEADER_SIZE
        return handle

    def has_work(self) -> bool:
        """Whether a replay may find anything (own records, or unchecked orphans)."""
        return self.pending > 0 or not self.orphans_checked

    def own_records(self, limit: int | None = None) -> list[JournalRecord]:
        """This process's records not yet replayed (the first ``limit`` of them: read from
        where they start, not from the file's beginning)."""
        with self._lock:
            if self._file is None or self.pending == 0:
                return []
            entries, self._read_ends = _read_from(self._path, self._start, limit)
            return entries

    def own_replayed(self, count: int) -> None:
        """The first ``count`` records the last :meth:`own_records` gave reached Redis: the
        header moves past them, and the file is replaced by one holding what is left (see
        the module docs) once that is the smaller part, or nothing is."""
        with self._lock:
            if self._file is None or count <= 0 or not self._read_ends:
                return
            self._start = self._read_ends[min(count, len(self._read_ends)) - 1]
            self._read_ends = []
            self.pending = max(0, self.pending - count)
            size = os.fstat(self._file.fileno()).st_size
            if self.pending == 0 or (self._start >= _COMPACT_FROM and self._start * 2 >= size):
                self._compact()
            else:
                _write_header(self._path, self._start)

    def _compact(self) -> None:
        """Replace the file by one holding only the records not yet replayed."""
        assert self._file is not None
        with open(self._path, "rb") as raw:
            raw.seek(self._start)
            left = raw.read()
        if left and not left.endswith(b"\n"):
            left += b"\n"
        if fcntl is None:  # no locks to keep others out: rewritten in place
            self._file.seek(0)
            self._file.truncate()
            self._file.write((_header(_HEADER_SIZE) + left).decode())
            self._file.flush()
            os.fsync(self._file.fileno())
            self._start = _HEADER_SIZE
        else:
            old, self._file = self._file, self._renamed_into_place(left)
            old.close()

    def sweep_due(self) -> float:
        """When the background sweep is to sweep this journal next (``time.monotonic()``)."""
        every = _SWEEP_EVERY_S if self.sweep_every_s is None else self.sweep_every_s
        return self.swept_at + every

    def sweep_in_background(
        self, replay: Callable[[], object] | None = None, background: Background | None = None
    ) -> None:
        """Have this process's sweep thread adopt dead processes' files into this journal
        every ``sweep_every_s`` (see the module docs), until it is closed or collected, or
        ``background`` (its store's, see :meth:`~llmguard_sdk.store.RedisStore.close`) is
        stopped; ``replay``, a bound method (held weakly), sends the journal's records to
        Redis from that thread after each sweep that leaves some in it."""
        self._swept = True
        self._replay = weakref.WeakMethod(replay) if replay is not None else None
        self._background = background or Background()
        _SWEEPER.watch(self)

    def sweep(self) -> int:
        """One background sweep: adopt up to ``_SWEEP_FILES`` dead files (0 once closed),
        then replay what the journal holds (``sweep_in_background``'s ``replay``: its
        failures are the backend's to log; what is left waits for the next call or sweep).
        Nothing once its store is closed (its ``background`` stopped): a dead file stays whole
        for another process, and the store's ``close()`` waits for a sweep under way."""
        with self._background.work() as work:
            if self._closed or work.stopped:
                return 0
            try:
                adopted = self.adopt_orphans(_SWEEP_FILES)
            except OSError as exc:  # (a full disk: the next sweep, or the next replay, retries)
                logger.warning("budgets: adopting a dead process's spend journal failed: %s", exc)
                adopted = 0
            replay = self._replay() if self._replay is not None else None
            if replay is not None and self.pending and not (self._closed or work.stopped):
                replay()
            return adopted

    def adopt_orphans(self, limit: int | None = None) -> int:
        """Append the records of dead processes' files (the first ``limit`` files found) to
        this process's file (synced) and remove those files: how many records came. Local
        file work, no Redis. A journal closed meanwhile stops it: it is not reopened, and a
        file not appended stays whole for another process."""
        adopted = 0
        with self.orphans(limit) as found:
            for path, entries in found:
                lines = [canonical_json(entry) + "\n" for entry in entries]
                if lines and not self._append_lines(lines, reopen=False):
                    break  # (closed: the file stays, for another process to adopt)
                adopted += len(entries)
                self.finished(path)
        self.orphans_checked = True
        return adopted

    @contextmanager
    def orphans(self, limit: int | None = None) -> Iterator[list[tuple[Path, list[JournalRecord]]]]:
        """The files of dead processes of this set (the first ``limit`` found), locked while
        the caller replays them; the caller deletes each file it finished (:meth:`finished`).
        A file removed by the time its lock is taken (adopted by another sweep, or replaced
        by its live writer's copy) is no orphan."""
        found: list[tuple[Path, list[JournalRecord]]] = []
        handles: list[IO[str]] = []
        try:
            if fcntl is not None and self.directory.is_dir():
                for path in sorted(self.directory.glob(f"{self.name}.*.jsonl")):
                    if path == self._path:
                        continue
                    if limit is not None and len(found) >= limit:
                        break
                    try:
                        handle: IO[str] = open(path, encoding="utf-8")  # noqa: SIM115
                    except OSError:
                        continue
                    try:
                        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:  # its writer is alive: it replays its own file
                        handle.close()
                        continue
                    if os.fstat(handle.fileno()).st_nlink == 0:  # gone meanwhile
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
            self._closed = True
            if self._file is None:
                return
            if self.pending:  # appended records a group commit may not have synced yet
                os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            if self.pending == 0:
                self.finished(self._path)


class _Sweeper:
    """The process's one thread that adopts dead processes' journal files into the live
    journals it watches, each every ``sweep_every_s`` of its own (the default,
    ``_SWEEP_EVERY_S``, read at each turn)."""

    def __init__(self) -> None:
        self._journals: weakref.WeakSet[SpendJournal] = weakref.WeakSet()
        per_process(self, _Sweeper._fresh)

    def _fresh(self) -> None:
        """No thread yet (at the start, and in a forked child: its parent's is not there)."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pid = 0  # the process whose thread runs (0: none)

    def watch(self, journal: SpendJournal) -> None:
        with self._lock:
            journal.swept_at = time.monotonic()  # (its first sweep: one interval on)
            self._journals.add(journal)
            if self._pid == os.getpid():
                self._wake.set()  # (it reads the interval again)
                return
            self._pid = os.getpid()
        thread = threading.Thread(target=self._run, name="llmguard-journal-sweep", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": the next journal watched tries again
            with self._lock:
                self._pid = 0

    def _run(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            self._wake.clear()  # (a journal watched from now on wakes the wait below)
            with self._lock:  # (a journal watched meanwhile would change the set)
                journals = list(self._journals)
            now = time.monotonic()
            due = [journal for journal in journals if journal.sweep_due() <= now]
            if not due:
                soonest = min((j.sweep_due() for j in journals), default=now + _SWEEP_EVERY_S)
                self._wake.wait(soonest - now)
                continue
            for journal in due:
                try:
                    journal.sweep()
                except Exception:  # the thread serves every journal: it goes on
                    logger.exception("budgets: a spend journal sweep failed")
                journal.swept_at = time.monotonic()


_SWEEPER = _Sweeper()


def _entry(line: str) -> JournalRecord | None:
    """The record on ``line``; ``None`` for a torn last line (a crash mid-write: its call
    never returned) or anything else that is not a record."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and "rid" in entry else None


def _read(path: Path) -> list[JournalRecord]:
    """The records of ``path`` not yet replayed."""
    return _read_from(path, _replay_start(path), None)[0]


def _replay_start(path: Path) -> int:
    """Where the records of ``path`` not yet replayed start (its header's word)."""
    try:
        with open(path, "rb") as raw:
            return _start_of(raw.read(_HEADER_SIZE))
    except OSError:
        return 0


def _read_from(path: Path, start: int, limit: int | None) -> tuple[list[JournalRecord], list[int]]:
    """The first ``limit`` records of ``path`` from byte ``start`` on, and where each ends."""
    entries: list[JournalRecord] = []
    ends: list[int] = []
    try:
        with open(path, "rb") as raw:
            raw.seek(start)
            at = start
            for line in raw:
                if limit is not None and len(entries) >= limit:
                    break
                at += len(line)
                entry = _entry(line.decode("utf-8", errors="replace"))
                if entry is not None:
                    entries.append(entry)
                    ends.append(at)
    except OSError:
        pass
    return entries, ends


def _write_header(path: Path, start: int) -> None:
    """Move the header of ``path`` to say its records start at ``start`` (synced)."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, _header(start))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
