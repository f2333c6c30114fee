"""Calls in flight per deployment, as leases that run out: in this process
(:class:`MemoryLeases`) or shared by every process through Redis (:class:`RedisLeases`).

A call takes a lease on the deployment a group sends it to when it reaches the group (a
group it never reaches, an earlier route having answered, counts nothing) and gives it back
when the call ends; a lease also ends at its deadline (the call's own, plus a margin),
so a caller that crashed holds nothing for long. Each decision first drops the leases whose
deadline passed (in this process, from a queue ordered by deadline: a decision's cost does not
grow with the calls in flight): the state is bounded by the calls in flight, not by time.

With Redis, each decision is one Lua script (``lua/take.lua``): it prunes, counts, picks the
deployment with the fewest calls in flight (or the one asked for) and adds the lease, on
Redis ``TIME``. The keys of one group share a hash tag (Redis Cluster). If Redis cannot be
reached, the process counts its own calls for a while.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._state.steps import Step, in_place
from .._state.stores import Outage, RedisScripts, RedisStore, hash_id, lua, redis_errors
from .policy import rank_by_load

__all__ = ["LeaseAsk", "Leases", "MemoryLeases", "RedisLeases"]

_TAKE = lua(__name__, "take")
_GIVE_BACK = lua(__name__, "give_back")

Taken = tuple[int, list[int]]
"""(the deployment leased, each deployment's calls in flight before the lease)."""


@dataclass(frozen=True)
class LeaseAsk:
    """Lease ``call_id`` on a deployment of ``group`` (its deployments' ``names``) for
    ``lease_s`` seconds at most: on ``pick`` (an index), or on the one with the fewest calls
    in flight (``pick`` None; ties go round from ``turn``)."""

    group: str
    names: Sequence[str]
    pick: int | None
    turn: int
    call_id: str
    lease_s: float


class Leases(Protocol):
    """Where the calls in flight of a group's deployments are counted."""

    def take_steps(self, ask: LeaseAsk) -> Step[Taken]:
        """Take the lease ``ask`` describes."""
        ...

    def give_back_steps(self, group: str, name: str, call_id: str) -> Step[None]:
        """End ``call_id``'s lease on deployment ``name``."""
        ...


class MemoryLeases:
    """Calls in flight in this process; ``clock`` is injectable for tests.

    Every lease is also queued by deadline (a heap): each decision first drops the leases
    whose deadline passed, wherever they are, so what a decision costs does not grow with the
    calls in flight, and a lease never given back ends at its deadline even on a deployment
    (or group) no call asks about again."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], dict[str, float]] = {}
        self._deadlines: list[tuple[float, tuple[str, str], str]] = []
        self._count = 0  # leases in ``_held``

    def take(self, ask: LeaseAsk) -> Taken:
        """Take the lease ``ask`` describes (see :class:`LeaseAsk`)."""
        with self._lock:
            now = self._expire()
            counts = [len(self._held.get((ask.group, name), ())) for name in ask.names]
            index = rank_by_load(counts, ask.turn)[0] if ask.pick is None else ask.pick
            key, deadline = (ask.group, ask.names[index]), now + ask.lease_s
            held = self._held.setdefault(key, {})
            self._count += ask.call_id not in held
            held[ask.call_id] = deadline
            heapq.heappush(self._deadlines, (deadline, key, ask.call_id))
            return index, counts

    def give_back(self, group: str, name: str, call_id: str) -> None:
        """End ``call_id``'s lease on ``name``."""
        with self._lock:
            self._drop((group, name), call_id)
            # given back before their deadline, leases leave entries behind in the queue:
            # rebuilt when those are most of it (amortized, a give-back costs the same)
            if len(self._deadlines) > 2 * self._count + 64:
                self._deadlines = [
                    (deadline, key, call_id)
                    for key, held in self._held.items()
                    for call_id, deadline in held.items()
                ]
                heapq.heapify(self._deadlines)

    take_steps, atake = in_place(take)
    give_back_steps, agive_back = in_place(give_back)

    def counts(self, group: str, names: Sequence[str]) -> list[int]:
        """Each deployment's calls in flight now."""
        with self._lock:
            self._expire()
            return [len(self._held.get((group, name), ())) for name in names]

    def _expire(self) -> float:
        """Drop the leases whose deadline passed; the time now."""
        now = self._clock()
        queue = self._deadlines
        while queue and queue[0][0] <= now:
            deadline, key, call_id = heapq.heappop(queue)
            if self._held.get(key, {}).get(call_id) == deadline:  # else given back or taken anew
                self._drop(key, call_id)
        return now

    def _drop(self, key: tuple[str, str], call_id: str) -> None:
        held = self._held.get(key)
        if held is not None and held.pop(call_id, None) is not None:
            self._count -= 1
            if not held:  # a deployment without calls in flight keeps nothing
                del self._held[key]


class RedisLeases:
    """Calls in flight counted by every process through Redis: one sorted set of call ids
    per deployment, ``{prefix}:rt:{<group hash>}:<deployment hash>``, scored by deadline."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._scripts = RedisScripts(store, _TAKE, _GIVE_BACK, once=(0,))
        self._fallback = MemoryLeases()
        self._outage = Outage("router", "counting this process's calls in flight", store)

    def _key(self, group: str, name: str) -> str:
        return self._store.key("rt", hash_id(group), hash_id(name))

    def take_steps(self, ask: LeaseAsk) -> Step[Taken]:
        """See :meth:`Leases.take_steps`: one script, on Redis ``TIME``."""
        if self._outage.up():
            keys = [self._key(ask.group, name) for name in ask.names]
            pick = 0 if ask.pick is None else ask.pick + 1
            args: list[Any] = [ask.call_id, repr(float(ask.lease_s)), int(ask.lease_s) + 60]
            try:
                reply = yield self._scripts.command(0, keys, [*args, pick, ask.turn])
                return int(reply[0]) - 1, [int(c) for c in reply[1:]]
            except redis_errors() as exc:
                self._outage.failed(exc)
        return self._fallback.take(ask)

    def give_back_steps(self, group: str, name: str, call_id: str) -> Step[None]:
        """See :meth:`Leases.give_back_steps`."""
        if self._outage.up():
            try:
                yield self._scripts.command(1, [self._key(group, name)], [call_id])
            except redis_errors() as exc:
                self._outage.failed(exc)
        self._fallback.give_back(group, name, call_id)
