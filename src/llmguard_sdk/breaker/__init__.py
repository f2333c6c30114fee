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
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, cast

import anyio

from .._state.steps import Step, arun, blocking, entry_points
from ..classify import classify_exception
from ..errors import ConfigurationError, ProviderError, RateLimitedError
from ._guarded import acall_through, call_through, check_callable
from ._protecting import protecting
from .memory import MemoryBreakerBackend, forget_after, idle_oldest
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

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


class BreakerBackend(Protocol):
    """Where breaker state lives (this process or Redis); both keep the same contract. Each
    operation is written once, as steps; the blocking and async entry points are derived
    from them (:func:`~llmguard_sdk._state.steps.blocking`, ``in_place`` ...)."""

    policy: BreakerPolicy

    def acquire_steps(self, route: str) -> Step[Permit]:
        """A permit for one call."""
        ...

    def record_steps(
        self, route: str, outcome: Outcome, hint: float | None = None, probe: bool | None = None
    ) -> Step[State]:
        """Record an outcome (``probe``: whether the call's permit was a half-open probe,
        ``None`` when not known); the state afterwards."""
        ...

    def release_steps(self, route: str, probe: bool | None = None) -> Step[None]:
        """Give back a permit whose call has no outcome."""
        ...

    def acquire(self, route: str) -> Permit:
        """Blocking :meth:`acquire_steps`."""
        ...

    def record(
        self, route: str, outcome: Outcome, hint: float | None = None, probe: bool | None = None
    ) -> State:
        """Blocking :meth:`record_steps`."""
        ...

    def release(self, route: str, probe: bool | None = None) -> None:
        """Blocking :meth:`release_steps`."""
        ...

    async def aacquire(self, route: str) -> Permit:
        """Async twin of :meth:`acquire`."""
        ...

    async def arecord(
        self, route: str, outcome: Outcome, hint: float | None = None, probe: bool | None = None
    ) -> State:
        """Async twin of :meth:`record`."""
        ...

    async def arelease(self, route: str, probe: bool | None = None) -> None:
        """Async twin of :meth:`release`."""
        ...

    def state(self, route: str) -> State:
        """The current state."""
        ...

    def isolate(self, route: str) -> None:
        """Open until reset."""
        ...

    def end_open_wait(self, route: str) -> None:
        """A probe succeeded: an open breaker half-opens at the next permit."""
        ...

    def reset(self, route: str) -> None:
        """Close and forget."""
        ...


_BACKEND_METHODS = (
    "acquire_steps",
    "record_steps",
    "release_steps",
    "state",
    "isolate",
    "end_open_wait",
    "reset",
)


@dataclass(frozen=True)
class BreakerTransition:
    """A breaker changed state, as this process saw it (``before`` -> ``after``)."""

    route: str
    before: State
    after: State


BreakerHook = Callable[[BreakerTransition], None]
"""Receives every :class:`BreakerTransition`."""


class Breakers:
    """The breakers of a Guard's routes, one per route name; ``guard.breakers`` for manual
    control. On their own, around any call (pybreaker's ``@breaker`` and ``breaker.call``):

    ::

        breakers = Breakers(MemoryBreakerBackend(BreakerPolicy(minimum_calls=5)))

        @breakers.protect("openai")
        def ask(question): ...

        breakers.call("openai", client.chat.completions.create, model=..., messages=...)

    State changes made by other processes (through Redis) are reported when this process
    next sees them. A route not seen for as long as the backend keeps an idle one
    (:func:`~llmguard_sdk.breaker.memory.forget_after`), which forgets it (closed), is
    reported closed (``open -> closed``, say) as this process forgets it too: by a later
    call, a few routes a call, or its own (isolated routes are kept until reset); one found
    open again (kept open in Redis by other processes' calls) is then reported
    ``closed -> open``, whichever call forgot it.
    """

    def __init__(self, backend: BreakerBackend, hooks: Sequence[BreakerHook] = ()) -> None:
        missing = [name for name in _BACKEND_METHODS if not callable(getattr(backend, name, None))]
        if missing or not isinstance(getattr(backend, "policy", None), BreakerPolicy):
            raise ConfigurationError(
                "Breakers needs a breaker backend (MemoryBreakerBackend(policy) or "
                f"RedisBreakerBackend(store, policy)), got {backend!r}"
            )
        self.backend = backend
        self.hooks = tuple(hooks) if isinstance(hooks, Iterable) else (hooks,)
        if not all(callable(hook) for hook in self.hooks):
            raise ConfigurationError(f"breaker hooks must be callables, got {hooks!r}")
        self._lock = threading.Lock()
        # the state each route was last seen in, other than closed, and when: least recently
        # seen first; forgotten as the backend forgets an idle route (isolated: until reset)
        self._seen: OrderedDict[str, tuple[State, float]] = OrderedDict()
        self._clock = _clock_of(backend)
        self._idle_s = float(forget_after(backend.policy))
        self._prune_at = 0.0  # when the least recently seen entry expires

    @property
    def policy(self) -> BreakerPolicy:
        """The breakers' policy."""
        return self.backend.policy

    def permit_steps(self, route: str) -> Step[Permit]:
        """May a call go to ``route`` now?"""
        permit: Permit = yield from self.backend.acquire_steps(_named(route))
        self._saw(route, permit.state)
        return permit

    def record_steps(
        self,
        route: str,
        error: BaseException | None,
        *,
        seconds: float,
        probe: bool | None = None,
    ) -> Step[None]:
        """Record how a call to ``route`` went; a client error only gives its permit back.
        ``probe``: whether the call's permit was a half-open probe (:attr:`Permit.probe`);
        a call let through before the breaker opened (``False``) that ends while it is
        half-open neither closes nor reopens it, nor frees a probe permit. ``None``: not
        known (counted as a probe). ``error`` may be a provider SDK's own (openai's, httpx's
        ...): it counts as the SDK classifies it; one that is no provider failure (a bug in
        the caller's code) only gives the permit back.

        .. versionchanged:: 0.2.0 provider SDKs' errors are classified, not ignored."""
        outcome, hint = self._judged(route, error, seconds)
        if outcome is None:
            yield from self.backend.release_steps(route, probe)
        else:
            state = yield from self.backend.record_steps(route, outcome, hint, probe)
            self._saw(route, state)

    def recorded_here(
        self, route: str, error: BaseException | None, *, seconds: float, probe: bool | None
    ) -> bool:
        """:meth:`record` at once, with no steps, where the breakers' state is this
        process's (a :class:`MemoryBreakerBackend`: a Guard's default): True; False, with
        nothing done, where it needs :meth:`record_steps` (a round trip)."""
        backend = self.backend
        if type(backend) is not MemoryBreakerBackend:
            return False
        outcome, hint = self._judged(route, error, seconds)
        if outcome is None:
            backend.release(route, probe)
        else:
            self._saw(route, backend.record(route, outcome, hint, probe))
        return True

    def _judged(
        self, route: str, error: BaseException | None, seconds: float
    ) -> tuple[Outcome | None, float | None]:
        """What a call to ``route`` that ended with ``error`` after ``seconds`` counts as
        (``None``: nothing, its permit is given back), and its Retry-After hint."""
        _named(route)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ConfigurationError(f"seconds must be a number, got {seconds!r}")
        if error is not None and not isinstance(error, ProviderError):
            error = classify_exception(error, route=route) or error
        return outcome_of(error, seconds=seconds, policy=self.policy), _hint(error)

    def release_steps(self, route: str, probe: bool | None = None) -> Step[None]:
        """Give back a permit whose call ended with no outcome (cancelled, abandoned);
        ``probe`` as in :meth:`record_steps`."""
        return self.backend.release_steps(_named(route), probe)

    permit, apermit = entry_points(permit_steps)
    record, arecord = entry_points(record_steps)
    release = blocking(release_steps)

    async def arelease(self, route: str, probe: bool | None = None) -> None:
        """Async twin of :meth:`release`; runs even inside a cancelled scope."""
        with anyio.CancelScope(shield=True):
            await arun(self.release_steps(route, probe))

    def protect(self, route: str) -> Callable[[F], F]:
        """Decorate a function so that each of its calls goes through ``route``'s breaker.

        A sync or async function or method keeps its signature (above ``@staticmethod`` or
        ``@classmethod`` too; a plain function that returns a coroutine, such as
        ``AsyncOpenAI().chat.completions.create``, is awaited). Each call asks for a permit:
        a breaker that refuses raises :class:`~llmguard_sdk.errors.CircuitOpenError`
        (``retry_after``: when a probe may go) without calling the function. Its outcome is
        recorded as :meth:`record` classifies it: a provider failure (the SDK's, openai's,
        httpx's ...: 5xx, timeouts, connection errors) counts, a 429 pauses the route for its
        Retry-After, a success slower than ``slow_call_seconds`` is slow; anything else (a
        4xx, a bug of the caller's such as a ``ValueError``) only gives the permit back, as a
        cancelled or interrupted call does. Exceptions propagate unchanged. ``@retry`` above
        it retries: each attempt asks the breaker, and a refusal is not retried.

        A generator function, sync or async, is watched while it is read (as ``@retry`` and
        ``@guard.protect`` wrap one): the permit is asked when the first item is, before the
        function runs (a refusal raises there); the outcome is recorded when the generator
        ends: read to its end, a success (slow when its first item came after
        ``slow_call_seconds``); failed, as above; closed early by its consumer (or
        cancelled), no outcome: its permit is given back.

        .. versionadded:: 0.2.0

        .. versionchanged:: 0.2.0 generator functions, sync and async (they were refused).
        """
        return protecting(self, _named(route))

    def call(self, route: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` through ``route``'s breaker, as :meth:`protect` runs each
        call. An async ``fn`` is refused (:class:`~llmguard_sdk.errors.ConfigurationError`):
        await :meth:`acall`; so is a generator function (its call returns it unread):
        decorate it with :meth:`protect`, which watches it while it is read.

        .. versionadded:: 0.2.0
        """
        check_callable(fn, _named(route), "call", waits=False)
        return cast(R, call_through(self, route, fn, args, kwargs))

    async def acall(
        self, route: str, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """Async :meth:`call`: ``await fn(*args, **kwargs)`` through ``route``'s breaker; a
        cancelled call gives its permit back.

        .. versionadded:: 0.2.0
        """
        check_callable(fn, _named(route), "acall")
        return cast(R, await acall_through(self, route, fn, args, kwargs))

    def state(self, route: str) -> State:
        """The breaker state of ``route``."""
        state = self.backend.state(_named(route))
        self._saw(route, state)
        return state

    def probe_passed(self, route: str) -> None:
        """A background probe of ``route`` succeeded: if its breaker is open, the next call
        half-opens it (every process, with Redis) instead of waiting out the open duration."""
        self.backend.end_open_wait(_named(route))
        logger.info("breaker %s: a probe succeeded; the next call half-opens it", route)

    def isolate(self, route: str) -> None:
        """Take ``route`` out of service (every process, with Redis) until :meth:`reset`."""
        self.backend.isolate(_named(route))
        self._saw(route, "isolated")

    def reset(self, route: str) -> None:
        """Force ``route``'s breaker closed, forgetting its history."""
        self.backend.reset(_named(route))
        self._saw(route, "closed")

    def last_seen(self, route: str) -> State:
        """The state this process last saw ``route``'s breaker in (no I/O); ``closed`` once
        it was last seen longer ago than the backend keeps an idle route
        (:func:`~llmguard_sdk.breaker.memory.forget_after`: Redis expires its keys, the
        memory backend forgets it), isolated excepted (until reset).

        .. versionchanged:: 0.2.0 a route last seen open is forgotten with the backend's
           (and reported closed to the hooks)."""
        seen = self._seen.get(route)  # one dict read: atomic, no lock needed
        if seen is None or self._expired(seen, self._clock()):
            return "closed"
        return seen[0]

    def _expired(self, seen: tuple[State, float], now: float) -> bool:
        return seen[0] != "isolated" and now - seen[1] >= self._idle_s

    def _saw(self, route: str, state: State) -> None:
        seen = self._seen
        if not seen and state == "closed":
            return  # nothing seen other than closed (nearly every call): no clock, no lock
        now = self._clock()
        last = seen.get(route)
        if last is None and state == "closed" and now < self._prune_at:
            return  # no change, nothing to forget yet: no lock taken
        if last is not None and last[0] == state and now - last[1] < self._idle_s / 2:
            return  # no change, seen lately: no lock taken
        with self._lock:
            changes = self._forget_idle(now)
            last = seen.pop(route, None)
            if last is not None and self._expired(last, now):  # idle: forgotten here now
                changes.append(BreakerTransition(route, last[0], "closed"))  # (as a call
                last = None  # that forgot it first reported it: last_seen said closed)
            before = "closed" if last is None else last[0]  # (as the hooks were last told)
            if state != "closed":  # the default: routes seen closed keep no entry
                if not seen:
                    self._prune_at = now + self._idle_s
                seen[route] = (state, now)
        if before != state:
            changes.append(BreakerTransition(route, before, state))
        for change in changes:
            self._report(change)

    def _report(self, transition: BreakerTransition) -> None:
        """Log ``transition`` and hand it to each hook (one that fails is logged)."""
        logger.info("breaker %s: %s -> %s", transition.route, transition.before, transition.after)
        for hook in self.hooks:
            try:
                hook(transition)
            except Exception:
                logger.exception("breaker hook %r failed", hook)

    def _forget_idle(self, now: float) -> list[BreakerTransition]:
        """Forget a few of the routes last seen longer ago than the backend keeps an idle
        route (:func:`~llmguard_sdk.breaker.memory.idle_oldest`: the backend has closed them
        by forgetting them); isolated ones are kept. Under the lock; the transitions to
        closed of those forgotten, for the hooks (as :meth:`last_seen` says already)."""
        seen = self._seen
        forgotten: list[BreakerTransition] = []
        for route in idle_oldest(seen, now, self._idle_s, _seen_at):
            state = seen[route][0]
            if state == "isolated":  # until reset
                seen[route] = (state, now)
                seen.move_to_end(route)
            else:
                del seen[route]
                forgotten.append(BreakerTransition(route, state, "closed"))
        self._prune_at = _seen_at(next(iter(seen.values()))) + self._idle_s if seen else 0.0
        return forgotten


def _seen_at(seen: tuple[State, float]) -> float:
    return seen[1]


def _clock_of(backend: BreakerBackend) -> Callable[[], float]:
    """The clock that times ``backend``'s idle routes: a memory backend's own (injected in
    tests), else this process's monotonic clock (shifted by a Redis backend's
    ``clock_offset``, as its scripts' clock is)."""
    if isinstance(backend, MemoryBreakerBackend):
        return backend._clock
    if isinstance(backend, RedisBreakerBackend):
        return lambda: time.monotonic() + backend.clock_offset
    return time.monotonic


def _named(route: str) -> str:
    """``route``, a route's name (a number or None was taken in memory and raised
    AttributeError with Redis)."""
    if not isinstance(route, str) or not route:
        raise ConfigurationError(f"a breaker's route is a route name, got {route!r}")
    return route


def _hint(error: BaseException | None) -> float | None:
    if isinstance(error, RateLimitedError) and isinstance(error, ProviderError):
        return error.retry_after
    return None
