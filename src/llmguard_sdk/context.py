"""The object that flows through the pipeline: one :class:`CallContext` per guarded call.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .models import ChatRequest, Usage
from .tokens import TokenCount, count_request_tokens, recounted

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ._core.tasks import TaskChoice
    from .providers.base import Provider
    from .router.groups import CallFacts, DeploymentGroup

__all__ = [
    "AttemptRecord",
    "CallContext",
    "CallEvent",
    "Hook",
    "RetryDetails",
    "Scope",
    "current_scope",
    "emit",
    "scoped",
]

logger = logging.getLogger("llmguard_sdk")


@dataclass(frozen=True)
class Scope:
    """Who a call is for: tenant, feature and end user (each optional).

    Budgets, rate limits and caches are keyed by scope; tenant ids are hashed before they go
    into any shared key.
    """

    tenant: str | None = None
    feature: str | None = None
    user: str | None = None

    def merged(self, tenant: str | None, feature: str | None, user: str | None) -> Scope:
        """This scope with the given non-``None`` values taking precedence."""
        return Scope(
            tenant=tenant if tenant is not None else self.tenant,
            feature=feature if feature is not None else self.feature,
            user=user if user is not None else self.user,
        )


_NO_SCOPE = Scope()
_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "llmguard_scope", default=None
)


def current_scope() -> Scope:
    """The scope set by the innermost :func:`scoped` block (empty outside any)."""
    return _SCOPE.get() or _NO_SCOPE


@contextlib.contextmanager
def scoped(
    *, tenant: str | None = None, feature: str | None = None, user: str | None = None
) -> Iterator[Scope]:
    """Set the scope of every guarded call made inside the block, in this thread or task.

    Tasks started inside the block copy it (asyncio and anyio copy the context); a thread does
    not (``threading.Thread``, ``ThreadPoolExecutor.submit``): run its function in the block's
    context, ``executor.submit(contextvars.copy_context().run, fn, ...)``.

    Handy where calls go through :meth:`Guard.client` or :meth:`Guard.protect`, whose
    signatures have no room for a tenant::

        with llmguard_sdk.scoped(tenant="acme", feature="support"):
            client.chat.completions.create(...)

    Explicit keywords on a call win over the block's values; nested blocks merge.
    """
    scope = current_scope().merged(tenant, feature, user)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


@dataclass(frozen=True)
class RetryDetails:
    """What a retry hook receives, once per retry, before the wait; and what a give-up hook
    (``give_up_hooks=`` of :func:`~llmguard_sdk.retry.retry`) receives, once, when the
    retries stop on a failure they would have retried.

    ``attempt`` is the number of the attempt that failed (1-based; on giving up, the
    attempts made), ``wait`` the seconds until the next one (0 on giving up), ``cause`` the
    exception (a result that ``on_result=`` retried:
    :class:`~llmguard_sdk.errors.RejectedResultError`, its ``result`` the attempt's),
    ``elapsed`` the seconds since the first attempt, ``hinted`` whether the wait came from
    the server (Retry-After and friends), ``waited`` the seconds of the waits before this
    attempt (the retries' ``wait`` summed: what the call spent waiting so far), ``reason``
    ``"retry"``, or on giving up why (:class:`~llmguard_sdk.retry.Decision`'s ``reason``:
    ``"attempts-exhausted"``, ``"deadline"``, ``"budget-exhausted"``, ``"stream-delivered"``
    ...).

    .. versionchanged:: 0.2.0 ``waited`` and ``reason``; give-up hooks.
    """

    name: str
    attempt: int
    wait: float
    cause: BaseException
    elapsed: float
    hinted: bool = False
    waited: float = 0.0
    reason: str = "retry"


@dataclass(slots=True)
class AttemptRecord:
    """One provider attempt of a call, for telemetry: which route, when (``time.monotonic``
    instants), how it ended (``error`` None = success; ``ended`` None = abandoned or
    cancelled), the first content token and the gaps between content chunks of a stream,
    and the wait before the retry that followed it. ``span``: its span, where it was started
    as the attempt began (its request carried the span's trace context)."""

    route: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    error: BaseException | None = None
    first_token_at: float | None = None
    chunk_gaps: list[float] = field(default_factory=list)
    retry_wait: float | None = None
    span: Span | None = None

    def end(self, error: BaseException | None = None) -> None:
        """Mark the attempt finished (the first call wins)."""
        if self.ended is None:
            self.ended = time.monotonic()
            self.error = error


@dataclass(slots=True)
class CallContext:
    """Everything one guarded call carries through the pipeline's stages.

    ``deadline`` is a :func:`time.monotonic` instant; ``route_errors`` collects the error of
    each route that failed before one served the call.
    """

    request: ChatRequest
    scope: Scope
    deadline: float
    started: float = field(default_factory=time.monotonic)
    input_count: TokenCount | None = None
    input_model: str | None = None  # the model input tokens are counted for (default: request's)
    route_counts: dict[str, TokenCount] = field(default_factory=dict)  # per route's model
    tokenizer_counts: dict[str, TokenCount] = field(default_factory=dict)  # per route (its own)
    hedge_after: float | None = None
    # seconds one route may stay silent (a plain call's whole answer, each chunk of a
    # stream): the call's own, else the Guard's; None: only the deadline
    attempt_timeout: float | None = None
    priority: Literal["interactive", "batch"] = "interactive"
    attempts: int = 0
    route: str | None = None
    first_token_at: float | None = None
    route_errors: dict[str, BaseException] = field(default_factory=dict)
    # attempts that went out and did not serve the call, each (route, what it used as far
    # as known): streams broken after content that another route continued, attempts cut
    # off after their request was sent (a hedge race's loser, a call cancelled or timed
    # out, a stream closed early), answers an output filter refused. The provider bills
    # them: the call's cost (or spend) includes them.
    unserved: list[tuple[str, Usage]] = field(default_factory=list)
    # what a call that ended without an answer cost (USD): its ``unserved`` attempts priced
    # (and a cascade's tiers tried before), as its budgets were charged; set as it ends
    # (None: nothing went out, or no price)
    unserved_usd: float | None = None
    # the request the attempts after an interrupted stream send (the request, the partial
    # answer, the instruction to go on), and the input tokens it adds to the request as the
    # call counts them (its budget's figure); each route's figure, as it counts, once a route
    continuation: ChatRequest | None = None
    continued_input: int = 0
    continued_counts: dict[str, int] = field(default_factory=dict)
    retries: list[RetryDetails] = field(default_factory=list)
    cacheable: bool = True
    cache_tags: tuple[str, ...] = ()
    cache_refresh: bool = False  # read nothing from the cache, store the answer
    cache_ttl: float | None = None  # the stored answer's own ttl
    cache_max_age: float | None = None  # serve only an entry stored less long ago
    cache_skipped: bool = False  # the response cache skipped the call (opted out, sampled ...)
    started_ns: int = field(default_factory=time.time_ns)
    attempt_log: list[AttemptRecord] = field(default_factory=list)
    rate_wait_s: float = 0.0
    trace_parent: object = None
    span: Span | None = None  # the call's span, where started as its first traced attempt began
    route_order: tuple[Provider, ...] = ()  # this call's routes, ranked (deployment groups)
    # the groups ranked for the call and not reached yet: the turn and facts each ranked at
    # (reaching one takes the call there: see DeploymentGroup.reach)
    unreached: dict[DeploymentGroup, tuple[int, CallFacts]] = field(default_factory=dict)
    # the routes at the end of ``route_order`` tried only once the others failed (a canary
    # call's: the current release's); no hedge races them
    fallback_routes: tuple[Provider, ...] = ()
    region: str | None = None  # the region whose deployments the call prefers
    # the deployment group (or route outside groups) its model= selected (it starts there)
    group: str | None = None
    task: TaskChoice | None = None  # the call's tier (task routing) and cascade record
    release: str | None = None  # the release serving the call (name@version), if any
    prompt_version: str | None = None  # that release's prompt_version, if it has one
    arm: Literal["control", "canary", "shadow"] | None = None  # its side of the release
    # the version of the canary stage its arm was chosen at (None: no canary stage read):
    # its outcome and feedback count toward that stage's evidence, none other's
    stage_version: int | None = None
    base_request: ChatRequest | None = None  # the request before the release applied itself

    def begin_attempt(self, route: str) -> AttemptRecord:
        """Start recording one provider attempt (see :class:`AttemptRecord`)."""
        record = AttemptRecord(route)
        self.attempt_log.append(record)
        return record

    def unserved_usage(self) -> Usage | None:
        """The tokens of the call's ``unserved`` attempts, summed (``estimated`` where any
        was counted here, not reported): what a call that ended without an answer was
        charged for; None when none went out."""
        if not self.unserved:
            return None
        used = [usage for _route, usage in self.unserved]
        return Usage(
            input_tokens=sum(u.input_tokens for u in used),
            output_tokens=sum(u.output_tokens for u in used),
            estimated=any(u.estimated for u in used),
        )

    def input_tokens(self) -> TokenCount:
        """The request's input tokens, counted once, when a stage first needs them."""
        if self.input_count is None:
            self.input_count = count_request_tokens(self.request, self.input_model)
        return self.input_count

    def count_input_for(self, model: str | None) -> None:
        """Count the request's input tokens as ``model`` does from now on (None: as the
        request's model). A count taken already (a ``cheapest`` ranking's, a task rule's)
        stays when ``model``'s encoding took it: the request is not encoded twice."""
        if self.input_count is not None:
            self.input_count = recounted(self.input_count, self.request, model)
        self.input_model = model

    def continue_with(self, continuation: ChatRequest) -> None:
        """The call's attempts send ``continuation`` from now on (an interrupted stream's):
        what it adds to the request is counted as the call counts the request; each route
        counts it its own way when it asks (see ``_core.limits.continued_input``)."""
        self.continuation = continuation
        self.continued_counts.clear()
        sent = count_request_tokens(continuation, self.input_model).tokens
        self.continued_input = max(0, sent - self.input_tokens().tokens)

    def sent_input_tokens(self) -> int:
        """Input tokens of the request the call's attempts send now: the request's, plus what
        a continuation of an interrupted stream adds."""
        return self.input_tokens().tokens + self.continued_input

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once it has passed)."""
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the call started."""
        return time.monotonic() - self.started


@dataclass(frozen=True)
class CallEvent:
    """What happened in one guarded call; every hook of the Guard receives one.

    ``kind`` is ``"chat"``, ``"stream"`` or ``"protect"``; ``outcome`` is ``"ok"``, ``"error"``
    or ``"cancelled"`` (a stream closed or dropped before its end, a call cancelled or
    interrupted: no ``error``). ``scope`` is the call's tenant, feature and user as given
    (not hashed: hooks run in your process; spans hash the tenant, metrics carry neither id).
    ``model`` is the model that answered, else the one the call asked for (None when it
    named none). ``attempts`` counts the provider requests the Guard made (0: a cache hit, or
    refused before its first). ``latency_s`` is the seconds from the call to its end (a
    stream's: to its last chunk, its failure or its close); ``first_token_s`` the seconds from
    the call to the first content the caller received (streams; None for a plain call);
    ``usage`` the served response's token counts (None without an answer; a ``"protect"``
    call's stream closed or dropped early: what it used so far, ``estimated`` where counted).
    ``route`` is the route that served the
    call (``None`` when none did); ``route_errors`` names the error type of each route that
    failed first, as ``error.type`` on the spans names it: the class's fully qualified name
    (``llmguard_sdk.errors.ProviderUnavailableError``; a builtin's bare, ``TimeoutError``);
    ``retries`` holds one :class:`RetryDetails` per retry the Guard made.
    ``cost_usd`` / ``cost_source`` are the served response's (see :class:`ChatResponse`); a
    call that ended without an answer (failed, cancelled, a stream closed early) reports what
    its attempts that went out cost, as its budgets were charged for them (their prompts, a
    stream's delivered part; ``"estimated"``), or None when no request went out.
    ``provider`` is, for a ``"protect"`` call, the provider of the SDK the function used as
    the GenAI conventions name it (``"openai"``, ``"anthropic"``; ``"unknown"`` when nothing
    told it); ``route`` is then the label given to ``guard.protect`` (a failed call's is
    in ``route_errors``).
    A call the Guard refused before its first attempt (an invalid request or ``stream=``, an
    input guardrail's refusal, one over ``max_input_tokens``, arguments a drop-in client or
    the transport seam refused) is an ``"error"`` too, with ``attempts`` 0, no route and no
    cost; its ``model`` is the one the call asked for.

    .. versionchanged:: 0.2.0 a call without an answer reports what its budgets charged; a
       call refused before its first attempt reaches the hooks; ``route_errors`` names each
       error's class by its fully qualified name (it was the bare class name).
    """

    kind: Literal["chat", "stream", "protect"]
    outcome: Literal["ok", "error", "cancelled"]
    scope: Scope
    model: str | None
    route: str | None
    attempts: int
    latency_s: float
    first_token_s: float | None = None
    usage: Usage | None = None
    error: BaseException | None = None
    route_errors: tuple[tuple[str, str], ...] = ()
    retries: tuple[RetryDetails, ...] = ()
    cost_usd: float | None = None
    cost_source: Literal["reported", "estimated", "cached"] | None = None
    provider: str | None = None


Hook = Callable[[CallEvent], None]
"""Receives a frozen :class:`CallEvent` after every guarded call."""


def emit(hooks: Sequence[Hook], call_event: CallEvent) -> None:
    """Give ``call_event`` to every hook; a failing hook is logged, never breaks the call."""
    for hook in hooks:
        try:
            hook(call_event)
        except Exception:
            logger.exception("llmguard hook %r failed", hook)
