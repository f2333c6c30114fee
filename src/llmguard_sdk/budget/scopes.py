"""Whose budgets a call is counted by: the counters of a scope (tenant, feature, user, tags),
and how a counter's state is shown.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from .._state.recent import Recent
from .._state.stores import hash_id
from ..context import CallContext
from ..errors import RequestValidationError
from .memory import Status
from .policy import NANO, Budget, CounterSpec, nano

__all__ = ["BudgetScope", "CounterStatus", "ScopeCounters", "status_row"]

_RECENT_SCOPES = 4096  # scopes whose counter specs are remembered


class BudgetScope(TypedDict, total=False):
    """Whose budgets: the keywords of :meth:`Guard.budget_status
    <llmguard_sdk.Guard.budget_status>` (each ``None`` or absent: not that scope).

    .. versionadded:: 0.2.0
    """

    tenant: str | None
    feature: str | None
    user: str | None
    tags: Sequence[str] | None


class CounterStatus(TypedDict):
    """One budget counter's state: ``scope`` (``"tenant:acme"``, ``"global"``), ``counter``
    (its key), ``window`` and the time zone of its boundaries (``tz``: ``"UTC"``, or the
    budget's), and in USD its ``limit_usd``, settled ``spent_usd`` and ``held_usd`` (held by
    calls in flight), with ``resets_at`` (epoch seconds) when the window frees room (a
    local day's or month's: at local midnight).

    .. versionadded:: 0.2.0
    """

    scope: str
    counter: str
    window: str
    tz: str
    limit_usd: float
    spent_usd: float
    held_usd: float
    resets_at: float


def status_row(spec: CounterSpec, found: Status) -> CounterStatus:
    """One counter's status as the public API shows it: scope, counter, window and its time
    zone, and in USD its limit, settled spend and amount held, with its reset time (epoch
    seconds)."""
    spent, reserved, resets = found
    return {
        "scope": spec.scope,
        "counter": spec.key,
        "window": spec.window,
        "tz": spec.tz,
        "limit_usd": spec.limit / NANO,
        "spent_usd": spent / NANO,
        "held_usd": reserved / NANO,
        "resets_at": resets,
    }


class ScopeCounters:
    """The counters of each scope under ``budgets``; a call's are remembered for the last
    4,096 scopes seen (a bounded table: the specs are immutable and depend on nothing else).
    """

    def __init__(self, budgets: Sequence[Budget]) -> None:
        self._budgets = tuple(budgets)
        self._recent = Recent(self._of_asked, _RECENT_SCOPES)

    def of(
        self,
        tenant: str | None = None,
        feature: str | None = None,
        user: str | None = None,
        tags: Sequence[str] | str | None = (),
    ) -> tuple[CounterSpec, ...]:
        """The counters a call with this scope and these tags is counted by (``tags``: a
        sequence of tags, or one string of comma-separated tags, as a call's metadata gives
        them); a scope value that is no string is a
        :class:`~llmguard_sdk.errors.RequestValidationError`, as it is for a call.

        A budget with an ``id`` takes the place of the budgets without one of its scope and
        window for that value (a tenant's plan over every tenant's), and a user's counter is
        kept per tenant (tenants name their users themselves)."""
        found: list[CounterSpec] = []
        values = {"tenant": tenant, "feature": feature, "user": user}
        tags = _checked(values, tags)
        own = {
            _window(b) for b in self._budgets if b.id is not None and values.get(b.scope) == b.id
        }
        for index, budget in enumerate(self._budgets):
            if budget.scope == "global":
                value: str | None = ""
            elif budget.scope == "tag":
                value = budget.id if budget.id in tags else None
            else:
                value = values[budget.scope]
                if value != budget.id and (budget.id is not None or _window(budget) in own):
                    value = None
            if value is None:
                continue
            key = budget.key_name if not value else f"{budget.key_name}.{hash_id(value)}"
            if budget.scope == "user" and tenant is not None:
                key = f"{key}.{hash_id(tenant)}"
            found.append(
                CounterSpec(
                    key=key,
                    limit=nano(budget.limit_usd),
                    window=budget.window,
                    rolling_seconds=float(budget.rolling_seconds),
                    alerts=budget.alerts,
                    scope="global" if budget.scope == "global" else f"{budget.scope}:{value}",
                    budget_index=index,
                    tz=budget.tz,
                    tenant=tenant if budget.scope == "user" else None,
                )
            )
        return tuple(found)

    def of_call(self, ctx: CallContext) -> tuple[CounterSpec, ...]:
        """:meth:`of` the call's scope and tags (``metadata["tags"]``, comma-separated)."""
        scope = ctx.scope
        tags = (ctx.request.metadata or {}).get("tags", "")
        return self._recent((scope.tenant, scope.feature, scope.user, tags))

    def _of_asked(
        self, asked: tuple[str | None, str | None, str | None, str]
    ) -> tuple[CounterSpec, ...]:
        tenant, feature, user, tags = asked
        return self.of(tenant, feature, user, [t.strip() for t in tags.split(",") if t.strip()])


def _window(budget: Budget) -> tuple[str, str, float]:
    """A budget's scope and window (a rolling one with its length): a budget with an ``id``
    replaces those without one that share it."""
    seconds = budget.rolling_seconds if budget.window == "rolling" else 0.0
    return budget.scope, budget.window, float(seconds)


def _checked(values: dict[str, str | None], tags: Sequence[str] | str | None) -> Sequence[str]:
    """``tags`` as a sequence of whole tags, once every scope value is a string (or None): a
    number there raised AttributeError deep in the budget stage, and a string of tags matched
    any tag it contains as letters."""
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise RequestValidationError(f"{name} must be a string or None, got {value!r}")
    if tags is None:  # as absent
        return ()
    if isinstance(tags, str):
        return [tag.strip() for tag in tags.split(",") if tag.strip()]
    if not isinstance(tags, Sequence) or not all(isinstance(tag, str) for tag in tags):
        raise RequestValidationError(f"tags must be strings, got {tags!r}")
    return tags
