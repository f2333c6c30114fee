"""Retry budgets: retries may add at most a share of a route's traffic.

A budget keeps two exponentially decaying counts per route, requests and retries, with time
constant ``window``. A retry is allowed when, after it, the retries stay within
``ratio * requests + min_per_second * window``. In steady traffic that means: retries per second
at most ``ratio`` times the requests per second, plus ``min_per_second``. A dead provider thus
gets at most about 10 % more calls than the application sends (the default), however many
processes retry, when they share the budget through Redis.

The maths is pure functions, :func:`deposit`, :func:`spend` and :func:`give_back` (a retry
taken and then not made), mirrored line by line by the Redis script.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from .._state.steps import Step, in_place
from ..errors import ConfigurationError

__all__ = [
    "BudgetState",
    "MemoryRetryBudget",
    "RetryBudget",
    "RetryBudgetPolicy",
    "budget_policy",
    "deposit",
    "give_back",
    "spend",
]


@dataclass(frozen=True)
class RetryBudgetPolicy:
    """How much retrying a route's traffic may carry.

    Args:
        ratio: retries allowed per request, on average (0.1: at most 10 % extra calls).
        min_per_second: retries always allowed per second, so low traffic can still retry.
        window: seconds over which requests and retries are counted (the decay constant).
    """

    ratio: float = 0.1
    min_per_second: float = 1.0
    window: float = 10.0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigurationError(f"RetryBudgetPolicy.{name} must be a number")
        if not (0 <= self.ratio < math.inf and 0 <= self.min_per_second < math.inf):
            raise ConfigurationError("ratio and min_per_second must be finite and >= 0")
        if not 0 < self.window < math.inf:
            raise ConfigurationError("window must be a positive number of seconds")


def budget_policy(policy: RetryBudgetPolicy | None) -> RetryBudgetPolicy:
    """``policy`` (the default one for ``None``); a :class:`ConfigurationError` for anything
    else, at once rather than at the first retry."""
    if policy is None:
        return RetryBudgetPolicy()
    if not isinstance(policy, RetryBudgetPolicy):
        raise ConfigurationError(f"a retry budget needs a RetryBudgetPolicy, got {policy!r}")
    return policy


# Decay shaves a hair off exact counts between calls made moments apart; this relative
# tolerance keeps "10 % of 10 requests" at 1 retry rather than 0.
_TOLERANCE = 1e-6
# a route unheard of for this many windows is forgotten (as RedisRetryBudget's key expires)
_FORGET_AFTER_WINDOWS = 10.0


class BudgetState(NamedTuple):
    """Decayed request and retry counts of one route, as of ``at`` (seconds)."""

    requests: float = 0.0
    retries: float = 0.0
    at: float | None = None


def _decayed(state: BudgetState, now: float, window: float) -> tuple[float, float]:
    if state.at is None:
        return state.requests, state.retries
    factor = math.exp(-max(0.0, now - state.at) / window)
    return state.requests * factor, state.retries * factor


def deposit(state: BudgetState, now: float, policy: RetryBudgetPolicy) -> BudgetState:
    """The state after one more request."""
    requests, retries = _decayed(state, now, policy.window)
    return BudgetState(requests + 1.0, retries, now)


def spend(state: BudgetState, now: float, policy: RetryBudgetPolicy) -> tuple[bool, BudgetState]:
    """Whether one more retry fits, and the state after it (unchanged counts if refused)."""
    requests, retries = _decayed(state, now, policy.window)
    limit = policy.ratio * requests + policy.min_per_second * policy.window
    allowed = retries + 1.0 <= limit * (1.0 + _TOLERANCE) + _TOLERANCE
    return allowed, BudgetState(requests, retries + 1.0 if allowed else retries, now)


def give_back(state: BudgetState, now: float, policy: RetryBudgetPolicy) -> BudgetState:
    """The state after a retry taken by :func:`spend` was not made after all."""
    requests, retries = _decayed(state, now, policy.window)
    return BudgetState(requests, max(0.0, retries - 1.0), now)


class RetryBudget(Protocol):
    """Where budgets live: this process, or Redis for the whole fleet. Each operation is
    written once, as steps; the blocking and async entry points are derived from them.
    The SDK's budgets also have ``refund_steps`` (``refund``, ``arefund``): a retry taken,
    then not made; the Guard, :func:`~llmguard_sdk.retry.retry` and
    :func:`~llmguard_sdk.retry.retry_context` give one back through it when a budget has it."""

    policy: RetryBudgetPolicy

    def record_request_steps(self, route: str) -> Step[None]:
        """Count one call sent to ``route`` (once per call, not per attempt)."""
        ...

    def try_spend_steps(self, route: str) -> Step[bool]:
        """Take one retry from ``route``'s budget; False when there is none left."""
        ...

    def record_request(self, route: str) -> None:
        """Blocking :meth:`record_request_steps`."""
        ...

    def try_spend(self, route: str) -> bool:
        """Blocking :meth:`try_spend_steps`."""
        ...

    async def arecord_request(self, route: str) -> None:
        """Async twin of :meth:`record_request`."""
        ...

    async def atry_spend(self, route: str) -> bool:
        """Async twin of :meth:`try_spend`."""
        ...


class MemoryRetryBudget:
    """Budgets of this process, one per route; ``clock`` is injectable for tests.

    A route unheard of for ten windows is forgotten (its counts have decayed to a few
    hundred-thousandths of what they were), as Redis expires a
    :class:`~llmguard_sdk.retry.redis.RedisRetryBudget`'s key: budgets keyed per tenant or
    per user keep only the routes of the last ten windows. Each call drops the routes that
    went idle since the last one, oldest first, without looking at the others.
    """

    def __init__(
        self,
        policy: RetryBudgetPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = budget_policy(policy)
        if not callable(clock):
            raise ConfigurationError(f"clock: a callable returning seconds, got {clock!r}")
        self._clock = clock
        self._lock = threading.Lock()
        # least recently touched first, so the idle ones are found at the front
        self._states: OrderedDict[str, BudgetState] = OrderedDict()
        self._idle_s = self.policy.window * _FORGET_AFTER_WINDOWS

    def record_request(self, route: str) -> None:
        """Count one call sent to ``route``."""
        with self._lock:
            now = self._clock()
            self._keep(route, deposit(self._current(route, now), now, self.policy))

    def try_spend(self, route: str) -> bool:
        """Take one retry from ``route``'s budget; False when there is none left."""
        with self._lock:
            now = self._clock()
            allowed, state = spend(self._current(route, now), now, self.policy)
            self._keep(route, state)
            return allowed

    def refund(self, route: str) -> None:
        """Give back a retry taken from ``route``'s budget that was not made after all."""
        with self._lock:
            now = self._clock()
            self._keep(route, give_back(self._current(route, now), now, self.policy))

    record_request_steps, arecord_request = in_place(record_request)
    try_spend_steps, atry_spend = in_place(try_spend)
    refund_steps, arefund = in_place(refund)

    def state(self, route: str) -> BudgetState:
        """The current counts of ``route`` (for inspection)."""
        with self._lock:
            return self._current(route, self._clock())

    def _current(self, route: str, now: float) -> BudgetState:
        """``route``'s state, once the routes idle for ten windows are forgotten."""
        states = self._states
        while states:
            oldest, state = next(iter(states.items()))
            if state.at is not None and now - state.at < self._idle_s:
                break
            del states[oldest]
        return states.get(route, BudgetState())

    def _keep(self, route: str, state: BudgetState) -> None:
        self._states[route] = state
        self._states.move_to_end(route)
