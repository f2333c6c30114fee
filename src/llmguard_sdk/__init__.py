"""llmguard-sdk: keep LLM calls fast, available and affordable.

The public surface is this module's ``__all__``: the :class:`Guard` and everything you
configure it with (providers, policies, limits, budgets, caches, stores, telemetry), what
it returns, and the errors it raises. A stage used on its own has its own package
(:mod:`llmguard_sdk.retry`'s ``@retry``, :mod:`llmguard_sdk.ratelimit`'s limiters,
:mod:`llmguard_sdk.prompts`' linter, :mod:`llmguard_sdk.testing`'s ``FakeProvider``);
everything in a module whose name starts with an underscore is private. Start with
:class:`Guard`.

``import llmguard_sdk`` imports none of its modules: each public name is imported from its
module at its first use (``from llmguard_sdk import Guard`` imports the Guard's), so that a
process that needs one part (the ``llmguard`` command, a script that catches an error) does
not pay for all of them. Nor does it import redis, numpy or OpenTelemetry: they are imported
when a Redis store, a semantic cache or a :class:`Telemetry` (a Guard's by default) is first
used.
"""

from typing import TYPE_CHECKING, Any

from ._exports import lazy_exports
from ._version import __version__

if TYPE_CHECKING:  # (at run time: __getattr__ below imports each at its first use)
    from ._core.stages import InputFilter, OutputFilter
    from ._core.streams import AsyncChatStream, ChatStream
    from ._loops import PerLoop
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
    from .telemetry import Telemetry
    from .tokens import TokenCount, count_request_tokens, count_text_tokens


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


# Where each public name is defined (the errors: every other name of __all__)
_HOMES = {
    "_core.stages": "InputFilter OutputFilter",
    "_core.streams": "AsyncChatStream ChatStream",
    "_loops": "PerLoop",
    "breaker": "BreakerPolicy Breakers BreakerTransition",
    "budget": "Budget BudgetEvent Budgets Price PriceTable UsageRecorder",
    "cache": "BertEmbedder Embedder HashingEmbedder HybridEmbedder LlamaCppEmbedder OpenAIEmbedder "
    "ResponseCache",
    "classify": "classify_exception usage_from_result",
    "client": "AsyncChunkStream AsyncGuardedClient ChatCompletion ChatCompletionChunk ChunkStream "
    "GuardedClient",
    "config": "GuardSettings",
    "context": "CallEvent Hook RetryDetails Scope current_scope scoped",
    "guard": "ChatOptions Guard",
    "models": "ChatRequest ChatResponse Message StreamChunk Timings Usage",
    "prompts": "PrefixCacheStats PromptBuilder",
    "providers": "AnthropicProvider LocalProvider OpenAICompatibleProvider OpenAIResponsesProvider "
    "Provider",
    "ratelimit": "RateLimit",
    "retry": "RetryBudgetPolicy RetryPolicy",
    "router": "Cascade DeploymentGroup Rule TaskRouter",
    "store": "MemoryStore RedisClusterStore RedisStore Store",
    "tokens": "TokenCount count_request_tokens count_text_tokens",
    "telemetry": "Telemetry",
}
_names, _dir = lazy_exports(globals(), _HOMES, rest="errors")


def __getattr__(name: str) -> Any:
    """A public name, imported from its module at its first read (``from llmguard_sdk import
    Guard`` and ``llmguard_sdk.Guard`` alike), then held as a plain attribute; a submodule
    (``llmguard_sdk.errors``) is imported as it is named, as the eager imports made it one."""
    return _names(name)


def __dir__() -> list[str]:
    return _dir()
