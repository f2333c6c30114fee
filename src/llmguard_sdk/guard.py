"""The :class:`Guard`: one object that puts every LLM call of an application behind the pipeline.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload

from typing_extensions import Unpack

from . import _lazy, tokens
from ._adoption import Adoption
from ._core import filters, wiring
from ._core.buffered import achat_stream, chat_stream
from ._core.calls import (
    MessagesArg,
    acomplete_call,
    call_context,
    call_contexts,
    complete_call,
    loads_awaited,
)
from ._core.stages import InputFilter, OutputFilter, Stages, reporting
from ._core.streams import AsyncChatStream, ChatStream
from ._lifecycle import Lifecycle
from .breaker import (
    BreakerHook,
    BreakerPolicy,
    Breakers,
)
from .budget import Budget, Budgets, BudgetScope, CounterStatus, PriceTable
from .config import GuardSettings, _text_environ
from .context import Hook
from .errors import ProviderError
from .models import ChatRequest, ChatResponse
from .providers.base import Provider
from .providers.openai_compat import _cap_pools
from .ratelimit import LimitsConfig, RateLimiter
from .retry import (
    RetryBudgetPolicy,
    RetryPolicy,
)
from .router import DeploymentGroup, TaskRouter
from .store import Store, open_store

if TYPE_CHECKING:
    from .cache import ResponseCache
    from .releases import Release, ReleaseControl, ReleasePlan
    from .telemetry import Telemetry  # (imported with the first one: OpenTelemetry too)

__all__ = ["ChatOptions", "Guard"]

DEFAULT_RETRY = RetryPolicy()
DEFAULT_RETRY_BUDGET = RetryBudgetPolicy()
DEFAULT_BREAKER = BreakerPolicy()


class ChatOptions(TypedDict, total=False):
    """The keywords of :meth:`Guard.chat` and :meth:`Guard.achat`: the call's own options,
    then the request's parameters (the fields of :class:`~llmguard_sdk.ChatRequest`).

    mypy checks them; at run time an unknown keyword is a
    :class:`~llmguard_sdk.errors.RequestValidationError`, as any invalid request is.

    .. versionadded:: 0.2.0
    """

    request: ChatRequest | None
    """A ready request, instead of messages and parameters."""
    model: str | None
    """The model asked for: routes without a model of their own are sent it (a route's own
    model wins). With deployment groups, a group's name selects the group, as a LiteLLM
    Router's ``model_name`` does: the call starts at it (its deployments as its strategy
    ranks them, then the chain's routes after it), unless task routing chooses the call's
    tier; a model a group's deployment serves selects the first such group as its name
    does, and one a route outside groups serves first starts the call at that route. A
    name of no group that every route would ignore (each has a model of its own, another)
    raises :class:`~llmguard_sdk.errors.UnknownModelError` (not under a release)."""
    tenant: str | None
    feature: str | None
    user: str | None
    timeout: float | None
    """The call's total time in seconds, every route and retry included."""
    hedge_after: float | None
    """Start a second route's call when the first has not answered after this many seconds."""
    attempt_timeout: float | None
    """Seconds one route may stay silent in this call (instead of the Guard's
    ``attempt_timeout``): the whole answer of a plain call, the first and every later chunk
    of a stream.

    .. versionadded:: 0.2.0"""
    priority: Literal["interactive", "batch"]
    region: str | None
    """Prefer the deployments of deployment groups tagged with this region (then the others)."""
    cacheable: bool
    """``False`` skips the cache for this call."""
    cache_tags: Sequence[str]
    """Permission tags that further partition what this call may read and write."""
    cache_refresh: bool
    """``True``: read nothing from the cache (no stale answer either) and store the new answer
    in place of the entry, as LiteLLM's ``no-cache`` (``cacheable=False`` skips both).

    .. versionadded:: 0.2.0"""
    cache_ttl: float | None
    """Seconds this call's answer stays fresh in the cache, instead of the cache's ``ttl``
    (as LiteLLM's ``ttl``).

    .. versionadded:: 0.2.0"""
    cache_max_age: float | None
    """Seconds: serve only a cached answer stored less long ago (as LiteLLM's ``s-maxage``);
    an older one is asked again and replaced.

    .. versionadded:: 0.2.0"""
    max_tokens: int | None
    max_completion_tokens: int | None
    temperature: float | None
    top_p: float | None
    stop: str | Sequence[str] | None
    seed: int | None
    tools: Sequence[Mapping[str, Any]] | None
    tool_choice: str | Mapping[str, Any] | None
    response_format: Mapping[str, Any] | None
    metadata: Mapping[str, str] | None
    extra_body: Mapping[str, Any] | None
    extra_headers: Mapping[str, str] | None
    extra_query: Mapping[str, str] | None


class Guard(Adoption, Lifecycle):
    """Wraps LLM calls with the SDK's pipeline; build one per application and share it.

    Args:
        providers: the routes of the fallback chain, tried in order (one provider or a list);
            a :class:`~llmguard_sdk.DeploymentGroup` takes one place in the chain and ranks
            its deployments for each call; ``chat(..., model=NAME)`` with a group's name
            starts the call at that group.
            Without one, ``LLMGUARD_BASE_URL`` / ``LLMGUARD_API_KEY`` / ``LLMGUARD_MODEL``
            configure an :class:`~llmguard_sdk.OpenAICompatibleProvider`.
        store: ``"memory"`` (default) or a Redis URL: where shared state lives.
        timeout: total seconds a call may take, every route and retry included (default 60).
        retry: how each route is retried (:class:`~llmguard_sdk.retry.RetryPolicy`: full
            jitter, 3 attempts, Retry-After honoured, an idempotency key per call); ``None``
            turns retries off.
        retry_budget: the share of traffic retries may add per route
            (:class:`~llmguard_sdk.retry.RetryBudgetPolicy`, default 10 % plus 1 per second),
            shared through Redis when ``store`` is Redis; ``None``: no budget.
        continue_interrupted_streams: when a stream breaks after delivering text, ask the next
            route to continue from that text (instead of raising StreamInterruptedError);
            after the model's reasoning alone, to answer the question as asked; never after
            part of a tool call (its cut arguments: StreamInterruptedError is raised). The
            stream's response holds what every route streamed (text, reasoning), in order.
        breaker: the circuit breaker of every route (:class:`~llmguard_sdk.breaker.
            BreakerPolicy`: opens at 50 % failures of the last 20 calls, at least 10 of them,
            for 30 s growing on repeated trips, probes with 2 calls); shared through Redis when
            ``store`` is Redis; a ready :class:`~llmguard_sdk.breaker.Breakers` to share one
            set between Guards; ``None`` turns breakers off.
        breaker_hooks: callables receiving each :class:`~llmguard_sdk.breaker.
            BreakerTransition`.
        moves_on: which provider errors hand the call to the next route, for plain calls and
            streams alike (default: errors that belong to the route: unavailable, timeouts,
            429, malformed answers, bad credentials, 402, 404, a context window too small;
            not a request the provider refused as wrong, which would fail everywhere, nor a
            content filter's refusal: :func:`~llmguard_sdk.router.is_route_failure`, to
            build on: ``lambda e: isinstance(e, ContentPolicyError) or is_route_failure(e)``).
        degraded: text answered (``route="degraded"``) when no route can serve a call,
            instead of raising; ``None`` raises.
        rate_limits: per route name, a :class:`~llmguard_sdk.ratelimit.RateLimit` (requests,
            tokens, input and output tokens per minute, a concurrency cap) or a list of them
            that all apply, such as the route's own and one with ``per_tenant=True`` that
            each tenant gets separately; shared through Redis when ``store`` is Redis. Each
            attempt reserves its estimated tokens first (input as the route's model counts
            it, plus ``max_tokens``), settles to the real usage afterwards and gives its
            concurrency slot back; a route without room is skipped at once
            (:class:`~llmguard_sdk.errors.RateLimitExceededError` with ``retry_after``).
            A call may wait for room up to the limit's ``max_wait`` (first come, first
            served; ``max_queue`` bounds the waiting calls); ``chat(..., priority="batch")``
            leaves ``batch_headroom`` to interactive calls. The provider's
            ``x-ratelimit-remaining-*`` (of streams too) and 429s correct the state. Both
            legs of a hedged call are limited (the second starts only if it has room now).
        hedge_after: hedge calls: when the first route has not answered (streams: produced
            its first token) within this many seconds, or has failed, the second route starts
            too and the first to answer wins; the other is cancelled in async code, abandoned
            to its deadline in sync code. A hedged pair is not retried. Per call:
            ``chat(..., hedge_after=...)``.
        attempt_timeout: seconds one route may stay silent before the chain moves on: the
            whole answer of a plain call, the first and every later chunk of a stream.
            Default: no limit of its own (only ``timeout``), so a hung first route can use
            up the whole call; set it when the chain has more than one route. A silent
            route is retried only while a retry as silent would leave the next route its
            own ``attempt_timeout``. Per call: ``chat(..., attempt_timeout=...)``.
        max_input_tokens: refuse requests with more input tokens than this.
        input_filters: guardrails run on each validated request, in order: each returns a
            replacement request or ``None`` (keep it), or raises
            :class:`~llmguard_sdk.errors.GuardrailRejectedError`. A filter may be
            ``async def`` (or return an awaitable): :meth:`achat`, async streams and the
            async drop-in clients await it on their event loop (a plain one runs on the loop
            as it is); :meth:`chat` runs it on an event loop of its own in a worker thread
            (so a client it keeps must not be tied to one loop). Its wait is bounded by the
            call's ``timeout``: past it, the call raises
            :class:`~llmguard_sdk.errors.ProviderTimeoutError`.
        output_filters: guardrails run on each response, in order, as ``input_filters``
            are (async ones too; an answer the provider billed and a filter refused, or
            outwaited the deadline on, is charged as unserved): a provider's, the
            degraded one and a cached one (the cache keeps answers as served, so a hit
            passes them again: ``response.route == "cache"`` tells it). A stream's
            assembled answer is filtered after its last chunk. (Async filters: new in 0.2.0.)
        hooks: callables that receive a :class:`~llmguard_sdk.CallEvent` after every call
            (one refused before its first attempt too: ``outcome="error"``, no attempt).
        budgets: spend budgets (:class:`~llmguard_sdk.budget.Budgets`, or a list of
            :class:`~llmguard_sdk.budget.Budget`): each call's worst-case cost is reserved on
            every budget that applies before the route loop (all or nothing, shared through
            Redis with a Redis store), settled to the served response's cost afterwards and
            released when the call fails; a call that does not fit is refused
            (:class:`~llmguard_sdk.errors.BudgetExceededError`), downgraded or sent to the
            local model, as the budget says.
        prices: the :class:`~llmguard_sdk.budget.PriceTable` that prices responses whose
            provider reported no cost (``cost_usd``, ``cost_source="estimated"``), the
            budgets and the releases: one table for the whole Guard, given here, in
            ``Budgets(prices=)`` or in ``ReleasePlan(prices=)`` (two of them naming tables
            that differ: a :class:`~llmguard_sdk.errors.ConfigurationError`); default:
            :meth:`PriceTable.default_table() <llmguard_sdk.budget.PriceTable.default_table>`,
            ``genai-prices`` (on Python 3.11 or newer) over the table shipped with the package.
        cache: a :class:`~llmguard_sdk.cache.ResponseCache` (exact and semantic answers,
            partitioned by tenant), or ``True`` for one with default settings in the Guard's
            store. A hit answers without any provider call (``route="cache"``, no tokens, no
            spend); provider answers are stored after the call; when every route fails, a
            stale entry is served before the ``degraded`` answer. Per call:
            ``chat(..., cacheable=False)`` skips it, ``cache_tags=[...]`` adds permission
            tags to the partition, ``cache_refresh=True`` replaces the entry with a new
            answer, ``cache_ttl`` and ``cache_max_age`` bound its life and the age served.
        tasks: a :class:`~llmguard_sdk.TaskRouter`: rules and a classifier choose each
            call's tier (a part of the chain) or :class:`~llmguard_sdk.Cascade` (small tier
            first, escalating when a check rejects its answer). See :mod:`llmguard_sdk.router`.
        telemetry: OpenTelemetry spans and metrics and a log record per call
            (:class:`~llmguard_sdk.telemetry.Telemetry`); ``True`` (default) uses the global
            tracer and meter providers, which are no-ops until the application configures
            the OpenTelemetry SDK; ``False`` turns it off.
        key_prefix: prefix of every Redis key (default ``llmguard``).
        release: a :class:`~llmguard_sdk.releases.Release` (its routes replace
            ``providers``) or a :class:`~llmguard_sdk.releases.ReleasePlan` (a candidate
            under a canary and/or a shadow); see :mod:`llmguard_sdk.releases`.
        environ: the environment to read ``LLMGUARD_*`` from (default ``os.environ``).

    Arguments given here win over the environment. A bad value raises
    :class:`~llmguard_sdk.errors.ConfigurationError` at once, before any call.
    Building a Guard starts loading the tokenizer encodings its calls count with
    (``cl100k_base`` and its routes' models' own where available offline) and the
    ``genai-prices`` data its price table reads in background threads, so that no call spends
    its deadline loading them and the construction does not wait for them; a first async call
    made while they load waits for them in a worker thread, never on the event loop.

    Example::

        guard = Guard(OpenAICompatibleProvider(base_url, api_key=key, model="gpt-4o-mini"))
        answer = guard.chat([{"role": "user", "content": "Hello"}], tenant="acme")
        print(answer.text, answer.usage, answer.route)
    """

    def __init__(
        self,
        providers: Provider | DeploymentGroup | Sequence[Provider | DeploymentGroup] | None = None,
        *,
        store: str | Store | None = None,
        timeout: float | None = None,
        attempt_timeout: float | None = None,
        retry: RetryPolicy | None = DEFAULT_RETRY,
        retry_budget: RetryBudgetPolicy | None = DEFAULT_RETRY_BUDGET,
        continue_interrupted_streams: bool = False,
        breaker: BreakerPolicy | Breakers | None = DEFAULT_BREAKER,
        breaker_hooks: Sequence[BreakerHook] = (),
        moves_on: Callable[[ProviderError], bool] | None = None,
        degraded: str | None = None,
        hedge_after: float | None = None,
        rate_limits: LimitsConfig | None = None,
        max_input_tokens: int | None = None,
        input_filters: Sequence[InputFilter] = (),
        output_filters: Sequence[OutputFilter] = (),
        hooks: Sequence[Hook] = (),
        key_prefix: str | None = None,
        environ: Mapping[str, str] | None = None,
        budgets: Budgets | Sequence[Budget] | None = None,
        prices: PriceTable | None = None,
        cache: ResponseCache | bool | None = None,
        telemetry: Telemetry | bool = True,
        tasks: TaskRouter | None = None,
        release: Release | ReleasePlan | None = None,
    ) -> None:
        wiring.arguments(
            environ=environ, store=store, breaker=breaker, moves_on=moves_on,
            degraded=degraded, continue_streams=continue_interrupted_streams,
            hedge_after=hedge_after,
        )  # fmt: skip
        self.settings, blank = GuardSettings._read_env(  # (one read of the environment)
            environ,
            store=store if isinstance(store, str) else None,
            timeout=timeout,
            attempt_timeout=attempt_timeout,
            max_input_tokens=max_input_tokens,
            key_prefix=key_prefix,
        )
        retry = wiring.retry_policy(retry, retry_budget, self.settings.retry_attempts)
        routes = wiring.routes(providers := wiring.chain(release, providers), self.settings, blank)
        input_filters = wiring.callables("input_filters", input_filters, awaited=True)
        output_filters = wiring.callables("output_filters", output_filters, awaited=True)
        hooks = wiring.callables("hooks", hooks)
        breaker_hooks = wiring.callables("breaker_hooks", breaker_hooks)
        self.store: Store = open_store(
            store if isinstance(store, Store) else self.settings.store,
            key_prefix=self.settings.key_prefix,
        )
        observer = wiring.telemetry(telemetry)
        self._stages = Stages(
            routes=routes,
            routing=wiring.routing(providers, self.store),
            timeout=self.settings.timeout,
            attempt_timeout=self.settings.attempt_timeout,
            max_input_tokens=self.settings.max_input_tokens,
            input_filters=tuple(input_filters),
            output_filters=tuple(output_filters),
            hooks=tuple(hooks),
            retry=retry,
            retry_budget=wiring.retry_budget(retry_budget if retry else None, self.store),
            continue_streams=continue_interrupted_streams,
            breakers=(breakers := wiring.breakers(breaker, breaker_hooks, self.store, observer)),
            prober=wiring.prober(breakers),
            moves_on=moves_on,
            degraded_text=degraded,
            hedge_after=hedge_after,
            limiter=wiring.limiter(_cap_pools(routes, rate_limits), self.store, routes),
            spend=wiring.spend(budgets, prices, routes, self.store, observer, release),
            cache=wiring.cache(cache, self.store),
            telemetry=observer,
            propagated=wiring.propagated(observer, providers, routes),
            tasks=wiring.tasks(tasks, providers, routes),
            releases=wiring.releases(release, self.store, prices, observer, budgets),
        )
        _start_loading(routes, self._stages)  # meanwhile, not in a call's deadline

    def __repr__(self) -> str:
        names = ", ".join(route.name for route in self.routes)
        return f"Guard(routes=[{names}], store={self.store!r})"

    @property
    def breakers(self) -> Breakers | None:
        """The routes' circuit breakers (``isolate``, ``reset``, ``state``), if on."""
        return self._stages.breakers

    @property
    def releases(self) -> ReleaseControl | None:
        """The Guard's releases (``status()``, ``promote()``, ``rollback()``, ``shadow``),
        if ``release`` was given.

        .. versionadded:: 0.2.0
        """
        return self._stages.releases

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The routes' rate limiter (``in_flight``, ``reserve`` ...), if ``rate_limits`` were
        given.

        .. versionadded:: 0.2.0
        """
        return self._stages.limiter

    @classmethod
    def from_config(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> Guard:
        """A Guard from a configuration: a dict, or a TOML, YAML or JSON file (default: the
        file ``LLMGUARD_CONFIG`` names). The file gives the routes (provider shortcuts such as
        ``openai/gpt-4o-mini``, deployment groups, the local model) and settings (``timeout``,
        ``store`` ...); ``options`` are any other :class:`Guard` arguments and win over the
        file's settings (``None`` keeps the file's). An option the Guard does not take, one
        that would replace the file's routes (``providers``, ``release``) and ``tasks`` beside
        the file's ``[tasks]`` raise :class:`~llmguard_sdk.errors.ConfigurationError` naming
        it. Keys are ``${VARIABLE}`` references read from ``environ`` (default
        ``os.environ``), never stored in the file. A bad configuration raises
        :class:`~llmguard_sdk.errors.ConfigurationError` naming the file and the key.
        ``llmguard check FILE`` validates one and prints its routes.

        .. versionadded:: 0.2.0
        """
        from ._config_file import (  # (the file's schema: a Guard built in code needs none)
            config_source,
            load_config,
            naming,
            options_for,
            resolve,
            tasks_of,
        )

        parameters = inspect.signature(cls).parameters  # (a subclass's own, **kwargs: any)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        accepted = None if takes_any else [*parameters][1:]  # (not providers)
        options_for(options, accepted)  # (before the file is read: a typo is said first)
        env = _text_environ(environ, "Guard.from_config")  # (read before the Guard is built)
        source = config_source(source, env)
        with naming(source):
            config = load_config(source)
            options = options_for(options, accepted, config)
            entries, _routes = resolve(config, env)
            tasks = tasks_of(config, entries)
            settings = {**config.settings(env), **({"tasks": tasks} if tasks is not None else {})}
        return cls(entries, **{**settings, **options}, environ=env)

    @property
    def routes(self) -> tuple[Provider, ...]:
        """The routes of the fallback chain, in the order they are tried."""
        return self._stages.routes

    def budget_status(self, **scope: Unpack[BudgetScope]) -> list[CounterStatus]:
        """What is left of each spend budget a call of this scope counts on: per counter its
        ``scope``, ``window``, ``limit_usd``, settled ``spent_usd``, ``held_usd`` (by calls in
        flight) and ``resets_at`` (epoch seconds); ``[]`` without budgets. Shared budgets are
        read from Redis (``llmguard budget status`` reads them without a Guard).

        .. versionadded:: 0.2.0
        """
        spend = self._stages.spend
        if spend is None:
            return []
        return spend.status(**scope)

    async def abudget_status(self, **scope: Unpack[BudgetScope]) -> list[CounterStatus]:
        """Async twin of :meth:`budget_status`.

        .. versionadded:: 0.2.0
        """
        spend = self._stages.spend
        if spend is None:
            return []
        return await spend.astatus(**scope)

    # -- chat ---------------------------------------------------------------------------------

    @overload
    def chat(
        self,
        messages: MessagesArg | None = ...,
        *,
        stream: Literal[False] = ...,
        **options: Unpack[ChatOptions],
    ) -> ChatResponse: ...

    @overload
    def chat(
        self,
        messages: MessagesArg | None = ...,
        *,
        stream: Literal[True],
        **options: Unpack[ChatOptions],
    ) -> ChatStream: ...

    @overload
    def chat(
        self,
        messages: MessagesArg | None = ...,
        *,
        stream: bool,
        **options: Unpack[ChatOptions],
    ) -> ChatResponse | ChatStream: ...

    def chat(
        self,
        messages: MessagesArg | None = None,
        *,
        stream: bool = False,
        **options: Unpack[ChatOptions],
    ) -> ChatResponse | ChatStream:
        """Send a chat completion through the pipeline.

        Pass ``messages`` (dicts or :class:`~llmguard_sdk.Message`) with request parameters
        as keywords (``max_tokens=``, ``temperature=``, ``tools=`` ...), or a ready
        :class:`~llmguard_sdk.ChatRequest` as ``request=``. ``tenant``, ``feature`` and
        ``user`` set the call's scope; ``timeout`` its total time in seconds;
        ``attempt_timeout`` how long one route may stay silent in it (a stream: before each
        chunk), in place of the Guard's.
        With a ``cache``, ``cacheable=False`` skips it for this call and ``cache_tags``
        (permission tags) further partition what this call may read and write;
        ``cache_refresh``, ``cache_ttl`` and ``cache_max_age`` are the call's own cache
        controls (see :class:`~llmguard_sdk.ChatOptions`).
        :class:`~llmguard_sdk.ChatOptions` lists every keyword.

        With ``stream=True`` it returns a :class:`~llmguard_sdk.ChatStream` of chunks.
        Raises :class:`~llmguard_sdk.errors.RequestValidationError` before any network call
        when the request is invalid, and a
        :class:`~llmguard_sdk.errors.ProviderError` (one route) or
        :class:`~llmguard_sdk.errors.AllRoutesFailedError` when no route could answer.
        """
        ctx = call_context(self._stages, messages, options, stream=stream, reported=True)
        if stream:  # (checked: True or False)
            return chat_stream(ctx, self._stages)  # a cascade's: buffered
        with reporting(ctx, self._stages, "chat") as outcome:
            return outcome.served(complete_call(ctx, self._stages))

    @overload
    async def achat(
        self,
        messages: MessagesArg | None = ...,
        *,
        stream: Literal[False] = ...,
        **options: Unpack[ChatOptions],
    ) -> ChatResponse: ...

    @overload
    async def achat(
        self,
        messages: MessagesArg | None = ...,
        *,
        stream: Literal[True],
        **options: Unpack[ChatOptions],
    ) -> AsyncChatStream: ...

    @overload
    async def achat(
        self,
        messages: MessagesArg | None = ...,
        *,
        stream: bool,
        **options: Unpack[ChatOptions],
    ) -> ChatResponse | AsyncChatStream: ...

    async def achat(
        self,
        messages: MessagesArg | None = None,
        *,
        stream: bool = False,
        **options: Unpack[ChatOptions],
    ) -> ChatResponse | AsyncChatStream:
        """Async twin of :meth:`chat`; ``stream=True`` gives an :class:`AsyncChatStream`."""
        if _lazy.loading:  # the Guards' loads under way: waited for off the event loop
            within = _seconds_or(options.get("timeout"), self._stages.timeout)
            await loads_awaited(self._stages, options, stream=stream, within=within)
        plan = call_contexts(self._stages, messages, options, stream=stream, reported=True)
        ctx = await filters.arun(plan)  # (an async input filter awaited on this loop)
        if stream:  # (checked: True or False)
            return achat_stream(ctx, self._stages)
        with reporting(ctx, self._stages, "chat") as outcome:  # cancelled: reported as such
            return outcome.served(await acomplete_call(ctx, self._stages))


def _seconds_or(value: object, default: float) -> float:
    """``value`` where it is a sound timeout (seconds > 0), else ``default`` (the call's
    checks refuse a bad one after)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def _start_loading(routes: Sequence[Provider], stages: Stages) -> None:
    """Start loading, in background threads, what a Guard's calls read on first use: the
    tokenizer encodings its routes count with (where a stage counts tokens:
    :func:`_counts_tokens`), the price data of its price table, numpy for a semantic cache's
    vectors (:meth:`Guard.achat` waits for them off the event loop:
    :func:`~llmguard_sdk._lazy.aloaded`). anyio's event-loop backend is imported first, here:
    the first async call would import it on the loop's thread, behind those loads."""
    _lazy.import_event_loop_backends()
    started = [tokens.warm(route.model for route in routes) if _counts_tokens(stages) else None]
    if stages.spend is not None:
        started.append(stages.spend.prices._warm())
    if stages.cache is not None and stages.cache.semantic:
        started.append(_lazy.warm("numpy"))
    _lazy.track(started)


def _counts_tokens(stages: Stages) -> bool:
    """Whether a stage of the Guard counts tokens with tiktoken: a ``max_input_tokens``
    bound, a rate limit, budgets (a call's hold), deployment groups (``cheapest`` ranks by
    the count), task routing (a rule may ask for it), a semantic cache (its hashing
    embedder), a degraded answer or continued streams (their usage is counted). A Guard with
    none counts only an answer its provider reported no usage for: its first call does not
    pay for loading the encodings (a tenth of a second of CPU or more), and such a count
    loads them then."""
    cache = stages.cache
    return (
        stages.max_input_tokens is not None
        or stages.limiter is not None
        or (stages.spend is not None and stages.spend.active)
        or stages.routing is not None
        or stages.tasks is not None
        or (cache is not None and cache.semantic)
        or stages.degraded_text is not None
        or stages.continue_streams
    )
