"""Circuit breakers per route: sliding windows, half-open probes, shared through Redis.

:class:`Breakers` is what the Guard uses: one breaker per route over a backend that keeps the
state in this process (:class:`MemoryBreakerBackend`) or in Redis
(:class:`RedisBreakerBackend`), and a hook for every state change. The state machine itself is
pure (:mod:`llmguard_sdk.breaker.policy`).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from .._state.steps import Step, delegate
from ..errors import ProviderError, RateLimitedError
from .memory import MemoryBreakerBackend
from .policy import BreakerPolicy, BreakerState, Outcome, Permit, State, outcome_of
from .redis import RedisBreakerBackend

__all__ = [
    "BreakerBackend",
    "BreakerHook",
    "BreakerPolicy",
    "BreakerState",
    "BreakerTransition",
    "Breakers",
    "MemoryBreakerBackend",
    "Permit",
    "RedisBreakerBackend",
    "State",
]

logger = logging.getLogger("llmguard_sdk")


class BreakerBackend(Protocol):
    """Where breaker state lives (this process or Redis); both keep the same contract."""

    policy: BreakerPolicy

    def acquire(self, route: str) -> Permit:
        """A permit for one call."""
        ...

    def record(self, route: str, outcome: Outcome, hint: float | None = None) -> State:
        """Record an outcome; the state afterwards."""
        ...

    async def aacquire(self, route: str) -> Permit:
        """Async twin of :meth:`acquire`."""
        ...

    def release(self, route: str) -> None:
        """Give back a permit whose call has no outcome."""
        ...

    async def arelease(self, route: str) -> None:
        """Async twin of :meth:`release`."""
        ...

    async def arecord(self, route: str, outcome: Outcome, hint: float | None = None) -> State:
        """Async twin of :meth:`record`."""
        ...

    def state(self, route: str) -> State:
        """The current state."""
        ...

    def isolate(self, route: str) -> None:
        """Open until reset."""
        ...

    def reset(self, route: str) -> None:
        """Close and forget."""
        ...


@dataclass(frozen=True)
class BreakerTransition:
    """A breaker changed state, as this process saw it (``before`` -> ``after``)."""

    route: str
    before: State
    after: State


BreakerHook = Callable[[BreakerTransition], None]
"""Receives every :class:`BreakerTransition`."""


class Breakers:
    """The breakers of a Guard's routes; ``guard.breakers`` for manual control.

    State changes made by other processes (through Redis) are reported when this process
    next sees them.
    """

    def __init__(self, backend: BreakerBackend, hooks: Sequence[BreakerHook] = ()) -> None:
        self.backend = backend
        self.hooks = tuple(hooks)
        self._lock = threading.Lock()
        self._seen: dict[str, State] = {}

    @property
    def policy(self) -> BreakerPolicy:
        """The breakers' policy."""
        return self.backend.policy

    def permit(self, route: str) -> Permit:
        """May a call go to ``route`` now?"""
        permit = self.backend.acquire(route)
        self._saw(route, permit.state)
        return permit

    async def apermit(self, route: str) -> Permit:
        """Async twin of :meth:`permit`."""
        permit = await self.backend.aacquire(route)
        self._saw(route, permit.state)
        return permit

    def record(self, route: str, error: BaseException | None, *, seconds: float) -> None:
        """Record how a call to ``route`` went; a client error only gives its permit back."""
        outcome = outcome_of(error, seconds=seconds, policy=self.policy)
        if outcome is None:
            self.backend.release(route)
        else:
            self._saw(route, self.backend.record(route, outcome, _hint(error)))

    async def arecord(self, route: str, error: BaseException | None, *, seconds: float) -> None:
        """Async twin of :meth:`record`."""
        outcome = outcome_of(error, seconds=seconds, policy=self.policy)
        if outcome is None:
            await self.backend.arelease(route)
        else:
            self._saw(route, await self.backend.arecord(route, outcome, _hint(error)))

    def permit_steps(self, route: str) -> Step[Permit]:
        """:meth:`permit` as a step of a :class:`~llmguard_sdk._state.steps.Batch`."""
        permit: Permit = yield from delegate(self.backend, "acquire", route)
        self._saw(route, permit.state)
        return permit

    def record_steps(
        self, route: str, error: BaseException | None, *, seconds: float
    ) -> Step[None]:
        """:meth:`record` as a step of a :class:`~llmguard_sdk._state.steps.Batch`."""
        outcome = outcome_of(error, seconds=seconds, policy=self.policy)
        if outcome is None:
            yield from delegate(self.backend, "release", route)
        else:
            state: State = yield from delegate(self.backend, "record", route, outcome, _hint(error))
            self._saw(route, state)

    def release_steps(self, route: str) -> Step[None]:
        """:meth:`release` as a step of a :class:`~llmguard_sdk._state.steps.Batch`."""
        yield from delegate(self.backend, "release", route)

    def release(self, route: str) -> None:
        """Give back a permit whose call ended with no outcome (cancelled, abandoned)."""
        self.backend.release(route)

    async def arelease(self, route: str) -> None:
        """Async twin of :meth:`release`; runs even inside a cancelled scope."""
        with anyio.CancelScope(shield=True):
            await self.backend.arelease(route)

    def state(self, route: str) -> State:
        """The breaker state of ``route``."""
        state = self.backend.state(route)
        self._saw(route, state)
        return state

    def isolate(self, route: str) -> None:
        """Take ``route`` out of service (every process, with Redis) until :meth:`reset`."""
        self.backend.isolate(route)
        self._saw(route, "isolated")

    def reset(self, route: str) -> None:
        """Force ``route``'s breaker closed, forgetting its history."""
        self.backend.reset(route)
        self._saw(route, "closed")

    def last_seen(self, route: str) -> State:
        """The state this process last saw ``route``'s breaker in (no I/O)."""
        with self._lock:
            return self._seen.get(route, "closed")

    def _saw(self, route: str, state: State) -> None:
        with self._lock:
            before = self._seen.get(route, "closed")
            self._seen[route] = state
        if before != state:
            transition = BreakerTransition(route, before, state)
            logger.info("breaker %s: %s -> %s", route, before, state)
            for hook in self.hooks:
                try:
                    hook(transition)
                except Exception:
                    logger.exception("breaker hook %r failed", hook)


def _hint(error: BaseException | None) -> float | None:
    if isinstance(error, RateLimitedError) and isinstance(error, ProviderError):
        return error.retry_after
    return None
