"""Reserving a call's worst case before its route loop, and what a refusal does.

A call's worst case on the routes it may take is held on every counter it touches in one
atomic step. A budget without room for it decides by its ``on_exhausted``
(:data:`~llmguard_sdk.budget.ExhaustionPolicy`): the call is refused, or asks again at the
next level of routes (:data:`~._routes.Level`: the ``downgrade_to`` routes, or the local
ones only). Written once, as a generator of backend steps, driven sync or async by
:class:`~.control.SpendControl`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from .._ids import UniqueIds
from .._state import steps as store_steps
from ..context import CallContext
from ..errors import BudgetExceededError, BudgetUnavailableError
from ..models import ChatRequest
from ..providers.base import Provider
from ._budgets import Budgets
from ._routes import Level, route_tier, tier_routes
from .memory import MemoryBudgetBackend
from .policy import NANO, BudgetEvent, CounterSpec, ReserveResult

if TYPE_CHECKING:
    from .._core.stages import Stages
    from .control import SpendControl

__all__ = [
    "Held",
    "by_priority",
    "counted_locally",
    "level_routes",
    "moved_to",
    "next_level",
    "refused",
    "reserve_steps",
    "unavailable",
    "with_output_limit",
]

_RESERVATION_IDS = UniqueIds(random_digits=8)  # 24 hex digits, as os.urandom(12) gave


@dataclass
class Held:
    """One call's reservation: its id, counters, amount held (nano-dollars, top-ups
    included), the stages (routes) the call may use, whether it was settled, the ids of
    its top-ups (:mod:`._topup`: released when it settles), and the request its amount was
    sized for (a request that replaced it, a canary's fallback's, is sized anew)."""

    rid: str
    specs: tuple[CounterSpec, ...]
    amount: int
    stages: Stages
    level: Level = "all"
    done: bool = False
    notes: list[BudgetEvent] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    request: ChatRequest | None = None


def reserve_steps(
    spend: SpendControl,
    ctx: CallContext,
    stages: Stages,
    notes: list[BudgetEvent],
    asked: list[Held] | None = None,
) -> store_steps.Step[Held]:
    """The reservation logic; events to emit are appended to ``notes`` (the caller emits
    them, also when this raises), the hold to ``asked`` before it goes out."""
    rid = _RESERVATION_IDS.next()
    specs = spend.scopes.of_call(ctx)
    stages = by_priority(ctx, stages)
    if not specs:
        return Held(rid, (), 0, stages)
    config = spend.config
    spend.prepare(ctx)
    want = spend.held_output(ctx.request)
    level: Level = "all"
    ttl = max(0.0, ctx.remaining()) + config.hold_seconds
    if asked is not None:  # its amount unknown until the answer: settled to nothing
        asked.append(Held(rid, specs, 0, stages))
    while True:
        routes = level_routes(spend, stages.routes, level)
        base, per = spend.route_price_args(ctx, tier_routes(ctx, routes, level))
        chosen = stages if level == "all" else dataclasses.replace(stages, routes=routes)
        if base == 0 and per == 0:  # free routes: nothing to hold
            return Held(rid, (), 0, chosen, level, notes=notes)
        minimum = min(config.min_output_tokens, want) if config.clamp_max_tokens else want
        hold: dict[str, Any] = {
            "rid": rid,
            "specs": specs,
            "base": base,
            "per_token": per,
            "want": want,
            "minimum": minimum,
            "ttl": ttl,
        }
        result: ReserveResult
        if type(spend.backend) is MemoryBudgetBackend:  # its steps only run it: run it here
            result = spend.backend.reserve(**hold)
        else:
            result = yield from spend.backend.reserve_steps(**hold)
        counted_locally(config, result, notes)
        if result.allowed:
            if result.tokens < want:
                ctx.request = with_output_limit(ctx.request, result.tokens)
            return Held(rid, specs, result.amount, chosen, level, notes=notes, request=ctx.request)
        if result.unavailable:
            unavailable(config, specs, result, notes)
        spec = specs[result.refused_index]
        open_routes = moved_to(spend, spec, level, stages.routes)
        least = base + minimum * per  # (more than the whole limit never fits)
        level = refused(config, spec, result, level if open_routes else "local", notes, least)


def counted_locally(config: Budgets, result: ReserveResult, notes: list[BudgetEvent]) -> None:
    """Note a reservation counted in this process's memory, Redis away (``fail_open``),
    when it is the outage's first (:attr:`ReserveResult.first_local`): from now until Redis
    answers, the budgets are not enforced across the fleet, and ``on_event`` is told so
    once."""
    if result.first_local:
        notes.append(BudgetEvent("unavailable", config.name, "*", action="counted_locally"))


def unavailable(
    config: Budgets, specs: Sequence[CounterSpec], result: ReserveResult, notes: list[BudgetEvent]
) -> NoReturn:
    """The backend could not be reached: note it and raise
    :class:`BudgetUnavailableError` (saying why: :attr:`ReserveResult.detail`)."""
    notes.append(BudgetEvent("unavailable", config.name, "*", action="refused"))
    raise BudgetUnavailableError(
        result.detail
        or "spend budgets are unavailable (Redis cannot be reached); budgeted calls "
        "are refused until it answers (Budgets(fail_open=True) counts per process)",
        scope="*",
        limit_usd=specs[0].limit / NANO,
        spent_usd=math.nan,
        retry_after=result.retry_after,
    )


def refused(
    config: Budgets,
    spec: CounterSpec,
    result: ReserveResult,
    level: Level,
    notes: list[BudgetEvent],
    least: float = 0.0,
) -> Level:
    """A budget had no room: note it, and the level to try next (a downgrade, local
    routes only); raises :class:`BudgetExceededError` when the budget refuses (at
    ``level="local"`` it always does): a call that needs ``least`` (nano-dollars, at the
    least) over the whole limit is told so, with no ``retry_after`` (the window's reset
    makes no room for it); another waits for the reset, or, where holds of calls in flight
    take the room (:attr:`ReserveResult.frees_at`), for the first of them to expire at the
    latest."""
    budget = config.budgets[spec.budget_index]
    following = next_level(level, budget.on_exhausted)
    note = BudgetEvent(
        "exhausted",
        budget.key_name,
        spec.scope,
        limit_usd=spec.limit / NANO,
        spent_usd=result.spent / NANO,
        resets_at=result.resets_at,
        action={"downgrade": "downgraded", "local": "local_only", None: "refused"}[following],
        tenant=spec.tenant,
    )
    if result.alerted:
        notes.append(dataclasses.replace(note, kind="alert", threshold=1.0, action=None))
    notes.append(note)
    if following is None:
        held = (result.reserved / NANO) if result.reserved else 0.0
        message = (
            f"budget {budget.key_name!r} of {spec.scope} has no room for this call: "
            f"${result.spent / NANO:.6f} spent of ${spec.limit / NANO:.6f}"
            + (f" (and ${held:.6f} held by calls in flight)" if held else "")
            + (f" ({result.detail})" if result.detail else "")
        )
        never = least > spec.limit
        if never:
            message = _never_fits(config, budget.key_name, spec, least)
        # room comes back at the reset, or (calls in flight hold it) as their holds go
        frees = min(result.frees_at or result.resets_at, result.resets_at)
        raise BudgetExceededError(
            message,
            scope=spec.scope,
            limit_usd=spec.limit / NANO,
            spent_usd=result.spent / NANO,
            resets_at=result.resets_at,
            retry_after=None if never else max(0.0, frees - time.time()),
            budget=budget.key_name,
            tenant=spec.tenant,
        )
    return following


def _never_fits(config: Budgets, name: str, spec: CounterSpec, least: float) -> str:
    """Why a call that needs ``least`` never fits the budget of ``spec``, and what to do."""
    return (
        f"budget {name!r} of {spec.scope} has no room for this call, nor ever will: its "
        f"worst case ${least / NANO:.6f} is over the whole limit of ${spec.limit / NANO:.6f} "
        f"(lower max_tokens, which a call without one gets as Budgets(default_output_tokens="
        f"{config.default_output_tokens}), or the prompt; or Budgets(clamp_max_tokens=True))"
    )


def with_output_limit(request: ChatRequest, tokens: int) -> ChatRequest:
    """``request`` with its output limit set to ``tokens``, under the name it has; where it
    has both ``max_tokens`` and ``max_completion_tokens``, each becomes at most ``tokens``
    (the larger ``tokens``: :attr:`~ChatRequest.most_output` is then ``tokens``)."""
    asked, newer = request.max_tokens, request.max_completion_tokens
    if asked is None or newer is None:
        name = "max_tokens" if newer is None else "max_completion_tokens"
        return request.model_copy(update={name: tokens})
    larger, smaller = (
        ("max_tokens", "max_completion_tokens")
        if asked >= newer
        else ("max_completion_tokens", "max_tokens")
    )
    return request.model_copy(update={larger: tokens, smaller: min(asked, newer, tokens)})


def by_priority(ctx: CallContext, stages: Stages) -> Stages:
    """Batch routes (a :class:`~llmguard_sdk.providers.batch.BatchProvider`: routes whose
    ``service_tier`` is ``"batch"``) serve the calls with ``priority="batch"``, and only
    those: a batch call goes to them when the chain has any, other calls never do."""
    batch = [route for route in stages.routes if route_tier(route) == "batch"]
    if not batch:
        return stages
    wanted = batch if ctx.priority == "batch" else [r for r in stages.routes if r not in batch]
    return dataclasses.replace(stages, routes=tuple(wanted)) if wanted else stages


def level_routes(
    spend: SpendControl, routes: Sequence[Provider], level: Level
) -> tuple[Provider, ...]:
    """The ones of ``routes`` a call at ``level`` may take, in their order."""
    if level == "all":
        return tuple(routes)
    wanted = set(spend.config.downgrade_to) if level == "downgrade" else spend.local
    return tuple(route for route in routes if route.name in wanted)


def moved_to(
    spend: SpendControl, spec: CounterSpec, level: Level, routes: Sequence[Provider]
) -> tuple[Provider, ...]:
    """The ones of ``routes`` that the budget of ``spec``, without room for a call at
    ``level``, sends it to; none: the budget refuses it (its ``on_exhausted`` says so, or
    none of ``routes`` is a route it would send the call to: a batch call's routes are
    its batch routes only, another call's never are)."""
    budget = spend.config.budgets[spec.budget_index]
    following = next_level(level, budget.on_exhausted)
    return () if following is None else level_routes(spend, routes, following)


def next_level(level: Level, policy: str) -> Level | None:
    """Where a call at ``level`` goes when a budget whose ``on_exhausted`` is ``policy`` has
    no room for it: the ``downgrade_to`` routes, the local ones, or nowhere (None)."""
    if policy == "downgrade" and level == "all":
        return "downgrade"
    if policy == "local_only" and level != "local":
        return "local"
    return None
