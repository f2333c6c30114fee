"""The Guard's spend stage: reserve before the route loop, settle after it, stamp costs.

Before a call, :class:`SpendControl` works out every budget counter the call touches (from
its scope and tags), prices the call's worst case on the routes it may take (input tokens
counted, plus its ``max_tokens`` at the output price) and holds it on all those counters in
one atomic step. A call that does not fit gets what the refusing budget says: refused,
downgraded to the cheaper routes, or sent to the local model only. After the call the hold is
settled to the served response's cost (the provider's reported cost, else the price table's
estimate) and alerts fire; a failed call releases it.

The reservation logic is written once, as a generator of backend steps, and driven by a
sync and an async twin (as the plan in :mod:`llmguard_sdk._core.plan` does for the route loop).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from typing_extensions import Unpack

from .._ids import UniqueIds
from .._state import steps as store_steps
from .._state.stores import RedisStore, Store
from ..context import CallContext
from ..errors import (
    BudgetExceededError,
    BudgetUnavailableError,
    ConfigurationError,
    RequestValidationError,
)
from ..models import ChatResponse, Usage
from ..providers.base import Provider, is_local
from ..telemetry._repeats import log_repeated
from ..tokens import count_text_tokens
from ._budgets import Budgets, EventHook
from ._routes import Level, asked_tier, route_tier, takes_completion_limit, tier_routes
from ._topup import top_up_steps
from .memory import BudgetBackend, MemoryBudgetBackend
from .policy import (
    NANO,
    BudgetEvent,
    CounterSpec,
    ReserveResult,
    RunawayDetector,
    SettleResult,
    for_log,
    nano,
)
from .prices import Cost, PriceTable, cost_of_response
from .redis import RedisBudgetBackend
from .scopes import BudgetScope, CounterStatus, ScopeCounters, status_row

if TYPE_CHECKING:
    from .._core.stages import Stages

__all__ = [
    "BudgetScope",
    "BudgetUnavailableError",
    "Budgets",
    "CounterStatus",
    "EventHook",
    "Held",
    "SpendControl",
    "status_row",
]

_DEGRADED = "degraded"
_RESERVATION_IDS = UniqueIds(random_digits=8)  # 24 hex digits, as os.urandom(12) gave
_SCOPE_KEYWORDS = frozenset(BudgetScope.__annotations__)  # tenant, feature, user, tags
_NOTHING = ChatResponse(text="")  # an attempt that served nothing, priced by its usage
logger = logging.getLogger("llmguard_sdk")


@dataclass
class Held:
    """One call's reservation: its id, counters, amount held (nano-dollars, top-ups
    included), the stages (routes) the call may use, whether it was settled, and the ids of
    its top-ups (:mod:`._topup`: released when it settles)."""

    rid: str
    specs: tuple[CounterSpec, ...]
    amount: int
    stages: Stages
    level: Level = "all"
    done: bool = False
    notes: list[BudgetEvent] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)


class SpendControl:
    """The spend stage of one Guard (built by the Guard from :class:`Budgets`).

    Usable on its own for inspection: :meth:`status` tells a scope's spend.
    """

    def __init__(
        self,
        config: Budgets,
        routes: Sequence[Provider],
        store: Store,
        *,
        backend: BudgetBackend | None = None,
    ) -> None:
        self.config = config
        self.prices = config.prices or PriceTable.default_table()
        self.scopes = ScopeCounters(config.budgets)
        self.backend: BudgetBackend
        if backend is not None:
            self.backend = backend
        elif isinstance(store, RedisStore):
            self.backend = RedisBudgetBackend(
                store,
                name=config.name,
                fail_open=config.fail_open,
                fleet_share=config.fail_open_share,
            )
        else:
            self.backend = MemoryBudgetBackend()
        names = {route.name for route in routes}
        for what, chosen in (
            ("downgrade_to", config.downgrade_to),
            ("local_routes", config.local_routes),
        ):
            unknown = sorted(set(chosen) - names)
            if unknown:
                raise ConfigurationError(f"{what} names routes the Guard does not have: {unknown}")
        self.local = frozenset(config.local_routes) | {
            route.name for route in routes if is_local(route)
        }
        self._completion_limit = any(takes_completion_limit(r.model) for r in routes)
        policies = {b.on_exhausted for b in config.budgets}
        if "downgrade" in policies and not config.downgrade_to:
            raise ConfigurationError('on_exhausted="downgrade" needs Budgets(downgrade_to=[...])')
        if "local_only" in policies and not self.local:
            raise ConfigurationError('on_exhausted="local_only" needs a local route')
        if config.budgets:
            for route in routes:  # an unknown price fails here, before any call
                if route.model is not None and route.name not in self.local:
                    self.prices.price(route.model, provider=route.name)
        self.runaway = (
            RunawayDetector(config.runaway_factor) if config.runaway_factor is not None else None
        )
        batch_routes = any(route_tier(route) == "batch" for route in routes)
        self.active = bool(config.budgets or config.on_event or batch_routes)
        """Whether calls go through reserve and settle (budgets or event callbacks are set,
        or a batch route is in the chain: this stage picks the routes of batch calls);
        otherwise this stage only prices responses."""

    # -- what a call touches -----------------------------------------------------------------

    def counters(self, **scope: Unpack[BudgetScope]) -> tuple[CounterSpec, ...]:
        """The counters a call with this scope and these tags is counted by (a keyword
        other than ``tenant``, ``feature``, ``user`` and ``tags`` is a
        :class:`~llmguard_sdk.errors.RequestValidationError`)."""
        unknown = sorted(set(scope) - _SCOPE_KEYWORDS)
        if unknown:
            raise RequestValidationError(
                f"unknown budget scope keywords {unknown}: use tenant, feature, user, tags"
            )
        return self.scopes.of(
            scope.get("tenant"), scope.get("feature"), scope.get("user"), scope.get("tags", ())
        )

    def status(self, **scope: Unpack[BudgetScope]) -> list[CounterStatus]:
        """Each counter of a scope (``tenant=``, ``feature=``, ``user=``, ``tags=``): its
        limit, settled spend, amount held by calls in flight and reset time, in USD."""
        specs = self.counters(**scope)
        return [
            status_row(spec, found)
            for spec, found in zip(specs, self.backend.status(specs), strict=True)
        ]

    async def astatus(self, **scope: Unpack[BudgetScope]) -> list[CounterStatus]:
        """Async twin of :meth:`status`."""
        specs = self.counters(**scope)
        found = await self.backend.astatus(specs)
        return [status_row(spec, status) for spec, status in zip(specs, found, strict=True)]

    # -- prices ------------------------------------------------------------------------------

    def route_price_args(
        self, ctx: CallContext, routes: Sequence[Provider], *, input_tokens: int | None = None
    ) -> tuple[int, float]:
        """(base, per output token), nano-dollars: the worst case over ``routes`` of a
        request of ``input_tokens`` (default: the call's). A hedged call may also be billed
        its race's losing prompt: its base is the two dearest prompts."""
        counted = ctx.input_tokens().tokens if input_tokens is None else input_tokens
        priced = counted * (1.0 + self.config.input_margin)
        prompts, per = [0], 0.0
        asked = asked_tier(ctx)
        table, local = self.prices, self.local
        for route in routes:
            name = route.name
            if name in local:
                continue
            model = route.model or ctx.request.model
            assert model is not None  # prepare() checked it
            # a route that always serves one tier (a BatchProvider: "batch") says so
            tier = route_tier(route) or asked
            prices = [table.price(model, provider=name, tier=tier)]
            if tier is not None and tier != "batch":  # may be served at the standard tier
                prices.append(table.price(model, provider=name))
            prompts.append(max(nano(price.worst_case(priced, 0)) for price in prices))
            for price in prices:
                per = max(per, price.for_input(priced).output_max * NANO / 1_000_000)
        prompts.sort()
        raced = ctx.hedge_after is not None and len(prompts) > 2
        return prompts[-1] + (prompts[-2] if raced else 0), per

    def cost(
        self,
        ctx: CallContext,
        stages: Stages,
        response: ChatResponse,
        usage: Usage | None = None,
        *,
        route: str | None = None,
    ) -> Cost | None:
        """The served response's cost: the provider's, else the price table's estimate from
        ``usage`` (default: the response's) at the model of ``route`` (default: the route
        that served the call). The configured degraded answer costs nothing (the attempts
        that went out before it are the call's unserved ones)."""
        if response.cost_source == "reported" and response.cost_usd is not None:
            return Cost(response.cost_usd, "reported")
        usage = usage or response.usage
        name = route or ctx.route or response.route
        if name == _DEGRADED:
            return Cost(0.0, "estimated")
        if usage is None:
            return None
        if name in self.local:
            return Cost(0.0, "estimated")
        model = None
        for provider in stages.routes:
            if provider.name == name:
                model = provider.model
                break
        model = model or ctx.request.model
        if model is None:
            model = response.model
        if not model:
            return None
        return cost_of_response(
            response, self.prices, model=model, provider=name, usage=usage, tier=asked_tier(ctx)
        )

    # -- reserve -----------------------------------------------------------------------------

    def prepare(self, ctx: CallContext) -> None:
        """Give a budgeted call without ``max_tokens`` the default one (its worst case must
        be bounded); done before any other stage sees the request, so the cache keys and
        rate-limit reservation of the call see the same request as its provider. A call
        that an OpenAI reasoning model may serve (``o1``, ``o3``, ``o4-mini``, ``gpt-5``
        ...: a route's model or the request's) gets it as ``max_completion_tokens``, the
        only name those models take."""
        if self.active and ctx.request.output_limit is None and self.scopes.of_call(ctx):
            newer = self._completion_limit or takes_completion_limit(ctx.request.model)
            name = "max_completion_tokens" if newer else "max_tokens"
            ctx.request = ctx.request.model_copy(update={name: self.config.default_output_tokens})

    def _steps(
        self,
        ctx: CallContext,
        stages: Stages,
        notes: list[BudgetEvent],
        asked: list[Held] | None = None,
    ) -> store_steps.Step[Held]:
        """The reservation logic; events to emit are appended to ``notes`` (the caller emits
        them, also when this raises), the hold to ``asked`` before it goes out."""
        rid = _RESERVATION_IDS.next()
        specs = self.scopes.of_call(ctx)
        stages = self._by_priority(ctx, stages)
        if not specs:
            return Held(rid, (), 0, stages)
        config = self.config
        self.prepare(ctx)
        want = ctx.request.output_limit or config.default_output_tokens
        level: Level = "all"
        ttl = max(0.0, ctx.remaining()) + config.hold_seconds
        if asked is not None:  # its amount unknown until the answer: settled to nothing
            asked.append(Held(rid, specs, 0, stages))
        while True:
            routes = self._routes(stages, level)
            base, per = self.route_price_args(ctx, tier_routes(ctx, routes, level))
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
            if type(self.backend) is MemoryBudgetBackend:  # its steps only run it: run it here
                result = self.backend.reserve(**hold)
            else:
                result = yield from self.backend.reserve_steps(**hold)
            if result.allowed:
                if result.tokens < want:
                    limit_name = (
                        "max_completion_tokens"
                        if ctx.request.max_completion_tokens is not None
                        else "max_tokens"
                    )
                    ctx.request = ctx.request.model_copy(update={limit_name: result.tokens})
                return Held(rid, specs, result.amount, chosen, level, notes=notes)
            if result.unavailable:
                self.unavailable(specs, result, notes)
            level = self.refused(specs[result.refused_index], result, level, notes)

    def unavailable(
        self, specs: Sequence[CounterSpec], result: ReserveResult, notes: list[BudgetEvent]
    ) -> NoReturn:
        """The backend could not be reached: note it and raise
        :class:`BudgetUnavailableError`."""
        notes.append(BudgetEvent("unavailable", self.config.name, "*", action="refused"))
        raise BudgetUnavailableError(
            "spend budgets are unavailable (Redis cannot be reached); budgeted calls "
            "are refused until it answers (Budgets(fail_open=True) counts per process)",
            scope="*",
            limit_usd=specs[0].limit / NANO,
            spent_usd=math.nan,
            retry_after=result.retry_after,
        )

    def refused(
        self, spec: CounterSpec, result: ReserveResult, level: Level, notes: list[BudgetEvent]
    ) -> Level:
        """A budget had no room: note it, and the level to try next (a downgrade, local
        routes only); raises :class:`BudgetExceededError` when the budget refuses (at
        ``level="local"`` it always does)."""
        budget = self.config.budgets[spec.budget_index]
        following = self._next_level(level, budget.on_exhausted)
        note = BudgetEvent(
            "exhausted",
            budget.key_name,
            spec.scope,
            limit_usd=spec.limit / NANO,
            spent_usd=result.spent / NANO,
            resets_at=result.resets_at,
            action={"downgrade": "downgraded", "local": "local_only", None: "refused"}[following],
        )
        if result.alerted:
            notes.append(dataclasses.replace(note, kind="alert", threshold=1.0, action=None))
        notes.append(note)
        if following is None:
            held = (result.reserved / NANO) if result.reserved else 0.0
            raise BudgetExceededError(
                f"budget {budget.key_name!r} of {spec.scope} has no room for this call: "
                f"${result.spent / NANO:.6f} spent of ${spec.limit / NANO:.6f}"
                + (f" (and ${held:.6f} held by calls in flight)" if held else ""),
                scope=spec.scope,
                limit_usd=spec.limit / NANO,
                spent_usd=result.spent / NANO,
                resets_at=result.resets_at,
                retry_after=max(0.0, result.resets_at - time.time()),
            )
        return following

    def _by_priority(self, ctx: CallContext, stages: Stages) -> Stages:
        """Batch routes (a :class:`~llmguard_sdk.providers.batch.BatchProvider`: routes whose
        ``service_tier`` is ``"batch"``) serve the calls with ``priority="batch"``, and only
        those: a batch call goes to them when the chain has any, other calls never do."""
        batch = [route for route in stages.routes if route_tier(route) == "batch"]
        if not batch:
            return stages
        wanted = batch if ctx.priority == "batch" else [r for r in stages.routes if r not in batch]
        return dataclasses.replace(stages, routes=tuple(wanted)) if wanted else stages

    def _routes(self, stages: Stages, level: Level) -> tuple[Provider, ...]:
        if level == "all":
            return stages.routes
        wanted = set(self.config.downgrade_to) if level == "downgrade" else self.local
        return tuple(route for route in stages.routes if route.name in wanted)

    def _next_level(self, level: Level, policy: str) -> Level | None:
        if policy == "downgrade" and level == "all":
            return "downgrade"
        if policy == "local_only" and level != "local":
            return "local"
        return None

    def reserve_steps(
        self,
        ctx: CallContext,
        stages: Stages,
        notes: list[BudgetEvent],
        asked: list[Held] | None = None,
    ) -> store_steps.Step[Held]:
        """The reservation as a step of a :class:`~llmguard_sdk._state.steps.Batch` (a downgrade
        asks the backend again); its events go to ``notes``, for the caller to emit, and its
        hold to ``asked`` before it goes out (a caller cut short before the answer settles
        that to nothing)."""
        return self._steps(ctx, stages, notes, asked)

    def reserve(self, ctx: CallContext, stages: Stages) -> Held:
        """Hold the call's worst case on its counters (raises BudgetExceededError)."""
        notes: list[BudgetEvent] = []
        try:
            return store_steps.run(self.reserve_steps(ctx, stages, notes))
        finally:
            self._emit(notes)

    async def areserve(self, ctx: CallContext, stages: Stages) -> Held:
        """Async twin of :meth:`reserve`."""
        notes: list[BudgetEvent] = []
        try:
            return await store_steps.arun(self.reserve_steps(ctx, stages, notes))
        finally:
            self._emit(notes)

    # -- settle ------------------------------------------------------------------------------

    def _actual(self, held: Held, ctx: CallContext, response: ChatResponse | None) -> int:
        if response is None:  # no answer: what the attempts that went out cost
            response = self.partial(ctx, held.stages)
            return 0 if response is None or response.cost_usd is None else nano(response.cost_usd)
        if response.cost_usd is not None:
            return nano(response.cost_usd)
        cost = self.cost(ctx, held.stages, response)
        return held.amount if cost is None else nano(cost.usd)  # unknown: the worst case

    def _settle_args(self, held: Held, actual: int) -> dict[str, Any]:
        held.done = True
        return {
            "rid": held.rid,
            "specs": held.specs,
            "actual": actual,
            "ttl": self.config.hold_seconds + 86400,
        }

    def _after(
        self, ctx: CallContext, held: Held, result: SettleResult, usage: Usage | None
    ) -> None:
        events: list[BudgetEvent] = []
        if result.applied:
            for spec, spent, resets, fired in zip(
                held.specs, result.spent, result.resets_at, result.fired, strict=True
            ):
                if not fired:
                    continue
                budget = self.config.budgets[spec.budget_index]
                for threshold in fired:
                    events.append(
                        BudgetEvent(
                            "alert",
                            budget.key_name,
                            spec.scope,
                            limit_usd=spec.limit / NANO,
                            spent_usd=spent / NANO,
                            threshold=threshold,
                            resets_at=resets,
                        )
                    )
        if self.runaway is not None and usage is not None:
            feature = ctx.scope.feature or ""
            p95 = self.runaway.observe(feature, usage.total_tokens)
            if p95 is not None:
                events.append(
                    BudgetEvent(
                        "runaway",
                        "runaway",
                        f"feature:{feature}" if feature else "feature:",
                        tokens=usage.total_tokens,
                        p95=p95,
                        factor=self.runaway.factor,
                    )
                )
        if events:
            self._emit(events)

    def flush_steps(self) -> store_steps.Step[bool]:
        """Replay the spend journaled while Redis could not be reached (a Redis backend
        does so at its next decision anyway); True when nothing is left to replay."""
        replay = getattr(self.backend, "replay_steps", None)
        if replay is None:
            return True
        replayed: bool = yield from replay()
        return replayed

    def settle_steps(
        self, held: Held, ctx: CallContext, response: ChatResponse | None
    ) -> store_steps.Step[None]:
        """:meth:`settle` as a step of a :class:`~llmguard_sdk._state.steps.Batch`."""
        if held.done:
            return
        if held.specs:
            kwargs = self._settle_args(held, self._actual(held, ctx, response))
            if type(self.backend) is MemoryBudgetBackend:  # (as in reserve_steps)
                result: SettleResult = self.backend.settle(**kwargs)
            else:
                result = yield from self.backend.settle_steps(**kwargs)
            for rid in held.extra:  # the top-ups: released (the spend is the first's)
                yield from self.backend.settle_steps(rid, held.specs, actual=0, ttl=kwargs["ttl"])
        else:
            held.done, result = True, SettleResult(False)
        self._after(ctx, held, result, response.usage if response is not None else None)

    def top_up_steps(self, held: Held, ctx: CallContext, route: Provider) -> store_steps.Step[None]:
        """Before an attempt on ``route`` after attempts that were charged: hold what was
        charged plus that attempt's worst case (:mod:`._topup`; raises
        :class:`BudgetExceededError` when the budgets have no room for it)."""
        return top_up_steps(self, held, ctx, route)

    def settle(self, held: Held, ctx: CallContext, response: ChatResponse | None) -> None:
        """Settle the hold to the response's cost (``None``: nothing served, release)."""
        store_steps.run(self.settle_steps(held, ctx, response))

    async def asettle(self, held: Held, ctx: CallContext, response: ChatResponse | None) -> None:
        """Async twin of :meth:`settle`."""
        await store_steps.arun(self.settle_steps(held, ctx, response))

    def unserved_cost(self, ctx: CallContext, stages: Stages) -> float | None:
        """What the call's attempts that went out and did not serve it cost, in USD (see
        ``ctx.unserved``: streams cut off after content, attempts cut off after their request
        was sent); None when there are none, or none has a price."""
        costs = [
            self.cost(ctx, stages, _NOTHING, used, route=route) for route, used in ctx.unserved
        ]
        found = [cost.usd for cost in costs if cost is not None]
        return sum(found) if found else None

    def charged_unanswered(self, ctx: CallContext, stages: Stages) -> float | None:
        """What a call that ended without an answer was charged, in USD: its attempts that
        went out (:meth:`unserved_cost`), and a cascade's tiers tried before (their answers,
        their requests), each settled with its tier's spend; None when none cost anything
        known."""
        found = self.unserved_cost(ctx, stages)
        tried = ctx.task.tried if ctx.task is not None else ()
        if any(t.cost_usd is not None for t in tried):
            found = (found or 0.0) + sum(t.cost_usd or 0.0 for t in tried)
        return found

    def partial(
        self, ctx: CallContext, stages: Stages, text: str = "", usage: Usage | None = None
    ) -> ChatResponse | None:
        """What a call that ended without a whole answer cost, as a response to settle with;
        None when no request went out. Every attempt that went out is billed by its provider
        and counted (:meth:`unserved_cost`): a stream cut off or closed after content, its
        usage if the provider sent one, else its input and the text it delivered, counted
        here; a stream closed before its first content, a call cancelled or timed out after
        its request was sent (not on a batch route), a hedge race's loser: their input
        tokens; an answer an output filter refused. ``text`` and ``usage``: a part
        of the serving route's answer that is not among those attempts, counted as well."""
        extra = self.unserved_cost(ctx, stages)
        if not text and usage is None:
            if extra is None:
                return None
            return ChatResponse(text="", route=ctx.route or "", cost_usd=extra)
        if usage is None:
            usage = Usage(
                input_tokens=ctx.sent_input_tokens(),
                output_tokens=count_text_tokens(text, ctx.request.model).tokens,
                estimated=True,
            )
        response = ChatResponse(text=text, usage=usage, route=ctx.route or "")
        cost = self.cost(ctx, stages, response)
        if cost is None:
            return response
        source = "estimated" if extra is not None else cost.source
        total = cost.usd + (extra or 0.0)
        return response.model_copy(update={"cost_usd": total, "cost_source": source})

    # -- events ------------------------------------------------------------------------------

    def emit(self, events: Sequence[BudgetEvent]) -> None:
        """Log ``events`` and hand them to the ``on_event`` callables."""
        self._emit(events)

    def _emit(self, events: Sequence[BudgetEvent]) -> None:
        for event in events:
            if event.kind in ("runaway", "unavailable"):
                key = ("budget", event.kind, event.budget)  # once, then counts
                log_repeated(
                    logger, logging.WARNING, key, "llmguard budget event: %s", for_log(event)
                )
            elif event.kind == "alert":
                logger.info("llmguard budget event: %s", for_log(event))
            for hook in self.config.on_event:
                try:
                    hook(event)
                except Exception:
                    logger.exception("llmguard budget hook %r failed", hook)
