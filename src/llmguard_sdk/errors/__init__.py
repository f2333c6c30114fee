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
:class:`RateLimitConfigWarning`, :class:`BatchSplitWarning`, :class:`LocalContextWarning`,
:class:`DroppedParameterWarning` and :class:`TelemetryConfigWarning`.

Every :class:`ProviderError` knows the ``route`` that raised it, the HTTP ``status_code`` (if
any), the response ``headers`` (Retry-After, ``x-ratelimit-*`` ...), and whether it is
``retryable`` by the SDK's rules (an ``x-should-retry: true|false`` header on the answer
overrides the status's rule, as openai-python reads it). An error event inside a stream
is the error its ``type`` or ``code`` names, with the HTTP status that kind comes with
(``rate_limit_error``: RateLimitedError, 429; ``invalid_request_error``: BadRequestError,
400; ``timeout_error``: ProviderUnavailableError, 504 ...), as the same error answered over
HTTP is. Nothing here is ever raised for a caller's own bug: an exception raised inside a
user callback propagates unchanged.

The classes are defined in the package's private modules and named here (their
``__module__``), where users import them from, pickles find them and tracebacks name them.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from ._base import (
    ConfigurationError,
    GuardrailRejectedError,
    InputTooLargeError,
    LLMGuardError,
    MovingModelAliasError,
    PromptLintError,
    RequestValidationError,
    UnknownModelError,
    UnknownModelPriceError,
    rebuilt,
)
from ._outcomes import (
    AllRoutesFailedError,
    BudgetExceededError,
    BudgetUnavailableError,
    CanaryNotFoundError,
    CircuitOpenError,
    RateLimitExceededError,
    RefusedError,
    RejectedResultError,
    ReleaseConflictError,
    StoreUnavailableError,
)
from ._provider import (
    AuthenticationError,
    BadRequestError,
    ContentPolicyError,
    ContextLengthExceededError,
    EmptyStreamError,
    MalformedResponseError,
    ProviderBusyError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    StreamInterruptedError,
    UnsupportedRequestError,
)
from ._settings import SettingsValidationError, settings_error
from ._warnings import (  # (outside the tree)
    BatchSplitWarning,
    DroppedParameterWarning,
    LocalContextWarning,
    RateLimitConfigWarning,
    RetryMultiplicationWarning,
    TelemetryConfigWarning,
    UnknownSettingWarning,
)

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
    "DroppedParameterWarning",
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
    "TelemetryConfigWarning",
    "UnknownModelError",
    "UnknownModelPriceError",
    "UnknownSettingWarning",
    "UnsupportedRequestError",
]


for _named_here in (*(globals()[_name] for _name in __all__), rebuilt, settings_error):
    _named_here.__module__ = __name__  # (see the module docs)
del _named_here
