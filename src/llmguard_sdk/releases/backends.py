"""Where a canary's stage and its arms' counters live: this process's memory, or Redis,
where every process of a fleet adds its counters and reads the same stage.

Two decisions, each one Lua script in Redis (keys of one canary share a hash tag, Redis
``TIME`` is the clock): :meth:`exchange` adds a process's counters and reads the stage and
both arms' counters back (a Guard's exchange stores its policy's stage shares and
``min_calls`` with the canary, so that a reader of the store alone, ``llmguard release``,
moves and reports it by them); :meth:`transition` moves the stage if nobody moved it since
it was read (compare and set on its version), clearing the counters for the new stage (a
rollback keeps them, for ``status``). A canary lives 30 days after the last exchange of a
serving Guard (a candidate given) or the last move (in Redis its keys' TTL; in memory a
deadline per key, by the backend's clock); a read (no candidate: ``status``) leaves that as
it is, so a canary no Guard serves any more is forgotten however often it is read.

A key holds one canary at a time, yet several candidates may ask for it (a rolling deploy,
the processes of the previous one still running). The stored candidate holds the key for
``hold`` seconds after each exchange of its Guards: meanwhile another candidate's exchange
only reads the stage (its Guards wait, serving the release); once the hold lapsed (the
holder's Guards are gone), it starts its canary, and the stage it replaces is kept (those of
the last 16 candidates). (Each exchange took the key for its own candidate: two deploys
serving side by side swapped it at every exchange, their counters dropped each time, and
neither canary ever decided.) A candidate that comes back takes up its stage again (counters
empty): a rolled-back one stays rolled back (start it again by hand, or under a new
version), a promoted one stays promoted.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from .._state.deadlines import Deadlines
from .._state.steps import Step, blocking
from .._state.stores import RedisScripts, RedisStore, hash_id, lua
from ..errors import ConfigurationError
from .policy import Counters, Stage, StageStatus

__all__ = [
    "Exchange",
    "MemoryReleaseBackend",
    "RedisReleaseBackend",
    "ReleaseBackend",
]

_EXCHANGE = lua(__name__, "exchange")
_TRANSITION = lua(__name__, "transition")
_TTL = 30 * 86400  # a canary no Guard serves or moves for 30 days is forgotten
_REMEMBERED = 16  # candidates whose last stage a key keeps, besides the current one's


@dataclass(frozen=True)
class Exchange:
    """The stage and both arms' counters, summed over every process (``None`` stage: no
    canary stored under the key), and the stage shares and ``min_calls`` its Guards run
    (``()``, ``0``: none stored)."""

    stage: Stage | None
    control: Counters = field(default_factory=dict)
    canary: Counters = field(default_factory=dict)
    stages: tuple[float, ...] = ()
    min_calls: int = 0


class ReleaseBackend(Protocol):
    """A canary's state: see the module docs."""

    def exchange(
        self, key: str, candidate: str, version: int, control: Counters, canary: Counters,
        stages: Sequence[float] = (), hold: float = 0.0, min_calls: int = 0,
    ) -> Exchange:  # fmt: skip
        """Add counters taken under stage ``version``; the stage and counters afterwards.
        ``stages`` and ``min_calls``: the caller's stage shares and calls an arm serves before
        a stage is promoted, stored with ``candidate``'s canary (``()``, ``0``: none);
        ``hold``: seconds ``candidate`` keeps the key from other candidates after this
        exchange."""

    def transition(
        self, key: str, version: int, index: int, status: StageStatus, reason: str,
        candidate: str = "",
    ) -> tuple[bool, Stage]:  # fmt: skip
        """Move the stage if it is still at ``version``; (moved, the stage now)."""


class MemoryReleaseBackend:
    """A canary's state in this process (one Guard, or Guards sharing this backend; gone
    when the process ends: a restart starts the canary again at its first stage), each key's
    forgotten 30 days after its last serving exchange or move, as in Redis (see the module
    docs): a process that runs canaries for release after release holds those still served,
    not every one it ever saw. ``clock``: wall-clock seconds (``time.time``)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        if not callable(clock):
            raise ConfigurationError(f"clock: a callable returning seconds, got {clock!r:.80}")
        self._clock = clock
        self._lock = threading.Lock()
        self._stages: dict[str, Stage] = {}
        self._counters: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
        self._past: dict[str, dict[str, Stage]] = {}  # per key, oldest first
        self._shares: dict[str, tuple[float, ...]] = {}
        self._min_calls: dict[str, int] = {}
        self._held: dict[str, float] = {}  # until when the stored candidate holds the key
        self._deadlines = Deadlines()  # when each key's canary is forgotten

    def _now(self) -> float:
        """The clock's time, each key whose deadline it passed forgotten (amortised
        O(log n) a key: no scan over those kept). Called under the lock."""
        now = self._clock()
        for key in self._deadlines.expired(now):
            for table in (
                self._stages, self._counters, self._past, self._shares, self._min_calls,
                self._held,
            ):  # fmt: skip
                table.pop(key, None)
        return now

    def exchange(
        self, key: str, candidate: str, version: int, control: Counters, canary: Counters,
        stages: Sequence[float] = (), hold: float = 0.0, min_calls: int = 0,
    ) -> Exchange:  # fmt: skip
        """Add counters taken under stage ``version``; the stage and counters afterwards.
        ``stages`` and ``min_calls``: the caller's stage shares and calls an arm serves before
        a stage is promoted, stored with ``candidate``'s canary (``()``, ``0``: none);
        ``hold``: seconds ``candidate`` keeps the key from other candidates after this
        exchange."""
        with self._lock:
            now = self._now()
            stage = self._stages.get(key)
            held = self._held.get(key, 0.0)
            if candidate and stage is not None and stage.candidate != candidate and now < held:
                candidate = ""  # another candidate's canary under way: read only
            elif candidate and (stage is None or stage.candidate != candidate):
                stage = self._switch(key, stage, candidate, now)
                self._stages[key] = stage
                self._counters[key] = ({}, {})
            elif stage is not None and stage.version == version:
                for mine, theirs in zip(self._counters[key], (control, canary), strict=True):
                    for name, value in theirs.items():
                        mine[name] = mine.get(name, 0.0) + value
            if stage is None:
                return Exchange(None)
            if candidate:  # a serving Guard's exchange keeps the canary; a read does not
                self._deadlines.touch(key, now + _TTL)
                self._held[key] = max(held, now + hold)
                if stages:
                    self._shares[key] = tuple(float(share) for share in stages)
                if min_calls > 0:
                    self._min_calls[key] = int(min_calls)
            ctl, can = self._counters[key]
            return Exchange(
                stage, dict(ctl), dict(can), self._shares.get(key, ()),
                self._min_calls.get(key, 0),
            )  # fmt: skip

    def _switch(self, key: str, stage: Stage | None, candidate: str, now: float) -> Stage:
        """``candidate``'s stage, as it left it or a new canary; ``stage`` is remembered."""
        past = self._past.setdefault(key, {})
        before = past.pop(candidate, None)
        if stage is not None:
            past.pop(stage.candidate, None)
            past[stage.candidate] = stage
            while len(past) > _REMEMBERED:
                del past[next(iter(past))]
        version = (stage.version if stage else 0) + 1
        if before is None:
            return Stage(version, 0, "canary", candidate, "new candidate", now)
        return replace(before, version=version, changed_at=now)

    def transition(
        self, key: str, version: int, index: int, status: StageStatus, reason: str,
        candidate: str = "",
    ) -> tuple[bool, Stage]:  # fmt: skip
        """Move the stage if it is still at ``version``; (moved, the stage now)."""
        with self._lock:
            now = self._now()
            stage = self._stages.get(key)
            if stage is None:  # none stored (or forgotten): nothing to move
                return False, Stage()
            if stage.version != version or (candidate and candidate != stage.candidate):
                return False, stage
            stage = Stage(version + 1, index, status, stage.candidate, reason, changed_at=now)
            self._stages[key] = stage
            if status != "rolled_back":  # a rollback keeps its evidence for status()
                self._counters[key] = ({}, {})
            self._deadlines.touch(key, now + _TTL)  # a move renews the canary's life
            return True, stage


class RedisReleaseBackend:
    """A canary's state in Redis: ``{prefix}:rel:{<key hash>}:s`` (stage), ``:c`` and
    ``:k`` (the control's and the canary's counters)."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._scripts = RedisScripts(store, _EXCHANGE, _TRANSITION, once=(0, 1))

    def _keys(self, key: str) -> list[str]:
        tag = hash_id(key)
        return [self._store.key("rel", tag, part) for part in ("s", "c", "k")]

    def exchange_steps(
        self, key: str, candidate: str, version: int, control: Counters, canary: Counters,
        stages: Sequence[float] = (), hold: float = 0.0, min_calls: int = 0,
    ) -> Step[Exchange]:  # fmt: skip
        """Add counters taken under stage ``version``; the stage and counters afterwards.
        ``stages`` and ``min_calls``: the caller's stage shares and calls an arm serves before
        a stage is promoted, stored with ``candidate``'s canary (``()``, ``0``: none);
        ``hold``: seconds ``candidate`` keeps the key from other candidates after this
        exchange."""
        shares = ",".join(repr(float(share)) for share in stages) if candidate else ""
        args: list[Any] = [candidate, version, _TTL, len(control), shares, repr(float(hold))]
        args.append(int(min_calls) if candidate else 0)
        for counters in (control, canary):
            for name, value in counters.items():
                args += [name, repr(float(value))]
        reply = yield self._scripts.command(0, self._keys(key), args)
        if not reply:
            return Exchange(None)
        raw, ctl, can, stored, needs = reply
        values = [_text(v) if v is not None else "" for v in raw]
        stage = Stage(
            int(float(values[0])), int(float(values[1] or 0)),
            cast(StageStatus, values[2] or "canary"), values[3], values[4],
            float(values[5] or 0),
        )  # fmt: skip
        calls = _text(needs) if needs is not None else ""
        return Exchange(
            stage, _pairs(ctl), _pairs(can), _shares(_text(stored)),
            int(calls) if calls.isdigit() else 0,
        )  # fmt: skip

    def transition_steps(
        self, key: str, version: int, index: int, status: StageStatus, reason: str,
        candidate: str = "",
    ) -> Step[tuple[bool, Stage]]:  # fmt: skip
        """Move the stage if it is still at ``version``; (moved, the stage now)."""
        args = [version, index, status, reason, _TTL, candidate]
        reply = yield self._scripts.command(1, self._keys(key), args)
        applied, v, i, st, cand, why, at = (_text(x) if x is not None else "" for x in reply)
        stage = Stage(
            int(float(v or 0)), int(float(i or 0)), cast(StageStatus, st or "canary"), cand,
            why, float(at or 0),
        )  # fmt: skip
        return applied == "1", stage

    exchange = blocking(exchange_steps)
    transition = blocking(transition_steps)


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _shares(text: str) -> tuple[float, ...]:
    """Stage shares as the store keeps them (``0.01,0.05,1.0``); ``()`` for none or junk."""
    try:
        return tuple(float(share) for share in text.split(",")) if text else ()
    except ValueError:
        return ()


def _pairs(flat: list[Any]) -> Mapping[str, float]:
    return {_text(flat[i]): float(_text(flat[i + 1])) for i in range(0, len(flat), 2)}
