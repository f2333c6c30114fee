"""What ends a call other than a provider's failure: the SDK's refusals, a spent retry, a
release moved by hand, every route failed (see :mod:`llmguard_sdk.errors`, which exports
them)."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping

from ._base import LLMGuardError
from ._provider import ProviderError

__all__ = [
    "AllRoutesFailedError",
    "BudgetExceededError",
    "BudgetUnavailableError",
    "CanaryNotFoundError",
    "CircuitOpenError",
    "RateLimitExceededError",
    "RefusedError",
    "RejectedResultError",
    "ReleaseConflictError",
    "StoreUnavailableError",
]


def _said(action: str) -> str:
    """A canary's move in words: ``roll back`` (the verb) for ``rollback`` (the noun)."""
    return "roll back" if action == "rollback" else action


class ReleaseConflictError(LLMGuardError, RuntimeError):
    """A canary's promote or rollback by hand lost every race with other processes moving
    the same canary (each read was stale by the time of the move); nothing was changed.
    ``key`` names the canary, ``action`` the move, ``attempts`` how many were made. Try
    again (a RuntimeError too, for code written before it had a type of its own).

    .. versionadded:: 0.2.0
    """

    def __init__(self, key: str, action: str, *, attempts: int) -> None:
        super().__init__(
            f"could not {_said(action)} the canary under {key!r}: other processes moved it "
            f"{attempts} times between each read and this move; try again"
        )
        self.key = key
        self.action = action
        self.attempts = attempts


class CanaryNotFoundError(LLMGuardError, LookupError):
    """A canary's promote or rollback by hand found no canary under way under ``key``: none
    was stored, or it was forgotten (its Redis keys expired, or its memory backend's
    deadline passed: 30 days after its Guards' last exchange or the last move). Nothing was
    changed; a Guard serving the candidate starts its canary again at its next exchange.
    ``key`` names the canary, ``action`` the move. A LookupError too, for code written
    before it had a type of its own.

    .. versionadded:: 0.2.0
    """

    def __init__(self, key: str, action: str) -> None:
        super().__init__(
            f"could not {_said(action)} the canary under {key!r}: no canary is under way there "
            "(none was stored, or it expired: 30 days after its Guards' last exchange or "
            "the last move); nothing was moved"
        )
        self.key = key
        self.action = action


class StoreUnavailableError(LLMGuardError):
    """An operation that only the shared store (Redis) can carry out could not reach it, so
    it did not happen there (say :meth:`ResponseCache.clear
    <llmguard_sdk.cache.ResponseCache.clear>`: the entries other processes share are still
    there; ``guard.releases.rollback()``: the canary was not moved). Calls never raise it:
    while Redis is away they decide locally instead.

    .. versionadded:: 0.2.0
    """


class RejectedResultError(LLMGuardError):
    """A retry loop stopped on a result that its ``on_result=`` predicate asked to retry
    (:func:`~llmguard_sdk.retry.retry`; tenacity's ``RetryError``): the caller never gets
    it as if it were good. ``result`` is that attempt's result, ``attempts`` the attempts
    made, ``reason`` why the retries stopped (``"attempts-exhausted"``, ``"deadline"``,
    ``"budget-exhausted"`` ...). A retry hook's ``cause`` for a result that is retried is
    one too, its ``reason`` ``"retry"``.

    .. versionadded:: 0.2.0
    """

    def __init__(self, result: object, *, attempts: int, reason: str) -> None:
        shown = reprlib.repr(result)
        if reason == "retry":
            message = f"attempt {attempts}'s result is retried (on_result= asked for it): {shown}"
        else:
            message = (
                f"the retries stopped ({reason}) after {attempts} attempt(s) on a result that "
                f"on_result= asked to retry: {shown}"
            )
        super().__init__(message)
        self.result = result
        self.attempts = attempts
        self.reason = reason


class RefusedError(LLMGuardError):
    """The SDK itself refused to send the call; ``retry_after`` says when to try again."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CircuitOpenError(RefusedError):
    """The route's circuit breaker refused the call without sending it.

    ``state`` is ``"open"`` (``retry_after`` says when a probe may go), ``"half_open"`` (every
    probe permit is taken) or ``"isolated"`` (opened by hand until reset).
    """

    def __init__(self, route: str, state: str, *, retry_after: float | None = None) -> None:
        when = f"; next probe in {retry_after:.1f} s" if retry_after else ""
        super().__init__(f"circuit {state} for route {route!r}{when}", retry_after=retry_after)
        self.route = route
        self.state = state


class RateLimitExceededError(RefusedError):
    """No rate-limit capacity was available within the call's allowed wait.

    ``key``: the route whose limits refused the call; ``reason``: why, ``"rate"`` (no room
    within the wait), ``"never"`` (the call is larger than the limit allows at once:
    ``retry_after`` is None), ``"concurrency"`` (every slot taken), ``"queue"`` (the wait
    queue is full), or ``""`` (not said); ``tenant``: the refused call's tenant (None: none).

    .. versionchanged:: 0.2.0 ``reason`` and ``tenant``.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str = "",
        retry_after: float | None = None,
        reason: str = "",
        tenant: str | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.key = key
        self.reason = reason
        self.tenant = tenant


class BudgetExceededError(RefusedError):
    """A spend budget has no room for this call.

    ``budget``: the name of the budget that refused (read-only; ``Budget.key_name``, as its
    ``BudgetEvent.budget`` says: ``name=``, else one made of scope, id and window, such as
    ``"tenant.each.day"``), so that two budgets on one scope (a daily and a monthly cap) are
    told apart; ``None`` where no one budget refused (:class:`BudgetUnavailableError`).
    ``scope``: the counter refused (``"tenant:acme"``); ``limit_usd``, ``spent_usd``: its
    limit and settled spend; ``resets_at``: its window's reset (epoch seconds);
    ``retry_after``: when room may come back (``None``: the call never fits); ``tenant``:
    the tenant of a user's budget (``scope`` ``"user:u1"``), else ``None``.

    .. versionchanged:: 0.2.0 ``budget``, ``tenant``.
    """

    def __init__(
        self,
        message: str,
        *,
        scope: str,
        limit_usd: float,
        spent_usd: float,
        resets_at: float | None = None,
        retry_after: float | None = None,
        budget: str | None = None,
        tenant: str | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.scope = scope
        self.tenant = tenant
        self.limit_usd = limit_usd
        self.spent_usd = spent_usd
        self.resets_at = resets_at
        self._budget = budget

    @property
    def budget(self) -> str | None:
        """The name of the budget that refused (``None``: none did, the store was away)."""
        return self._budget


class BudgetUnavailableError(BudgetExceededError):
    """The shared budget store (Redis) could not be reached and the budgets fail closed.

    ``spent_usd`` is NaN (unknown); ``retry_after`` is when Redis is tried again.

    .. versionadded:: 0.2.0
    """


class AllRoutesFailedError(LLMGuardError):
    """Every route of the fallback chain failed; ``errors`` maps each route to its error.

    The message names each route's error with the first line of its first note (PEP 678:
    why it was not retried, why the call moved on ...), and the last route's error is its
    ``__cause__``, so a traceback shows that error, its notes and its own traceback.

    .. versionchanged:: 0.2.0 the notes' first lines in the message; the ``__cause__``.
    """

    def __init__(self, errors: Mapping[str, BaseException]) -> None:
        self.errors: dict[str, BaseException] = dict(errors)
        summary = "; ".join(f"{route}: {_told(e)}" for route, e in self.errors.items())
        super().__init__(f"all routes failed ({summary})")
        if self.errors:  # (raise ... from ... would replace it: nothing raises it so)
            self.__cause__ = list(self.errors.values())[-1]

    @property
    def retry_after(self) -> float | None:
        """The smallest ``retry_after`` any route asked for, if any did."""
        hints = [
            e.retry_after
            for e in self.errors.values()
            if isinstance(e, (ProviderError, RefusedError)) and e.retry_after is not None
        ]
        return min(hints) if hints else None


def _told(error: BaseException) -> str:
    """``error`` in a line of its own: its class, its message, its first note's first line."""
    notes = getattr(error, "__notes__", None)
    first = str(notes[0]).strip().splitlines() if isinstance(notes, list) and notes else []
    note = f" [{first[0]}]" if first else ""
    return f"{type(error).__name__}: {error}{note}"
