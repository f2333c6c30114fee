"""The exceptions llmguard-sdk raises, as one tree.

Catch :class:`LLMGuardError` to catch everything the SDK raises itself::

    LLMGuardError
    ├── ConfigurationError          bad Guard / provider configuration (raised before any call)
    │   ├── UnknownModelPriceError  a budgeted route's model (at build) or call's model (at the
    │   │                           call, on a route without one) has no price and no default
    │   ├── MovingModelAliasError   a release pins a moving model alias (``gpt-4o``), not an id
    │   └── SettingsValidationError GuardSettings refused a value (pydantic's ValidationError too)
    ├── RequestValidationError      the request itself is invalid (raised before any network call)
    │   ├── InputTooLargeError      more input tokens than the Guard's max_input_tokens
    │   ├── GuardrailRejectedError  an input or output filter refused the call
    │   ├── UnknownModelError       model= names no deployment group and no model the routes serve
    │   └── PromptLintError         a strict PromptBuilder found cache-breaking static text
    ├── ProviderError               a provider answered badly or not at all
    │   ├── RateLimitedError            429 (carries retry_after from Retry-After / retry-after-ms)
    │   ├── ProviderUnavailableError    5xx, 529, 409, 425, connection refused / reset
    │   │   └── EmptyStreamError        a 200 stream that ended without any answer
    │   ├── ProviderTimeoutError        no answer within the call's deadline, or 408
    │   ├── ProviderBusyError           a local model's queue is full: refused at once
    │   ├── BadRequestError             400, 404, 422: the provider refused the request
    │   │   ├── ContextLengthExceededError
    │   │   ├── ContentPolicyError      a content filter refused it (carries the code)
    │   │   └── UnsupportedRequestError not for this route (a tool call, an image: a local model)
    │   ├── AuthenticationError         401, 403
    │   ├── MalformedResponseError      bad JSON, wrong content type, missing fields
    │   └── StreamInterruptedError      a stream broke after it started (never replayed)
    ├── ReleaseConflictError        a canary moved by hand kept being moved by other processes
    ├── CanaryNotFoundError         a canary moved by hand is not under way (none stored, or
    │                               forgotten: 30 days unserved and unmoved)
    ├── StoreUnavailableError       the shared store (Redis) was needed and could not be reached
    ├── RejectedResultError         ``retry(on_result=...)`` ran out on a result it asked to retry
    ├── RefusedError                the SDK refused to send the call (carries retry_after)
    │   ├── CircuitOpenError            the route's circuit breaker is open
    │   ├── RateLimitExceededError      no rate-limit capacity within the allowed wait
    │   └── BudgetExceededError         a spend budget is exhausted
    │       └── BudgetUnavailableError  the budgets' Redis is unreachable (fail closed)
    └── AllRoutesFailedError        every route of the fallback chain failed (carries each error)

Warnings stand outside the tree: :class:`RetryMultiplicationWarning`, issued when retries stack on
retries (an openai client retrying inside ``guard.protect``), :class:`UnknownSettingWarning`,
:class:`RateLimitConfigWarning`, :class:`BatchSplitWarning` and :class:`LocalContextWarning`.

Every :class:`ProviderError` knows the ``route`` that raised it, the HTTP ``status_code`` (if
any), the response ``headers`` (Retry-After, ``x-ratelimit-*`` ...), and whether it is
``retryable`` by the SDK's rules (an ``x-should-retry: true|false`` header on the answer
overrides the status's rule, as openai-python reads it). An error event inside a stream
is the error its ``type`` or ``code`` names, with the HTTP status that kind comes with
(``rate_limit_error``: RateLimitedError, 429; ``invalid_request_error``: BadRequestError,
400; ``timeout_error``: ProviderUnavailableError, 504 ...), as the same error answered over
HTTP is. Nothing here is ever raised for a caller's own bug: an exception raised inside a
user callback propagates unchanged.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from ._warnings import (  # (defined beside: exported here, outside the tree)
    BatchSplitWarning,
    LocalContextWarning,
    RateLimitConfigWarning,
    RetryMultiplicationWarning,
    UnknownSettingWarning,
)
from .telemetry.redaction import redact_secrets

__all__ = [
    "AllRoutesFailedError",
    "AuthenticationError",
    "BadRequestError",
    "BatchSplitWarning",
    "BudgetExceededError",
    "BudgetUnavailableError",
    "CanaryNotFoundError",
    "CircuitOpenError",
    "ConfigurationError",
    "ContentPolicyError",
    "ContextLengthExceededError",
    "EmptyStreamError",
    "GuardrailRejectedError",
    "InputTooLargeError",
    "LLMGuardError",
    "LocalContextWarning",
    "MalformedResponseError",
    "MovingModelAliasError",
    "PromptLintError",
    "ProviderBusyError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitConfigWarning",
    "RateLimitExceededError",
    "RateLimitedError",
    "RefusedError",
    "RejectedResultError",
    "ReleaseConflictError",
    "RequestValidationError",
    "RetryMultiplicationWarning",
    "SettingsValidationError",
    "StoreUnavailableError",
    "StreamInterruptedError",
    "UnknownModelError",
    "UnknownModelPriceError",
    "UnknownSettingWarning",
    "UnsupportedRequestError",
]


class LLMGuardError(Exception):
    """Base class of every exception llmguard-sdk raises itself.

    Every one pickles and copies as itself (attributes included), so it crosses process
    boundaries (process pools, multiprocessing, task queues) intact.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls the class with ``args`` (the message alone here), which
        # most of these __init__s do not take: rebuild without __init__, then restore vars.
        return (_rebuilt, (type(self), self.args), self.__dict__)


def _rebuilt(cls: type[LLMGuardError], args: tuple[Any, ...]) -> LLMGuardError:
    error = cls.__new__(cls, *args)
    error.args = args
    return error


class ConfigurationError(LLMGuardError, ValueError):
    """The Guard, a provider or an environment variable is configured wrongly."""


class UnknownModelPriceError(ConfigurationError):
    """The price table has no price for this model and no default price.

    ``provider`` and ``model`` name what was looked up. A budgeted Guard raises it as it is
    built for a route's own model; for the model a call names on a route without one, at that
    call, before anything is held or sent.

    .. versionadded:: 0.2.0
    """

    def __init__(self, provider: str | None, model: str) -> None:
        where = f"{provider}/{model}" if provider else model
        super().__init__(
            f"no price for model {where!r}: add it with PriceTable.with_prices(...) or give "
            "the table a default price (PriceTable(default=Price(...)))"
        )
        self.provider = provider
        self.model = model


class MovingModelAliasError(ConfigurationError):
    """A :class:`~llmguard_sdk.releases.Release` names a model by a moving alias (``gpt-4o``,
    ``claude-sonnet-4-5``, ``...-latest``) whose behaviour the provider may change under it;
    pin a dated id or pass ``allow_alias=True``. ``model`` and ``route`` name it.

    .. versionadded:: 0.2.0
    """

    def __init__(self, model: str, route: str) -> None:
        super().__init__(
            f"route {route!r} names model {model!r}, a moving alias: pin a dated id "
            "(gpt-4o-2024-08-06, claude-sonnet-4-5-20250929 ...) or pass allow_alias=True"
        )
        self.model = model
        self.route = route


class RequestValidationError(LLMGuardError, ValueError):
    """The request is invalid; it was refused before any network call.

    ``details`` holds the individual problems (pydantic's error dicts when a model failed).
    """

    def __init__(self, message: str, details: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.details: list[Mapping[str, Any]] = list(details)


class InputTooLargeError(RequestValidationError):
    """The request has more input tokens than the Guard allows per request."""

    def __init__(self, tokens: int, limit: int, *, estimated: bool) -> None:
        kind = "about " if estimated else ""
        super().__init__(f"request has {kind}{tokens} input tokens, the limit is {limit}")
        self.tokens = tokens
        self.limit = limit
        self.estimated = estimated


class GuardrailRejectedError(RequestValidationError):
    """An input or output filter refused the call.

    Raise it from your own filter to refuse a call with a reason; ``stage`` is ``"input"`` or
    ``"output"`` (the Guard fills it in when a filter left it empty).
    """

    def __init__(self, reason: str, *, stage: str = "") -> None:
        super().__init__(f"guardrail rejected the call: {reason}")
        self.reason = reason
        self.stage = stage


class UnknownModelError(RequestValidationError):
    """A call's ``model=`` names no deployment group of the Guard and no model its routes
    serve, and every route has a model of its own, so the name would have been ignored (the
    call served by whatever the chain's first route is). ``model`` is the name asked for;
    ``groups`` the Guard's deployment-group names (what ``model=`` selects); ``models`` the
    models its routes serve. The transport seam and the drop-in clients answer it 404
    ``model_not_found``, as OpenAI answers an unknown model. Only a Guard with deployment
    groups raises it: one without serves any name with its routes' own models.

    .. versionadded:: 0.2.0
    """

    def __init__(self, model: str, groups: Sequence[str], models: Sequence[str]) -> None:
        super().__init__(
            f"model {model!r} names no deployment group of this Guard ({list(groups)}) and no "
            f"model its routes serve ({list(models)}): every route has a model of its own, so "
            "it would be ignored. Pass a group's name to route within that group, a served "
            "model, or leave model= out"
        )
        self.model = model
        self.groups = list(groups)
        self.models = list(models)


class PromptLintError(RequestValidationError):
    """A strict :class:`~llmguard_sdk.prompts.PromptBuilder` found text in the static part of
    its prompt that would break a provider's prefix cache (a timestamp, a random id ...).

    ``warnings`` holds the :class:`~llmguard_sdk.prompts.LintWarning` findings, each with its
    section and span; ``details`` has the same as dicts. The message ends with what to do
    (per-call values into ``build(context=...)``, or ``lint_ignore``).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0 the message says what to do.
    """

    def __init__(self, template: str, warnings: Sequence[Any]) -> None:
        shown = "; ".join(str(w) for w in warnings[:5])
        more = f" (and {len(warnings) - 5} more)" if len(warnings) > 5 else ""
        super().__init__(
            f"prompt template {template!r} has cache-breaking static text: {shown}{more}; "
            f"{_lint_remedy(warnings)}",
            [
                {"rule": w.rule, "section": w.section, "start": w.start, "end": w.end}
                for w in warnings
            ],
        )
        self.template = template
        self.warnings = list(warnings)


def _lint_remedy(warnings: Sequence[Any]) -> str:
    """What to do about prompt lint findings (``warnings``: their ``rule`` names them)."""
    rules = sorted({str(w.rule) for w in warnings})
    return (
        "move what changes per call or per user into build(context=...), the prompt's tail, "
        f"or pass lint_ignore={rules} for text that is the same on every call"
    )


class ProviderError(LLMGuardError):
    """A provider failed to give a usable answer.

    Attributes:
        route: name of the route (provider) that failed.
        status_code: HTTP status, or ``None`` when there was no HTTP answer.
        headers: the response headers, lower-case keys (empty when there was no answer).
        retry_after: seconds the provider asked us to wait, when it said so.
        retryable: whether the SDK's retry rules allow another attempt.
        request_sent: ``False`` when the request provably never reached the provider
            (connection refused, no connection in time), so even a non-idempotent call may be
            sent again.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        route: str = "",
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
        body: str | None = None,
        request_sent: bool = True,
    ) -> None:
        # Providers echo credentials in error texts ("Incorrect API key provided: sk-...").
        super().__init__(redact_secrets(message))
        self.route = route
        self.status_code = status_code
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}
        self.retry_after = retry_after
        self.body = redact_secrets(body) if body is not None else None
        self.request_sent = request_sent

    def __str__(self) -> str:
        where = f" [route={self.route}]" if self.route else ""
        status = f" (HTTP {self.status_code})" if self.status_code is not None else ""
        return f"{self.args[0]}{status}{where}"


class RateLimitedError(ProviderError):
    """The provider answered 429 Too Many Requests."""

    retryable = True


class ProviderUnavailableError(ProviderError):
    """The provider is down or cannot serve the call now: 5xx, 529, 409 (a lock timeout),
    425 Too Early, connection refused or reset."""

    retryable = True


class EmptyStreamError(ProviderUnavailableError):
    """A stream that ended without any answer: a 200 with no event, its last event alone
    (``[DONE]``, Claude's ``message_stop``), or a route of the user's own whose stream gave
    no chunk.

    A server answers so a stream request it failed before it began, and such a failure is
    this request's on this route: llama-cpp-python's server answers a prompt past its context
    window so (a plain call gets its 400). So, as a
    :class:`ContextLengthExceededError` is, it is not retried on the route, it is no failure
    of the route's circuit breaker (a healthy server refusing long prompts would open it),
    and the chain moves on to the next route. A route that answers every stream so is tried,
    and left, once a call.

    .. versionadded:: 0.2.0
    """

    retryable = False


class ProviderTimeoutError(ProviderError):
    """The provider did not answer within the call's deadline, or answered 408 (or a 400
    saying the request did not arrive in time: Anthropic's ``request_body_timeout``)."""

    retryable = True


class ProviderBusyError(ProviderError):
    """The route refused the call at once because it is at capacity (a local model's full
    queue). Not retried on the same route: the chain moves on without waiting."""


class BadRequestError(ProviderError):
    """The provider refused the request itself (400, 404, 422); retrying will not help."""


class ContextLengthExceededError(BadRequestError):
    """The prompt is longer than the model's context window."""


class ContentPolicyError(BadRequestError):
    """The provider's content filter refused the request: OpenAI's 400
    ``content_policy_violation``, Azure OpenAI's 400 ``content_filter`` (its ``innererror``
    ``ResponsibleAIPolicyViolation``), the Responses API's ``image_content_policy_violation``,
    ``bio_policy`` ... over HTTP or inside a stream. The message is the provider's; ``code``
    the code that named the refusal. Not retried, and the chain stops on it by default, as on
    any refused request (the prompt goes to no other provider); ``moves_on=`` can hand it on
    (:func:`~llmguard_sdk.router.is_route_failure`). The seam answers it with its code.

    .. versionadded:: 0.2.0
    """

    def __init__(self, message: str, *, code: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.code = code


class AuthenticationError(ProviderError):
    """The provider refused our credentials (401, 403)."""


class MalformedResponseError(ProviderError):
    """The provider's answer could not be understood (bad JSON, wrong type, missing fields)."""

    retryable = True


class StreamInterruptedError(ProviderError):
    """A stream broke after content had been delivered to the caller.

    It is never retried or replayed automatically: the caller has seen ``partial_text``
    already, and a replay would show it twice.
    """

    def __init__(self, message: str, *, partial_text: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.partial_text = partial_text


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
    ``retry_after``: when room may come back (``None``: the call never fits).

    .. versionchanged:: 0.2.0 ``budget``.
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
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.scope = scope
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


# defined beside (they need the classes above), exported here
from ._settings_error import SettingsValidationError  # noqa: E402
from ._unsupported_error import UnsupportedRequestError  # noqa: E402
