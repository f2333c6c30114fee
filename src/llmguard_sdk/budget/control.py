"""The Guard's spend stage: reserve before the route loop, settle after it, stamp costs.

Before a call, :class:`SpendControl` works out every budget counter the call touches (from
its scope and tags), prices the call's worst case on the routes it may take (input tokens
counted, its images and input audio as each route's model may bill them, plus its
``max_tokens`` at the output price) and holds it on all those counters in
one atomic step. A call that does not fit gets what the refusing budget says: refused,
downgraded to the cheaper routes, or sent to the local model only. After the call the hold is
settled to the served response's cost (the provider's reported cost, else the price table's
estimate) and alerts fire; a failed call releases it.

The reservation logic (:mod:`._reserve`) and the top-ups before a charged retry
(:mod:`._topup`) are written once, as generators of backend steps, and driven by a sync and
an async twin (as the plan in :mod:`llmguard_sdk._core.plan` does for the route loop).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from .._route_names import DEGRADED
from .._state import steps as store_steps
from .._state.stores import RedisStore, Store
from ..context import CallContext
from ..errors import BudgetUnavailableError, ConfigurationError, RequestValidationError
from ..models import ChatRequest, ChatResponse, Usage
from ..providers.base import Provider, is_local
from ..telemetry._repeats import log_repeated
from ..tokens import count_text_tokens
from . import _reserve
from ._budgets import Budgets, EventHook
from ._media import request_media
from ._reserve import Held
from ._retention import attributed
from ._routes import asked_tier, route_tier, started_at, takes_completion_limit
from ._tool_fees import allowed_uses, held_fees, held_uses, request_fees, with_request_fees
from ._topup import top_up_steps
from .memory import BudgetBackend, MemoryBudgetBackend
from .policy import NANO, BudgetEvent, CounterSpec, RunawayDetector, SettleResult, for_log, nano
from .prices import Cost, Price, PriceTable, response_price
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

_SETTLED_MARGIN = 3600.0
"""How long past ``hold_seconds`` Redis remembers a settled reservation id (one small key a
call, ``:d:<id>``): a settle sent again from the spend journal within that time counts once.
The journal is replayed by the process's next call that reaches Redis, so only a settle whose
answer was lost (Redis ran it) and that is replayed more than an hour later, Redis away from
the process that long, counts twice (its budgets over-count it: the caps still hold). It was a
day: 8.6 million keys, some 1.2 GB, at 100 calls a second; an hour is 0.37 million, some 50 MB
(about 130 bytes a key)."""
_SCOPE_KEYWORDS = frozenset(BudgetScope.__annotations__)  # tenant, feature, user, tags
_NOTHING = ChatResponse(text="")  # an attempt that served nothing, priced by its usage
_PRICED = 256
"""How many prices :meth:`SpendControl.cost` remembers (routes, models, tiers and stretches
of the day: a handful in use at a time); past it, it starts again."""
logger = logging.getLogger("llmguard_sdk")


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
        self._priced: dict[
            tuple[str | None, str, str | None, str | None, tuple[int, int] | None], Price | None
        ] = {}
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
        request of ``input_tokens`` (default: the call's) and of its images and input audio
        as each route's model counts them at most (:mod:`._media`; an answer asked in audio:
        every output token at the dearer of its rates). A hedged call may also be billed
        its race's loser, its prompt and an output up to the call's
        ``max_tokens``: its base is the two dearest prompts, its rate per output token
        twice the dearest. Prices are those in
        force when the call started (time-of-day prices: DeepSeek's peak hours), the moment
        :meth:`cost` prices the call at too, so a call that runs past a window's edge is held
        and charged at one price. A call that lets the provider run its server-side tools (web
        and file search, code execution) holds the fee of the uses it allows
        (:func:`._tool_fees.allowed_uses`) at each route's model's fee per use, or the dearer
        one its tools set (:func:`._tool_fees.request_fees`)."""
        counted = ctx.input_tokens().tokens if input_tokens is None else input_tokens
        priced = counted * (1.0 + self.config.input_margin)
        media = request_media(ctx.request)  # its images and audio: per model, below
        prompts, per = [0], 0.0
        asked = asked_tier(ctx)
        table, local, at = self.prices, self.local, started_at(ctx)
        uses = allowed_uses(ctx.request)  # (none, from two reads, for most calls)
        for route in routes:
            name = route.name
            if name in local:
                continue
            model = route.model or ctx.request.model
            assert model is not None  # prepare() checked it
            # a route that always serves one tier (a BatchProvider: "batch") says so
            tier = route_tier(route) or asked
            prices = [table.price(model, provider=name, tier=tier, at=at)]
            if tier is not None and tier != "batch":  # may be served at the standard tier
                prices.append(table.price(model, provider=name, at=at))
            images, heard = media.tokens(model)
            inputs = priced + images + heard
            fees = 0.0  # the tool uses it may run (a chat search model: a search, at least)
            if uses or "search" in model:
                held, dearer = held_uses(uses, model), request_fees(ctx.request, model)
                fees = max(held_fees(held, p, dearer) for p in prices)
            prompts.append(max(nano(price.worst_case(inputs, 0, heard) + fees) for price in prices))
            for price in prices:
                paid = price.for_input(inputs)  # (its long-context tier)
                rate = max(paid.output_max, paid.audio_rates[1] if media.speaks else 0.0)
                per = max(per, rate * NANO / 1_000_000)
        prompts.sort()
        raced = ctx.hedge_after is not None and len(prompts) > 2
        return prompts[-1] + (prompts[-2] if raced else 0), per * (2 if raced else 1)

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
        that served the call), at the prices in force when the call started (as genai-prices
        prices a request at its timestamp), its cache writes at the rate of the retention they
        were made with (:mod:`._retention`). A usage the SDK counted itself (``estimated``:
        the provider reported none, an attempt cut off) counts the request's images and audio
        as its hold did (:meth:`._media.Media.counted_in`). The configured degraded answer
        costs nothing (the attempts that went out before it are the call's unserved ones)."""
        if response.cost_source == "reported" and response.cost_usd is not None:
            return Cost(response.cost_usd, "reported")
        if response.cost_source == "cached":  # (an answer from the response cache: free)
            return Cost(0.0, "cached")
        usage = usage or response.usage
        name = route or ctx.route or response.route
        if name == DEGRADED:
            return Cost(0.0, "estimated")
        if usage is None:
            return None
        if name in self.local:
            return Cost(0.0, "estimated")
        model = self.route_model(ctx, stages, name) or response.model
        if not model:
            return None
        if usage.estimated:  # the SDK's count, of the text: its media as the hold counts them
            usage = request_media(ctx.request).counted_in(usage, model)
        usage = attributed(usage, ctx.request)  # (by the retention asked)
        price = self._price(ctx, name, model, response.model, usage.service_tier)
        if price is None:
            return None
        return Cost(with_request_fees(price, ctx.request, model).cost(usage), "estimated")

    def _price(
        self,
        ctx: CallContext,
        route: str | None,
        model: str,
        answered: str | None,
        tier: str | None,
    ) -> Price | None:
        """The price :func:`~.prices.cost_of_response` prices the call's usage at (``tier``:
        the one its usage reports, else the one it asked), as it stood when the call started;
        remembered per route, model, tier, UTC day and stretch of the day between the price
        table's time-of-day windows' edges (where every lookup finds the same price), so a
        call like the last one looks nothing up."""
        tier = tier or asked_tier(ctx)
        stretch = self.prices.stretch(ctx.started_ns)
        key = (route, model, answered, tier, stretch)
        if stretch is not None:
            try:  # (one read: another thread may clear the memo between a test and a read)
                return self._priced[key]
            except KeyError:
                pass
        found = response_price(
            self.prices, model, provider=route, answered=answered, tier=tier, at=started_at(ctx)
        )
        stretch = self.prices.stretch(ctx.started_ns)  # (the lookup may have read the windows)
        if stretch is not None:
            if len(self._priced) >= _PRICED:
                self._priced.clear()
            self._priced[(route, model, answered, tier, stretch)] = found
        return found

    def route_model(self, ctx: CallContext, stages: Stages, route: str | None) -> str | None:
        """The model ``route`` serves the call with: its own, else the request's."""
        found = next((r.model for r in stages.routes if r.name == route), None)
        return found or ctx.request.model

    # -- reserve -----------------------------------------------------------------------------

    def prepare(self, ctx: CallContext) -> None:
        """Give a budgeted call without ``max_tokens`` the default one (its worst case must
        be bounded); done before any other stage sees the request, so the cache keys and
        rate-limit reservation of the call see the same request as its provider. A call
        that an OpenAI reasoning model may serve (``o1``, ``o3``, ``o4-mini``, ``gpt-5``
        ...: a route's model or the request's) gets it as ``max_completion_tokens``, the
        only name those models take."""
        if self.active and ctx.request.output_limit is None and self.scopes.of_call(ctx):
            ctx.request = self.bounded(ctx.request)

    def bounded(self, request: ChatRequest) -> ChatRequest:
        """``request`` with the output limit a budgeted call without one is given
        (``default_output_tokens``, as ``max_completion_tokens`` where an OpenAI reasoning
        model may serve it); ``request`` itself when it has a limit."""
        if request.output_limit is not None:
            return request
        newer = self._completion_limit or takes_completion_limit(request.model)
        name = "max_completion_tokens" if newer else "max_tokens"
        return request.model_copy(update={name: self.config.default_output_tokens})

    def worst_case_usd(
        self, ctx: CallContext, routes: Sequence[Provider], *, prompts: int = 1
    ) -> float:
        """What a budget holds for the call of ``ctx`` on ``routes`` (USD): its input
        (:meth:`route_price_args`) and its output limit, ``default_output_tokens`` where it
        has none, at the dearest of the routes; ``prompts``: the attempts that may each be
        billed the input (one that timed out after its request went out is), of which one
        is billed the output too."""
        base, per = self.route_price_args(ctx, routes)
        return (base * prompts + self.held_output(ctx.request) * per) / NANO

    def held_output(self, request: ChatRequest) -> int:
        """The output tokens a budget holds for ``request``: its output limit (the larger
        of ``max_tokens`` and ``max_completion_tokens`` where both are set), else
        ``default_output_tokens``."""
        return request.most_output or self.config.default_output_tokens

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
        return _reserve.reserve_steps(self, ctx, stages, notes, asked)

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
            "ttl": self.config.hold_seconds + _SETTLED_MARGIN,
        }

    def _after(
        self, ctx: CallContext, held: Held, result: SettleResult, usage: Usage | None
    ) -> None:
        events: list[BudgetEvent] = []
        if result.applied and any(result.fired):  # (most settles reach no threshold)
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
                            tenant=spec.tenant,
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

    def top_up_steps(
        self, held: Held, ctx: CallContext, route: Provider, left: Sequence[Provider] = ()
    ) -> store_steps.Step[tuple[Provider, ...]]:
        """Before an attempt on ``route`` after attempts that were charged: hold what was
        charged plus that attempt's worst case (:mod:`._topup`). When the budgets have no
        room for it, the routes of ``left`` (not reached yet) the refusing budget's
        ``on_exhausted`` moves the call to (``()``: the hold covers the attempt); none:
        :class:`BudgetExceededError`."""
        return top_up_steps(self, held, ctx, route, left)

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
        self,
        ctx: CallContext,
        stages: Stages,
        text: str = "",
        usage: Usage | None = None,
        *,
        route: str | None = None,
    ) -> ChatResponse | None:
        """What a call that ended without a whole answer cost, as a response to settle with;
        None when no request went out. Every attempt that went out is billed by its provider
        and counted (:meth:`unserved_cost`): a stream cut off or closed after content, its
        usage if the provider sent one, else its input and the text it delivered, counted
        here; a stream closed before its first content, or dropped after its provider's
        200, a call cancelled or timed out after its request was sent (not on a batch
        route), a hedge race's loser: their input tokens; an answer an output filter
        refused. ``text`` and ``usage``: a part of an answer that is not among those
        attempts, counted as well, priced at the model of
        ``route``, the route that gave it (default: the one that served the call, else the
        last one tried: a stream cut off leaves the call without a route)."""
        extra = self.unserved_cost(ctx, stages)
        if not text and usage is None:
            if extra is None:
                return None
            return ChatResponse(text="", route=ctx.route or "", cost_usd=extra)
        tried = ctx.attempt_log[-1].route if ctx.attempt_log else None
        name = route or ctx.route or tried or ""
        if usage is None:
            model = self.route_model(ctx, stages, name)
            usage = Usage(
                input_tokens=ctx.sent_input_tokens(),
                output_tokens=count_text_tokens(text, model).tokens,
                estimated=True,
            )
        response = ChatResponse(text=text, usage=usage, route=name)
        cost = self.cost(ctx, stages, response, route=name)
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
