"""llmguard-sdk: keep LLM calls fast, available and affordable.

The public surface is this module's ``__all__``: the :class:`Guard` and everything you
configure it with (providers, policies, limits, budgets, caches, stores, telemetry), what
it returns, and the errors it raises. A stage used on its own has its own package
(:mod:`llmguard_sdk.retry`'s ``@retry``, :mod:`llmguard_sdk.ratelimit`'s limiters,
:mod:`llmguard_sdk.prompts`' linter, :mod:`llmguard_sdk.testing`'s ``FakeProvider``);
everything in a module whose name starts with an underscore is private. Start with
:class:`Guard`.

``import llmguard_sdk`` imports neither redis nor numpy nor OpenTelemetry: they are imported
when a Redis store, a semantic cache or a :class:`Telemetry` (a Guard's by default) is first
used.
"""

from typing import TYPE_CHECKING, Any

from ._core.stages import InputFilter, OutputFilter
from ._core.streams import AsyncChatStream, ChatStream
from ._loops import PerLoop
from ._version import __version__
from .breaker import BreakerPolicy, Breakers, BreakerTransition
from .budget import Budget, BudgetEvent, Budgets, Price, PriceTable, UsageRecorder
from .cache import (
    BertEmbedder,
    Embedder,
    HashingEmbedder,
    HybridEmbedder,
    LlamaCppEmbedder,
    OpenAIEmbedder,
    ResponseCache,
)
from .classify import classify_exception, usage_from_result
from .client import (
    AsyncChunkStream,
    AsyncGuardedClient,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkStream,
    GuardedClient,
)
from .config import GuardSettings
from .context import CallEvent, Hook, RetryDetails, Scope, current_scope, scoped
from .errors import (
    AllRoutesFailedError,
    AuthenticationError,
    BadRequestError,
    BatchSplitWarning,
    BudgetExceededError,
    BudgetUnavailableError,
    CanaryNotFoundError,
    CircuitOpenError,
    ConfigurationError,
    ContentPolicyError,
    ContextLengthExceededError,
    DroppedParameterWarning,
    EmptyStreamError,
    GuardrailRejectedError,
    InputTooLargeError,
    LLMGuardError,
    LocalContextWarning,
    MalformedResponseError,
    MovingModelAliasError,
    PromptLintError,
    ProviderBusyError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitConfigWarning,
    RateLimitedError,
    RateLimitExceededError,
    RefusedError,
    RejectedResultError,
    ReleaseConflictError,
    RequestValidationError,
    RetryMultiplicationWarning,
    SettingsValidationError,
    StoreUnavailableError,
    StreamInterruptedError,
    TelemetryConfigWarning,
    UnknownModelError,
    UnknownModelPriceError,
    UnknownSettingWarning,
    UnsupportedRequestError,
)
from .guard import ChatOptions, Guard
from .models import ChatRequest, ChatResponse, Message, StreamChunk, Timings, Usage
from .prompts import PrefixCacheStats, PromptBuilder
from .providers import (
    AnthropicProvider,
    LocalProvider,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    Provider,
)
from .ratelimit import RateLimit
from .retry import RetryBudgetPolicy, RetryPolicy
from .router import Cascade, DeploymentGroup, Rule, TaskRouter
from .store import MemoryStore, RedisClusterStore, RedisStore, Store
from .tokens import TokenCount, count_request_tokens, count_text_tokens

if TYPE_CHECKING:
    from .telemetry import Telemetry

__all__ = [
    "AllRoutesFailedError",
    "AnthropicProvider",
    "AsyncChatStream",
    "AsyncChunkStream",
    "AsyncGuardedClient",
    "AuthenticationError",
    "BadRequestError",
    "BatchSplitWarning",
    "BertEmbedder",
    "BreakerPolicy",
    "BreakerTransition",
    "Breakers",
    "Budget",
    "BudgetEvent",
    "BudgetExceededError",
    "BudgetUnavailableError",
    "Budgets",
    "CallEvent",
    "CanaryNotFoundError",
    "Cascade",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatOptions",
    "ChatRequest",
    "ChatResponse",
    "ChatStream",
    "ChunkStream",
    "CircuitOpenError",
    "ConfigurationError",
    "ContentPolicyError",
    "ContextLengthExceededError",
    "DeploymentGroup",
    "DroppedParameterWarning",
    "Embedder",
    "EmptyStreamError",
    "Guard",
    "GuardSettings",
    "GuardedClient",
    "GuardrailRejectedError",
    "HashingEmbedder",
    "Hook",
    "HybridEmbedder",
    "InputFilter",
    "InputTooLargeError",
    "LLMGuardError",
    "LlamaCppEmbedder",
    "LocalContextWarning",
    "LocalProvider",
    "MalformedResponseError",
    "MemoryStore",
    "Message",
    "MovingModelAliasError",
    "OpenAICompatibleProvider",
    "OpenAIEmbedder",
    "OpenAIResponsesProvider",
    "OutputFilter",
    "PerLoop",
    "PrefixCacheStats",
    "Price",
    "PriceTable",
    "PromptBuilder",
    "PromptLintError",
    "Provider",
    "ProviderBusyError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimit",
    "RateLimitConfigWarning",
    "RateLimitExceededError",
    "RateLimitedError",
    "RedisClusterStore",
    "RedisStore",
    "RefusedError",
    "RejectedResultError",
    "ReleaseConflictError",
    "RequestValidationError",
    "ResponseCache",
    "RetryBudgetPolicy",
    "RetryDetails",
    "RetryMultiplicationWarning",
    "RetryPolicy",
    "Rule",
    "Scope",
    "SettingsValidationError",
    "Store",
    "StoreUnavailableError",
    "StreamChunk",
    "StreamInterruptedError",
    "TaskRouter",
    "Telemetry",
    "TelemetryConfigWarning",
    "Timings",
    "TokenCount",
    "UnknownModelError",
    "UnknownModelPriceError",
    "UnknownSettingWarning",
    "UnsupportedRequestError",
    "Usage",
    "UsageRecorder",
    "__version__",
    "classify_exception",
    "count_request_tokens",
    "count_text_tokens",
    "current_scope",
    "scoped",
    "usage_from_result",
]


def __getattr__(name: str) -> Any:
    """:class:`Telemetry` (and with it OpenTelemetry's API), imported at its first use."""
    if name == "Telemetry":
        from .telemetry import Telemetry

        globals()["Telemetry"] = Telemetry  # (later reads: a plain attribute)
        return Telemetry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
