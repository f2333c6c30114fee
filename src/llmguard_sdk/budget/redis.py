"""Budget counters shared by every process through Redis: one Lua script per step.

A reservation checks and holds the worst case on every counter of a call in one script
(all or nothing), with Redis ``TIME`` as the clock; settling is another script, made
idempotent by a marker key per reservation id. Every key of one budget set shares one hash
tag (the set's name, hashed), because one call's counters (global, its tenant, its user...)
must be touched atomically by one script: on Redis Cluster all of a set's counters live on
one slot. Reservations carry an expiry in a sorted set per counter, so the holds of a process
that died come back by themselves.

When Redis cannot be reached, calls fail closed (the reply says ``unavailable``) unless the
backend was built with ``fail_open=True``: then each process counts on its own, in memory,
until Redis answers again, within a bound for the whole fleet (the first reservation counted
so in each outage says ``first_local``: ``on_event`` is told). Each reservation registers
its process in a sorted set of the budget set (alive while it reserved in the last
``_ALIVE`` seconds) and the script answers with the processes alive and each counter's
room left; while Redis is away a process may spend ``fleet_share`` of the room its counters
had left at its last reservation, divided by the processes alive then. Together the fleet
spends at most ``fleet_share`` of what was left (a quarter by default), whatever the number of
processes that reached Redis in the last ``_ALIVE`` seconds, once each process's last
reservation saw them all alive. A counter a process never reserved on (a tenant new to it)
counts its whole limit instead of its room; a process that never reached Redis counts itself
alone, and one whose last reservation came before others registered divides by fewer: what
holds whatever the timing is ``fleet_share`` of the limit per process. Spend that could not
reach Redis (settles of calls reserved in Redis, and every call counted locally) goes into
the :class:`~llmguard_sdk.budget.journal.SpendJournal`, a file, before the call returns; the
journal is replayed into Redis by the next script that reaches it, and the settled marker of
each reservation id makes a replay count once (the marker is kept an hour past the hold:
a settle whose answer was lost, replayed later than that, counts twice). Spend replayed
after its window ended counts in the window that is current when Redis answers again.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import threading
import time
import uuid
import weakref
from collections.abc import Generator, Sequence
from importlib import resources
from typing import Any, cast

from typing_extensions import Unpack

from .._state.steps import Call, Step, entry_points, run, work
from .._state.stores import (
    Outage,
    RedisScripts,
    RedisStore,
    hash_id,
    redis_errors,
    sweep_every,
)
from ..errors import BudgetUnavailableError, ConfigurationError
from ._reasons import Cause, cause, reason
from ._zones import UTC, ZONED_WINDOWS, edges
from .journal import JournalRecord, SpendJournal, record, specs_of
from .memory import HoldArgs, MemoryBudgetBackend, Status
from .policy import NANO, CounterSpec, ReserveResult, SettleResult

__all__ = ["RedisBudgetBackend"]

_LUA = resources.files(__package__).joinpath("lua")
_COMMON = _LUA.joinpath("common.lua").read_text(encoding="utf-8")
_RESERVE, _SETTLE, _STATUS = (
    _COMMON + "\n" + _LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    for name in ("reserve", "settle", "status")
)
logger = logging.getLogger("llmguard_sdk")
_KEEP_SECONDS = 3600  # keys outlive their window (and holds) by an hour
_ScriptCall = tuple[list[str], list[Any]]  # a script's keys and arguments
_REPLAY_PER_CALL = 32  # journal records a call replays before its own script (bounded delay)
_SWEEP_REPLAY_S = 5.0  # how long the sweep thread replays the journal at most, each sweep
_LOCAL = 10_000  # reservation ids counted locally that are remembered (and counters' rooms)
_ALIVE = 300.0  # a process counts as alive this long after its last reservation


class RedisBudgetBackend:
    """:class:`~llmguard_sdk.budget.MemoryBudgetBackend`'s contract, shared through Redis.

    Keys: ``{prefix}:budget:{<set hash>}:c:<counter>`` (hash), ``:e:<counter>`` (expiries),
    ``:b:<counter>`` (rolling buckets) and ``:d:<reservation id>`` (settled marker).
    ``clock_offset`` shifts the scripts' clock (Redis ``TIME``) for tests.

    Args:
        store: the Redis store.
        name: the budget set's name; its hash is the hash tag of every key.
        fail_open: count in this process's memory while Redis is unreachable (default:
            reserve replies ``unavailable`` and the caller refuses the call).
        fleet_share: with ``fail_open``, the share of what each counter had left when Redis
            went away that the whole fleet may spend while it is away (default: the store's
            ``local_share``, 0.25).
        journal_dir: where the spend journal lives (default: the store's ``journal_dir``,
            else a per-user cache directory).
        journal_sweep_every_s: how often (seconds) this process adopts and replays the
            journals of processes that died (default: the store's
            ``journal_sweep_every_s``, else every 30 s).
    """

    def __init__(
        self,
        store: RedisStore,
        *,
        name: str = "default",
        fail_open: bool = False,
        journal_dir: str | None = None,
        fleet_share: float | None = None,
        journal_sweep_every_s: float | None = None,
    ) -> None:
        share = store.local_share if fleet_share is None else fleet_share
        if isinstance(share, bool) or not (isinstance(share, (int, float)) and 0 <= share <= 1):
            raise ConfigurationError("fleet_share must be in [0, 1]")
        self.clock_offset = 0.0
        self.fail_open = fail_open
        self._store = store
        self._tag = hash_id(name)
        self._share = float(share)
        self._pid, self._pid_of = "", 0  # this process's id in the fleet (see _process_id)
        # counter key: its room left at this process's last reservation on it
        self._seen: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._live = 1  # processes alive at the last reservation (1: never reached Redis)
        self._scripts = RedisScripts(store, _RESERVE, _SETTLE, _STATUS, once=(0, 1))
        self._fallback = MemoryBudgetBackend()
        self._local: collections.OrderedDict[str, None] = collections.OrderedDict()
        prefix = "".join(c if c.isalnum() or c in "_-" else "_" for c in store.key_prefix)
        every = sweep_every(journal_sweep_every_s)
        self.journal = SpendJournal(
            journal_dir or store.journal_dir,
            f"{prefix}-{hash_id(store.url)}-{self._tag}",
            sweep_every_s=store.journal_sweep_every_s if every is None else every,
        )
        # a crashed process's spend, adopted in time and replayed from the sweep thread
        self.journal.sweep_in_background(self._replay_swept, store.background)
        self._replaying = threading.Lock()
        self._told: dict[str, object] = {}  # the outage, refusal, episode of load last told
        self._telling = threading.Lock()
        weakref.finalize(self, self.journal.close)
        self._outage = Outage(
            "budgets",
            "counting per process" if fail_open else "refusing budgeted calls",
            store,
            waits=not fail_open,  # refusing is no local decision: try Redis once a pause ends
        )

    # -- arguments -------------------------------------------------------------------------

    def _keys(self, specs: Sequence[CounterSpec]) -> list[str]:
        keys: list[str] = []
        for spec in specs:
            keys += [self._store.key("budget", self._tag, part, spec.key) for part in "ceb"]
        return keys

    def _spec_args(self, specs: Sequence[CounterSpec]) -> list[Any]:
        """Each counter's arguments (see ``lua/common.lua``); a day or month on a local
        calendar with the edges of the windows around this process's clock."""
        args: list[Any] = []
        for spec in specs:
            local = spec.tz != UTC and spec.window in ZONED_WINDOWS
            around = edges(spec.window, spec.tz, time.time() + self.clock_offset) if local else ()
            args += [
                spec.limit,
                spec.window,
                repr(float(spec.rolling_seconds)),
                ",".join(repr(a) for a in spec.alerts) or ",",
                _KEEP_SECONDS,
                ",".join(str(edge) for edge in around) or ",",
                spec.tz,
            ]
        return args

    def _reserve_call(
        self, rid: str, specs: Sequence[CounterSpec], hold: HoldArgs
    ) -> tuple[list[str], list[Any]]:
        args = [self.clock_offset, rid, repr(float(hold["ttl"])), hold["base"]]
        args += [repr(float(hold["per_token"])), hold["want"], hold["minimum"], len(specs)]
        keys = [*self._keys(specs), self._store.key("budget", self._tag, "p")]
        kinds = [spec.scope.partition(":")[0] for spec in specs]  # stored for the status tool
        return keys, [*args, *self._spec_args(specs), self._process_id(), repr(_ALIVE), *kinds]

    def _process_id(self) -> str:
        """This process's id among those Redis sees alive: drawn again in a forked child (a
        worker of a server that built its app before forking counts as a process of its own)."""
        if self._pid_of != os.getpid():
            self._pid, self._pid_of = uuid.uuid4().hex[:16], os.getpid()
        return self._pid

    def _note_rooms(self, specs: Sequence[CounterSpec], live: int, rooms: list[int]) -> None:
        """Remember what the fleet may spend on each counter should Redis go away."""
        self._live = max(live, 1)
        for spec, room in zip(specs, rooms, strict=True):
            self._seen[spec.key] = room
            self._seen.move_to_end(spec.key)
        while len(self._seen) > _LOCAL:
            self._seen.popitem(last=False)

    def _settle_call(
        self,
        rid: str,
        specs: Sequence[CounterSpec],
        actual: int,
        ttl: float,
        *,
        replay: bool = False,
    ) -> tuple[list[str], list[Any]]:
        """The settle script's keys and arguments; a ``replay`` (from the journal: its answer
        is not told) marks no alert fired, so the next settle tells them."""
        keys = [*self._keys(specs), self._store.key("budget", self._tag, "d", rid)]
        args = [self.clock_offset, rid, actual, repr(float(ttl)), len(specs)]
        return keys, args + self._spec_args(specs) + (["replay"] if replay else [])

    def _note_local(self, rid: str) -> None:
        self._local[rid] = None
        while len(self._local) > _LOCAL:
            self._local.popitem(last=False)

    def _local_specs(self, specs: Sequence[CounterSpec]) -> tuple[CounterSpec, ...]:
        """The counters as this process enforces them alone: its part (the fleet's share,
        divided by the processes alive at its last reservation) of what each had left at
        its last reservation on it, or of the whole limit of a counter it never reserved
        on (a tenant new to it); a process that never reached Redis counts itself alone."""
        found: list[CounterSpec] = []
        for spec in specs:
            seen = self._seen.get(spec.key)
            room = spec.limit if seen is None else min(max(seen, 0), spec.limit)
            found.append(dataclasses.replace(spec, limit=int(self._share * room / self._live)))
        return tuple(found)

    def _locally(
        self, rid: str, specs: Sequence[CounterSpec], hold: HoldArgs, exc: BaseException | None
    ) -> ReserveResult:
        """Redis did not decide (``exc``: its failure; ``None``: paused): refuse (fail
        closed, saying why where Redis is not away: :mod:`._reasons`), or reserve on this
        process's part (``first_local`` on the first such reservation of an outage, of an
        episode of load, or since Redis refused the script with another error, see
        :meth:`_news`)."""
        why = cause(exc)
        if not self.fail_open:
            told = reason(why, exc, self._store)
            return ReserveResult(
                False,
                refused_index=-1,
                unavailable=True,
                retry_after=self._retry_in(),
                detail=told and f"spend budgets are unavailable for this call: {told}",
            )
        self._note_local(rid)
        local = self._local_specs(specs)
        result = self._fallback.reserve(rid, local, **hold)
        detail = ""
        if not result.allowed:  # what the refusal's message says it was refused on
            part = local[result.refused_index].limit / NANO
            detail = (
                "counted in this process's memory, Redis did not answer: its part of what "
                f"the budget had left is ${part:.6f}"
            )
        # (no 100 % alert: this process's part of what was left is not the budget's limit)
        news = self._news(why, exc)
        return dataclasses.replace(result, first_local=news, alerted=False, detail=detail)

    def _news(self, why: Cause, exc: BaseException | None) -> bool:
        """Whether a reservation counted locally is the first of its outage (as the store's
        health counts them: whichever stage met it first), of its episode of this process's
        load (a full pool, a busy loop: counted alike), or since Redis refused the script
        with the error ``exc`` (it answers, so no outage); one whose call's deadline cut its
        round trip short is told once per outage count, as Redis away: the one to tell."""
        health = self._outage.health
        kind: str = why
        mark: object = health.outages
        if why == "refused":
            mark = str(exc)
        elif why not in ("away", "time"):  # a full pool or a busy loop: one episode of load
            kind, mark = "load", health.overloads
        with self._telling:
            if self._told.get(kind) == mark:
                return False
            self._told[kind] = mark
            return True

    def _retry_in(self) -> float:
        """Seconds until the store tries Redis again (0: at the next call)."""
        return max(0.0, self._outage.health.down_until - time.monotonic())

    def _failed(self, exc: BaseException) -> None:
        self._outage.failed(exc)
        self.journal.orphans_checked = False  # other processes may have died meanwhile

    def _journal(self, rid: str, specs: Sequence[CounterSpec], actual: int, ttl: float) -> Call:
        """The journal's append of a settle, as blocking work (its fsync waits for the disk):
        inline in sync code, in a worker thread in async code (the loop goes on, and the
        appends of calls settling together share their fsyncs, see journal.py)."""
        entry = record(rid, tuple(specs), actual, ttl, time.time())
        return work(lambda: self.journal.append(entry))

    def _replay_call(self, entry: JournalRecord) -> tuple[list[str], list[Any]]:
        """The settle script call of a journal record (a no-op call for a broken record)."""
        try:
            ttl = max(float(entry["ttl"]), float(_KEEP_SECONDS))
            specs = specs_of(entry)
            return self._settle_call(entry["rid"], specs, int(entry["actual"]), ttl, replay=True)
        except (KeyError, TypeError, ValueError) as exc:
            logger.error("budgets: a broken spend journal record was skipped (%s): %r", exc, entry)
            return self._settle_call(str(uuid.uuid4()), (), 0, 1.0)

    # -- sync -------------------------------------------------------------------------------

    def _replay_steps(self, limit: int | None) -> Generator[_ScriptCall, None, None]:
        """The settle scripts that replay the journal (dead processes' files adopted into
        this process's first), at most ``limit`` of them; the caller runs each one it is
        given, and stops at the first failure."""
        journal = self.journal
        if not journal.has_work() or not self._replaying.acquire(blocking=False):
            return
        try:
            if not journal.orphans_checked:
                journal.adopt_orphans()
            done = 0
            try:
                for entry in journal.own_records(limit):
                    yield self._replay_call(entry)
                    done += 1
            finally:
                if done:
                    journal.own_replayed(done)
        finally:
            self._replaying.release()

    def _flush_steps(self, limit: int | None = _REPLAY_PER_CALL) -> Step[None]:
        """Replay (part of) the journal into Redis, one settle script at a time (raises the
        Redis error that stopped it); nothing to send when the journal is empty. A call
        replays at most 32 records (``_REPLAY_PER_CALL``) before its own script, so a long
        journal left by an outage delays no call by more than that many round trips."""
        steps = self._replay_steps(limit)
        try:
            for keys, args in steps:
                yield self._scripts.command(1, keys, args)
        finally:
            steps.close()

    def replay_steps(self, limit: int | None = None) -> Step[bool]:
        """:meth:`replay` as a step of a :class:`~llmguard_sdk._state.steps.Batch` (at most
        ``limit`` records; ``None``: all)."""
        try:
            yield from self._flush_steps(limit)
        except redis_errors() as exc:
            self._failed(exc)
            return False
        return self.journal.pending == 0

    def replay(self) -> bool:
        """Replay the whole journal now; True when nothing is left in it (False: Redis
        failed)."""
        return run(self.replay_steps())

    def _replay_swept(self) -> None:
        """The sweep thread's replay of the journal (dead processes' records it adopted, and
        this process's own an outage left): off every call's path, ``_REPLAY_PER_CALL``
        records at a time for at most ``_SWEEP_REPLAY_S`` seconds, while Redis is not
        paused. A failure pauses Redis and is logged as a call's would be; what is left
        waits for the next call or sweep (a call replaying meanwhile: it goes on), as it
        does once the store is closing (its background work stopped)."""
        stop = time.monotonic() + _SWEEP_REPLAY_S
        background = self._store.background
        while self.journal.pending and self._outage.up() and time.monotonic() < stop:
            if background.stopped:
                return
            left = self.journal.pending
            if run(self.replay_steps(_REPLAY_PER_CALL)) or self.journal.pending >= left:
                return

    def reserve_steps(
        self, rid: str, specs: Sequence[CounterSpec], **hold: Unpack[HoldArgs]
    ) -> Step[ReserveResult]:
        """Hold a call's worst case on every counter in one script, all or nothing (a
        journal to replay first costs round trips of its own)."""
        failure: BaseException | None = None  # (None: Redis paused)
        if self._outage.up():
            try:
                yield from self._flush_steps()
                keys, args = self._reserve_call(rid, specs, hold)
                result, live, rooms = _reserved((yield self._scripts.command(0, keys, args)))
                self._note_rooms(specs, live, rooms)
                return result
            except redis_errors() as exc:
                self._failed(exc)
                failure = exc
        return self._locally(rid, specs, hold, failure)

    def settle_steps(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> Step[SettleResult]:
        """Turn reservation ``rid`` into ``actual`` spend, once; spend that cannot reach
        Redis now is journaled and replayed later."""
        if rid in self._local:  # counted locally: the journal carries it to Redis
            local = self._local_specs(specs)
            result = self._fallback.settle(rid, local, actual=actual, ttl=ttl)
            if result.applied and actual > 0:
                yield self._journal(rid, specs, actual, ttl)
                if self._outage.up():
                    yield from self.replay_steps(_REPLAY_PER_CALL)
            # no alerts: this process's part of what was left is not the budget's limit
            return dataclasses.replace(result, fired=tuple(() for _ in result.fired))
        if self._outage.up():
            try:
                yield from self._flush_steps()
                keys, args = self._settle_call(rid, specs, actual, ttl)
                return _settled((yield self._scripts.command(1, keys, args)))
            except redis_errors() as exc:
                self._failed(exc)
        yield self._journal(rid, specs, actual, ttl)
        return SettleResult(False)

    reserve, areserve = entry_points(reserve_steps)
    settle, asettle = entry_points(settle_steps)

    def status_steps(self, specs: Sequence[CounterSpec]) -> Step[list[Status]]:
        """Each counter's settled spend, reserved amount and reset time (raises
        :class:`~llmguard_sdk.errors.BudgetUnavailableError` when Redis did not answer,
        saying why)."""
        if not specs:
            return []
        args = [self.clock_offset, len(specs), *self._spec_args(specs)]
        try:
            reply = yield self._scripts.command(2, self._keys(specs), args)
        except redis_errors() as exc:
            raise self._unreadable(specs, exc) from exc
        return _statuses(reply)

    status, astatus = entry_points(status_steps)

    def stored_counters(self, *, tenant: str | None = None) -> list[CounterSpec]:
        """The counters of this budget set found in Redis (each granted reservation stores
        its counter's limit, window and alerts beside its state), those of ``tenant`` only
        when given; for tools such as ``llmguard budget status``: it SCANs, so it is never on
        the call path."""
        pattern = self._store.key("budget", self._tag, "c", "x")[:-1] + "*"
        wanted = None if tenant is None else f".{hash_id(tenant)}"
        found: list[CounterSpec] = []
        client = self._store.client
        for raw in client.scan_iter(match=pattern, count=500):
            key = _text(raw)
            name = key.rpartition(":c:")[2]
            if wanted is not None and not name.endswith(wanted):
                continue
            # (typed here: redis-py 7 says "a reply or an awaitable", 8 a list)
            stored = cast(Sequence[Any], client.hmget(key, ["L", "K", "S", "A", "P", "Z"]))
            limit, kind, seconds, alerts, scope, tz = (
                _text(v) if v is not None else None for v in stored
            )
            if limit is None or kind is None:
                continue  # not reserved on since its spec is stored
            # a tenant's counter: its stored scope kind says so (a named budget's key does
            # not; a user's of the same id ends alike), else (stored before) its key's name
            if wanted is not None and (scope or name.partition(".")[0]) != "tenant":
                continue
            found.append(
                CounterSpec(
                    key=name,
                    limit=int(limit),
                    window=kind,  # type: ignore[arg-type]
                    rolling_seconds=float(seconds or 3600.0),
                    alerts=tuple(float(a) for a in (alerts or "").split(",") if a),
                    scope=f"tenant:{tenant}" if tenant is not None else name,
                    budget_index=-1,
                    tz=tz or UTC,
                )
            )
        return sorted(found, key=lambda spec: spec.key)

    def _unreadable(self, specs: Sequence[CounterSpec], exc: BaseException) -> Exception:
        """The error of a status read that Redis did not answer, saying why (noted as the
        store's health takes it: an outage, load, a refusal)."""
        self._failed(exc)
        told = reason(cause(exc), exc, self._store)
        return BudgetUnavailableError(
            f"spend budgets cannot be read: {told or f'Redis did not answer ({exc})'}",
            scope="*",
            limit_usd=specs[0].limit / NANO if specs else math.nan,
            spent_usd=math.nan,
            retry_after=self._retry_in(),
        )


def _text(part: Any) -> str:
    return part.decode() if isinstance(part, bytes) else str(part)


def _reserved(reply: Any) -> tuple[ReserveResult, int, list[int]]:
    """The reservation's result, the processes alive and each counter's room left."""
    parts = [_text(p) for p in reply]
    if parts[0] == "1":
        rooms = [int(p) for p in parts[4:]]
        return ReserveResult(True, tokens=int(parts[1]), amount=int(parts[2])), int(parts[3]), rooms
    result = ReserveResult(
        False,
        refused_index=int(parts[1]),
        spent=int(parts[2]),
        reserved=int(parts[3]),
        resets_at=float(parts[4]),
        alerted=parts[5] == "1",
        frees_at=float(parts[6]),
    )
    return result, int(parts[7]), [int(p) for p in parts[8:]]


def _settled(reply: Any) -> SettleResult:
    parts = [_text(p) for p in reply]
    if parts[0] != "1":
        return SettleResult(False)
    rows = [parts[i : i + 3] for i in range(1, len(parts), 3)]
    return SettleResult(
        True,
        tuple(int(spent) for spent, _, _ in rows),
        tuple(float(resets) for _, resets, _ in rows),
        tuple(tuple(float(a) for a in fired.split(",") if a) for _, _, fired in rows),
    )


def _statuses(reply: Any) -> list[Status]:
    parts = [_text(p) for p in reply]
    return [
        (int(parts[i]), int(parts[i + 1]), float(parts[i + 2])) for i in range(0, len(parts), 3)
    ]
