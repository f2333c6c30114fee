"""Breaker state shared by every process through Redis: one Lua script per decision.

Each decision is also a step (``acquire_steps``, ``record_steps``, ``release_steps``) that a
:class:`~llmguard_sdk._state.steps.Batch` sends in one pipeline with the other stages' decisions.

When one process trips a breaker, every process sees it on its next call. Keys of one route
share a hash tag, so the scripts work on Redis Cluster; Redis ``TIME`` is the clock. If Redis
cannot be reached, each process falls back to its own in-memory breakers for a few seconds
(and logs it once), so a dead Redis never stops the calls.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from .._state.steps import Step, blocking, entry_points
from .._state.stores import Outage, RedisScripts, RedisStore, hash_id, lua, redis_errors
from ..errors import ConfigurationError
from .memory import MemoryBreakerBackend, breaker_policy, forget_after
from .policy import TIME_BUCKETS, BreakerPolicy, Outcome, Permit, State

__all__ = ["RedisBreakerBackend"]

logger = logging.getLogger("llmguard_sdk")

_ACQUIRE = lua(__name__, "acquire")
_RECORD = lua(__name__, "record")
_RELEASE = lua(__name__, "release")
_END_WAIT = lua(__name__, "end_wait")
_STATES: dict[str, State] = {
    "closed": "closed",
    "open": "open",
    "half_open": "half_open",
    "isolated": "isolated",
}


class RedisBreakerBackend:
    """Per-route breakers in Redis: ``{prefix}:cb:{<route hash>}:s`` (state) and ``:c`` (the
    window's counts: running totals and a ring of outcome codes or of time buckets, its size
    bounded by the policy, not by the traffic; 0.1.0 kept a list of every outcome at ``:w``,
    which is left to expire).

    ``clock_offset`` shifts the script's clock (Redis ``TIME``) for tests that drive time; it
    is 0 in production.
    """

    def __init__(self, store: RedisStore, policy: BreakerPolicy) -> None:
        if not isinstance(store, RedisStore):
            raise ConfigurationError(
                f"a RedisBreakerBackend needs a RedisStore (RedisStore(url)), got {store!r}"
            )
        self.policy = breaker_policy(policy, "RedisBreakerBackend")
        self.clock_offset = 0.0
        self._store = store
        self._scripts = RedisScripts(store, _ACQUIRE, _RECORD, _RELEASE, _END_WAIT, once=(0, 1, 2))
        self._fallback = MemoryBreakerBackend(policy)
        self._outage = Outage("breakers", "using local breakers", store)
        self._ttl = forget_after(policy)  # (what overflows EXPIRE's clock reads as Redis down)

    def _keys(self, route: str) -> list[str]:
        tag = hash_id(route)
        return [self._store.key("cb", tag, "s"), self._store.key("cb", tag, "c")]

    def _acquire_args(self) -> list[Any]:
        p = self.policy
        return [p.half_open_permits, self.clock_offset, self._ttl, p.open_seconds]

    def _record_args(self, outcome: Outcome, hint: float | None, probe: bool | None) -> list[Any]:
        p = self.policy
        return [
            outcome,
            "" if hint is None else repr(float(hint)),
            p.window_type,
            p.window,
            p.minimum_calls,
            p.failure_rate,
            p.slow_call_rate,
            p.open_seconds,
            p.backoff_factor,
            p.max_open_seconds,
            p.half_open_permits,
            self.clock_offset,
            self._ttl,
            TIME_BUCKETS,
            _probe_arg(probe),
        ]

    def acquire_steps(self, route: str) -> Step[Permit]:
        """A permit for one call to ``route``, decided in Redis."""
        if self._outage.up():
            try:
                reply = yield self._scripts.command(0, self._keys(route)[:1], self._acquire_args())
                return _permit(reply)
            except redis_errors() as exc:
                self._outage.failed(exc)
        return self._fallback.acquire(route)

    def record_steps(
        self, route: str, outcome: Outcome, hint: float | None = None, probe: bool | None = None
    ) -> Step[State]:
        """Record a finished call in Redis (``probe``: whether its permit was a half-open
        probe); returns the state afterwards."""
        if self._outage.up():
            try:
                args = self._record_args(outcome, hint, probe)
                return _state((yield self._scripts.command(1, self._keys(route), args)))
            except redis_errors() as exc:
                self._outage.failed(exc)
        return self._fallback.record(route, outcome, hint, probe)

    def release_steps(self, route: str, probe: bool | None = None) -> Step[None]:
        """Give back a permit whose call has no outcome to record."""
        if self._outage.up():
            try:
                yield self._scripts.command(2, self._keys(route)[:1], [_probe_arg(probe)])
                return
            except redis_errors() as exc:
                self._outage.failed(exc)
        self._fallback.release(route, probe)

    acquire, aacquire = entry_points(acquire_steps)
    record, arecord = entry_points(record_steps)
    release, arelease = entry_points(release_steps)

    def end_open_wait_steps(self, route: str) -> Step[None]:
        """A probe of ``route`` succeeded: an open breaker half-opens at the next permit, in
        every process."""
        if self._outage.up():
            try:
                yield self._scripts.command(3, self._keys(route)[:1])
            except redis_errors() as exc:
                self._outage.failed(exc)
        self._fallback.end_open_wait(route)

    end_open_wait = blocking(end_open_wait_steps)

    def state(self, route: str) -> State:
        """The state stored in Redis (``closed`` when it holds none); while Redis cannot be
        reached, the state of this process's local breaker (the one its calls use then)."""
        if self._outage.up():
            try:
                raw = self._store.client.hget(self._keys(route)[0], "s")
                return _state(raw or b"closed")
            except redis_errors() as exc:
                self._outage.failed(exc)
        return self._fallback.state(route)

    def isolate(self, route: str) -> None:
        """Open ``route``'s breaker in every process until :meth:`reset`; the local breaker
        (the one this process's calls use while Redis cannot be reached) too, so while
        Redis is down the route is isolated in this process (a warning says so)."""
        self._fallback.isolate(route)
        self._manually(route, "isolate", self._isolate_in_redis)

    def reset(self, route: str) -> None:
        """Close ``route``'s breaker in every process and forget its window; the local
        breaker too (while Redis is down: in this process only, a warning says so)."""
        self._fallback.reset(route)
        self._manually(route, "reset", lambda keys: self._store.client.delete(*keys))

    def _isolate_in_redis(self, keys: list[str]) -> None:
        state_key, window_key = keys
        pipe = self._store.client.pipeline(transaction=True)
        pipe.delete(window_key)
        pipe.hset(state_key, mapping={"s": "isolated"})
        pipe.persist(state_key)  # isolated means until reset, not until a TTL runs out
        pipe.execute()

    def _manually(self, route: str, what: str, in_redis: Callable[[list[str]], object]) -> None:
        if self._outage.up():
            try:
                in_redis(self._keys(route))
                return
            except redis_errors() as exc:
                self._outage.failed(exc)
        logger.warning(
            "breaker %s: %s applied in this process only (Redis unavailable); other processes "
            "and this one's calls once Redis answers again go by the state in Redis",
            route,
            what,
        )


def _probe_arg(probe: bool | None) -> str:
    """A permit's ``probe`` flag for the scripts: ``"0"`` no probe, ``"1"`` a probe, ``""``
    not known (counted as a probe)."""
    return "" if probe is None else "1" if probe else "0"


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _state(raw: object) -> State:
    return _STATES.get(_text(raw), "closed")


def _permit(reply: Any) -> Permit:
    allowed, state, retry_after = reply[:3]
    seconds = math.inf if _text(retry_after) == "inf" else float(_text(retry_after))
    state_name = _state(state)
    return Permit(
        bool(int(allowed)),
        state_name,
        retry_after=seconds,
        probe=bool(int(allowed)) and state_name == "half_open",
        paused=len(reply) > 3 and bool(int(reply[3])),
    )
