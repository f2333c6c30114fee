"""Retry budgets shared by every process through Redis: one Lua script per decision.

When Redis cannot be reached, the budget falls back to this process's own
:class:`~llmguard_sdk.retry.budget.MemoryRetryBudget` (so retries stay bounded; its floor is
the store's ``local_share`` of ``min_per_second``) instead of failing the call, and the
store's breaker leaves Redis alone for a while, so a dead or hung Redis costs one socket
timeout per pause, not one per call.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar, TypeVar

from .._state.steps import Step, entry_points
from .._state.stores import Outage, RedisScripts, RedisStore, hash_id, lua, redis_errors
from ..errors import ConfigurationError
from .budget import MemoryRetryBudget, RetryBudgetPolicy, budget_policy

__all__ = ["RedisRetryBudget"]

_SCRIPT = lua(__name__, "budget")
T = TypeVar("T")


class RedisRetryBudget:
    """A :class:`~llmguard_sdk.retry.budget.RetryBudget` whose counts live in Redis.

    Keys: ``{prefix}:rb:{<route hash>}``, one small hash per route, expiring after ten windows
    without traffic. Redis ``TIME`` is the clock, so hosts with skewed clocks agree.
    """

    def __init__(self, store: RedisStore, policy: RetryBudgetPolicy | None = None) -> None:
        if not isinstance(store, RedisStore):
            raise ConfigurationError(
                f"a RedisRetryBudget needs a RedisStore (RedisStore(url)), got {store!r}"
            )
        self.policy = budget_policy(policy)
        self._store = store
        # a spend or a refund runs once per command on a store that re-sends (a retry
        # taken or given back twice); a deposit re-sent counts one request twice, a tenth
        # of a retry: left unmarked
        self._scripts = RedisScripts(store, _SCRIPT, _SCRIPT, _SCRIPT, once=(1, 2))
        self._fallback = MemoryRetryBudget(
            dataclasses.replace(
                self.policy, min_per_second=self.policy.min_per_second * store.local_share
            )
        )
        self._outage = Outage("retry budget", "deciding locally", store)
        # at most 2^31 s: EXPIRE refuses what overflows its clock (a script error reads as
        # Redis down, for every stage of the store)
        self._ttl = int(min(max(1.0, self.policy.window * 10), 2**31 - 1))

    def _key(self, route: str) -> list[str]:
        return [self._store.key("rb", hash_id(route))]

    def _args(self, op: str) -> list[str | float | int]:
        p = self.policy
        return [op, p.ratio, p.min_per_second, p.window, self._ttl]

    # the operations in the script's words, each with its script's number (see __init__)
    _OPS: ClassVar[dict[str, int]] = {"deposit": 0, "spend": 1, "refund": 2}

    def _steps(self, op: str, route: str, local: Callable[[str], T]) -> Step[T | int]:
        """Operation ``op`` on ``route``'s shared counts (its script's answer), or ``local``
        on this process's fallback while Redis cannot be reached."""
        if self._outage.up():
            try:
                answer: int = yield self._scripts.command(
                    self._OPS[op], self._key(route), self._args(op)
                )
                return answer
            except redis_errors() as exc:
                self._outage.failed(exc)
        return local(route)

    def record_request_steps(self, route: str) -> Step[None]:
        """Count one call sent to ``route``."""
        yield from self._steps("deposit", route, self._fallback.record_request)

    def try_spend_steps(self, route: str) -> Step[bool]:
        """Take one retry from ``route``'s shared budget."""
        return bool((yield from self._steps("spend", route, self._fallback.try_spend)))

    def refund_steps(self, route: str) -> Step[None]:
        """Give back a retry taken from ``route``'s shared budget that was not made."""
        yield from self._steps("refund", route, self._fallback.refund)

    record_request, arecord_request = entry_points(record_request_steps)
    try_spend, atry_spend = entry_points(try_spend_steps)
    refund, arefund = entry_points(refund_steps)
