"""Task routing and cascades inside a Guard: a call's tier chosen when it starts (its routes
become ``ctx.route_order``), and a cascade's tiers run one after the other.

A cascade is a small plan (:func:`_plan`) that yields the stages each tier's call runs under
and receives its answer or error; :func:`complete` and :func:`acomplete` drive it with the
plain call's sync and async envelopes. A tier below the last runs under stages whose output
filters end in the cascade's checks: a rejected answer raises :class:`_Rejected` inside
``finish``, after its cost was stamped and before the cache could store it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._ids import IDEMPOTENCY_PREFIX
from ..context import CallContext
from ..errors import (
    AllRoutesFailedError,
    CircuitOpenError,
    ConfigurationError,
    GuardrailRejectedError,
    ProviderError,
    RateLimitExceededError,
)
from ..models import INCOMPLETE_FINISH_REASONS, ChatResponse
from ..providers.base import Provider
from ..router import DeploymentGroup
from ..router.cascade import Cascade
from ..router.moves import is_route_failure
from ..router.tasks import TaskRouter
from . import filters
from .routing import members as chain_members
from .stages import (
    DEGRADED,
    OutputFilter,
    Stages,
    check_input_size,
    new_idempotency_key,
)

__all__ = ["TaskChoice", "TaskRouting", "acomplete", "complete", "metric_reason"]

_ESCALATING = (AllRoutesFailedError, CircuitOpenError, RateLimitExceededError)
Attributes = dict[str, str | bool | int | float]
Plan = Generator[Stages, ChatResponse | Exception, ChatResponse]
"""A cascade's plan: yields each tier's stages, receives its answer or error."""

# the reasons a metric's label may name: the SDK's own (a check's custom text is "custom" there,
# and a finish reason of no known kind "finish_reason:other"; the span keeps the text)
_LABELLED = frozenset(
    {"none", "error", "output_filter", "empty", "json_schema", "validator"}
    | {
        f"finish_reason:{kind}"
        for kind in {"content_filter", "stop", "tool_calls", "function_call"}
        | INCOMPLETE_FINISH_REASONS
    }
)


def metric_reason(reason: str) -> str:
    """``reason`` as the label ``llmguard.cascade.reason`` of a metric: one of a fixed set."""
    if reason in _LABELLED:
        return reason
    return "finish_reason:other" if reason.startswith("finish_reason:") else "custom"


@dataclass
class Tried:
    """A tier of a cascade that did not serve the call: why, and what its answer cost."""

    tier: str
    reason: str
    route: str | None = None
    cost_usd: float | None = None


@dataclass
class TaskChoice:
    """A call's tier (or cascade), the routes ranked for it, and the tiers it escalated from."""

    tier: str
    cascade: Cascade | None = None
    cascade_name: str | None = None
    ranked: tuple[Provider, ...] = ()
    tried: list[Tried] = field(default_factory=list)
    bounded: bool = False  # the ranked routes bound every tier's (a release's arm's routes)
    fallback: tuple[Provider, ...] = ()  # ranked routes after the arm's own (a canary's)
    release: str | None = None  # the release the call started on (its arm's)

    def attributes(self) -> Attributes:
        """The call span's attributes (``llmguard.tier``, the cascade's)."""
        found: Attributes = {"llmguard.tier": self.tier}
        if self.cascade_name is not None:
            found["llmguard.cascade"] = self.cascade_name
            found["llmguard.cascade.escalations"] = len(self.tried)
            if self.tried:
                found["llmguard.cascade.reason"] = self.tried[-1].reason
                found["llmguard.cascade.rejected_cost_usd"] = self.rejected_cost()
        return found

    def metric_labels(self) -> Attributes:
        """The labels of the call's point on ``llmguard.cascade.calls`` (the reason as
        :func:`metric_reason` bounds it)."""
        return {
            "llmguard.cascade": self.cascade_name or "",
            "llmguard.tier": self.tier,
            "llmguard.cascade.escalated": bool(self.tried),
            "llmguard.cascade.reason": metric_reason(
                self.tried[-1].reason if self.tried else "none"
            ),
        }

    def events(self) -> list[tuple[str, Attributes]]:
        """One ``llmguard.cascade.escalated`` span event per tier that did not serve."""
        events: list[tuple[str, Attributes]] = []
        for tried in self.tried:
            event: Attributes = {
                "llmguard.tier": tried.tier,
                "llmguard.cascade.reason": tried.reason,
            }
            if tried.route is not None:
                event["llmguard.route"] = tried.route
            if tried.cost_usd is not None:
                event["llmguard.cost_usd"] = tried.cost_usd
            events.append(("llmguard.cascade.escalated", event))
        return events

    def rejected_cost(self) -> float:
        """What the tiers that did not serve cost (their answers' costs, in USD)."""
        return sum(t.cost_usd or 0.0 for t in self.tried)


class TaskRouting:
    """A :class:`~llmguard_sdk.router.TaskRouter` bound to a Guard's chain."""

    def __init__(self, router: TaskRouter, entries: Sequence[Provider | DeploymentGroup]) -> None:
        if not isinstance(router, TaskRouter):
            raise ConfigurationError(f"tasks must be a TaskRouter, got {router!r}")
        self.router = router
        members = chain_members(entries)
        self._tiers: dict[str, tuple[tuple[Provider, ...], ...]] = {}
        for tier, names in router.tiers.items():
            missing = [n for n in names if n not in members]
            if missing:
                raise ConfigurationError(
                    f"tier {tier!r}: no route or group named {missing[0]!r} "
                    f"(the Guard has {sorted(members)})"
                )
            self._tiers[tier] = tuple(members[n] for n in names)

    def assign(self, ctx: CallContext, routes: tuple[Provider, ...]) -> None:
        """Choose the call's tier; its routes (``routes``: the chain ranked for this call)
        become the call's route order."""
        name = self.router.choose(ctx.request, ctx.scope, lambda: ctx.input_tokens().tokens)
        cascade = self.router.cascades.get(name)
        tier = cascade.tiers[0] if cascade is not None else name
        choice = TaskChoice(
            tier, cascade, name if cascade is not None else None, routes,
            bounded=ctx.release is not None, fallback=ctx.fallback_routes, release=ctx.release,
        )  # fmt: skip
        ctx.task = choice
        ctx.route_order = self.order(choice, tier, ctx.release)

    def order(self, choice: TaskChoice, tier: str, release: str | None) -> tuple[Provider, ...]:
        """``tier``'s routes in the order this call tries them (each group's deployments as
        ranked for the call). Under a release only the call's arm's routes: a tier naming
        both releases' routes served the canary's calls from the release's; one naming none
        of the arm's gives the arm's own. A canary call's fallback (the current release's
        routes) comes after, bounded alike; alone once the call fell back to it
        (``release``, the call's now, is not the one it started on): a cascade escalating
        after the fallback sends the current release's request to its routes only."""
        position = {route.name: i for i, route in enumerate(choice.ranked)}
        ordered: list[Provider] = []
        for member in self._tiers[tier]:
            ordered += sorted(member, key=lambda r: position.get(r.name, len(position)))
        if not choice.bounded:
            return tuple(ordered)
        fallback = _within(ordered, choice.fallback) if choice.fallback else ()
        if fallback and release != choice.release:
            return fallback
        own = tuple(r for r in choice.ranked if r not in choice.fallback)
        return _within(ordered, own) + fallback


def _within(ordered: list[Provider], ranked: tuple[Provider, ...]) -> tuple[Provider, ...]:
    """The routes of ``ordered`` (a tier's) among ``ranked``; ``ranked`` if none is."""
    names = {route.name for route in ranked}
    return tuple(r for r in ordered if r.name in names) or ranked


class _Rejected(Exception):
    """A tier's answer that the cascade's checks (or an output filter) rejected."""

    def __init__(self, reason: str, response: ChatResponse) -> None:
        super().__init__(reason)
        self.reason = reason
        self.response = response


def _screen(
    output_filters: Sequence[OutputFilter], cascade: Cascade, ctx: CallContext
) -> OutputFilter:
    """The Guard's output filters, then the cascade's checks, as one output filter (an
    awaitable one from the first async filter on: see :func:`~.filters.resolve`)."""
    request = ctx.request

    def screening(response: ChatResponse) -> filters.Plan[ChatResponse]:
        if response.route == DEGRADED or "route_errors" in response.metadata:
            raise _Rejected("error", response)  # no route served: a degraded or stale answer
        try:
            checked = yield from filters.outputs(output_filters, response, ctx.deadline)
        except GuardrailRejectedError:
            if not cascade.on_output_filter:
                raise
            raise _Rejected("output_filter", response) from None
        reason = cascade.rejects(request, checked)
        if reason is not None:
            raise _Rejected(reason, checked)
        return checked

    def screen(response: ChatResponse) -> ChatResponse | Awaitable[ChatResponse]:
        return filters.resolve(screening(response))

    return screen


def _plan(ctx: CallContext, stages: Stages, routing: TaskRouting) -> Plan:
    """Each tier's stages in turn; the served answer (raises the last tier's error)."""
    choice = ctx.task
    assert choice is not None
    cascade = choice.cascade
    assert cascade is not None
    for index, tier in enumerate(cascade.tiers):
        last = index == len(cascade.tiers) - 1
        if index:
            _next_tier(ctx, stages, routing.order(choice, tier, ctx.release), tier)
        run = stages
        if not last:
            screen = _screen(stages.output_filters, cascade, ctx)
            run = dataclasses.replace(stages, output_filters=(screen,))
        outcome = yield run
        if isinstance(outcome, ChatResponse):
            return _served(ctx, choice, outcome)
        if last:
            raise outcome
        if isinstance(outcome, _Rejected):
            cost = outcome.response.cost_usd
            choice.tried.append(Tried(tier, outcome.reason, outcome.response.route, cost))
        elif cascade.on_error and _routes_failed(outcome, stages) and not filters.late(outcome):
            choice.tried.append(Tried(tier, "error", None, _unserved_usd(ctx, stages)))
        else:
            raise outcome
    raise AssertionError("unreachable: the last tier returns or raises")


def _routes_failed(error: Exception, stages: Stages) -> bool:
    """Whether a tier's ``error`` says its routes failed (every one: a provider error each
    route's fault, open breakers, no rate-limit room), which escalates; not an error of the
    request itself that stopped the tier's chain (a 400, a content policy refusal: what
    the Guard's ``moves_on``, else :func:`~llmguard_sdk.router.is_route_failure`, does not
    move on from), raised as a plain chain raises it."""
    if isinstance(error, ProviderError):
        return (stages.moves_on or is_route_failure)(error)
    return isinstance(error, _ESCALATING)


def _unserved_usd(ctx: CallContext, stages: Stages) -> float | None:
    """What a failed tier's requests that went out cost (its spend settled them already)."""
    return stages.spend.unserved_cost(ctx, stages) if stages.spend is not None else None


def _next_tier(ctx: CallContext, stages: Stages, order: tuple[Provider, ...], tier: str) -> None:
    """Make the call a fresh one on ``tier``'s routes (a new idempotency key: another
    request; the failed tier's errors go with its record, its unserved attempts with its
    spend, settled already), its input counted as the tier's first route's model counts it
    and too large for ``max_input_tokens`` as a first tier would be (InputTooLargeError)."""
    assert ctx.task is not None
    ctx.task.tier = tier
    ctx.route = None
    ctx.route_order = order
    ctx.route_errors = {}
    ctx.unserved = []
    headers = ctx.request.extra_headers
    if headers:
        fresh = {
            k: new_idempotency_key() if v.startswith(IDEMPOTENCY_PREFIX) else v
            for k, v in headers.items()
        }
        ctx.request = ctx.request.model_copy(update={"extra_headers": fresh})
    check_input_size(ctx, stages)  # last: what the tier before cost is in its record only


def _served(ctx: CallContext, choice: TaskChoice, response: ChatResponse) -> ChatResponse:
    """The answer with the cascade's total cost (what is known of it: ``"estimated"`` where
    a tier's answer had no price) and record."""
    tried: list[dict[str, Any]] = [dataclasses.asdict(t) for t in choice.tried]
    record = {"name": choice.cascade_name, "tier": choice.tier, "escalated_from": tried}
    update: dict[str, Any] = {"metadata": {**response.metadata, "cascade": record}}
    served = response.cost_usd
    if choice.tried and (served is not None or any(t.cost_usd is not None for t in choice.tried)):
        update["cost_usd"] = (served or 0.0) + choice.rejected_cost()
        unpriced = any(t.cost_usd is None for t in choice.tried if t.reason != "error")
        unpriced = unpriced or served is None  # (an unpriced model served: its part unknown)
        if unpriced or any(t.cost_usd for t in choice.tried if t.reason == "error"):
            update["cost_source"] = "estimated"  # (a failed tier's requests: estimated)
    return response.model_copy(update=update)


def _advance(plan: Plan, outcome: ChatResponse | Exception) -> Stages | ChatResponse:
    """The plan's next tier's stages, or the served answer (raises the call's error)."""
    try:
        return plan.send(outcome)
    except StopIteration as stop:
        served: ChatResponse = stop.value
        return served


def _call(
    once: Callable[[CallContext, Stages], ChatResponse], ctx: CallContext, run: Stages
) -> ChatResponse | Exception:
    try:
        return once(ctx, run)
    except Exception as exc:
        return exc


async def _acall(
    once: Callable[[CallContext, Stages], Awaitable[ChatResponse]], ctx: CallContext, run: Stages
) -> ChatResponse | Exception:
    try:
        return await once(ctx, run)
    except Exception as exc:
        return exc


def complete(
    ctx: CallContext,
    stages: Stages,
    routing: TaskRouting,
    once: Callable[[CallContext, Stages], ChatResponse],
) -> ChatResponse:
    """Drive a cascade's plan with the plain call ``once``."""
    plan = _plan(ctx, stages, routing)
    step: Stages | ChatResponse = next(plan)
    while isinstance(step, Stages):
        step = _advance(plan, _call(once, ctx, step))
    return step


async def acomplete(
    ctx: CallContext,
    stages: Stages,
    routing: TaskRouting,
    once: Callable[[CallContext, Stages], Awaitable[ChatResponse]],
) -> ChatResponse:
    """Async twin of :func:`complete`."""
    plan = _plan(ctx, stages, routing)
    step: Stages | ChatResponse = next(plan)
    while isinstance(step, Stages):
        step = _advance(plan, await _acall(once, ctx, step))
    return step
