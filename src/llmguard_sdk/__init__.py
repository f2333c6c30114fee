"""llmguard-sdk: keep LLM calls fast, available and affordable.

The public surface is this module's ``__all__``; everything in a module whose name starts with
an underscore is private. Start with :class:`Guard`.
"""

from ._core.streams import AsyncChatStream, ChatStream
from ._version import __version__
from .budget import Budget, Budgets, PriceTable
from .cache import ResponseCache
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
from .context import CallContext, CallEvent, Scope, current_scope, scoped
from .errors import (
    AllRoutesFailedError,
    AuthenticationError,
    BadRequestError,
    BudgetExceededError,
    CircuitOpenError,
    ConfigurationError,
    ContextLengthExceededError,
    GuardrailRejectedError,
    InputTooLargeError,
    LLMGuardError,
    MalformedResponseError,
    PromptLintError,
    ProviderBusyError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    RateLimitExceededError,
    RefusedError,
    RequestValidationError,
    RetryMultiplicationWarning,
    StreamInterruptedError,
)
from .guard import Guard
from .models import ChatRequest, ChatResponse, Message, StreamChunk, Timings, Usage
from .pipeline import Hook, InputFilter, OutputFilter
from .prompts import PromptBuilder
from .providers import AnthropicProvider, LocalProvider, OpenAICompatibleProvider, Provider
from .store import MemoryStore, RedisStore, Store
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
    "Budget",
    "BudgetExceededError",
    "Budgets",
    "CallContext",
    "CallEvent",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatRequest",
    "ChatResponse",
    "ChatStream",
    "ChunkStream",
    "CircuitOpenError",
    "ConfigurationError",
    "ContextLengthExceededError",
    "Guard",
    "GuardSettings",
    "GuardedClient",
    "GuardrailRejectedError",
    "Hook",
    "InputFilter",
    "InputTooLargeError",
    "LLMGuardError",
    "LocalProvider",
    "MalformedResponseError",
    "MemoryStore",
    "Message",
    "OpenAICompatibleProvider",
    "OutputFilter",
    "PriceTable",
    "PromptBuilder",
    "PromptLintError",
    "Provider",
    "ProviderBusyError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitExceededError",
    "RateLimitedError",
    "RedisStore",
    "RefusedError",
    "RequestValidationError",
    "ResponseCache",
    "RetryMultiplicationWarning",
    "Scope",
    "Store",
    "StreamChunk",
    "StreamInterruptedError",
    "Telemetry",
    "Timings",
    "TokenCount",
    "Usage",
    "__version__",
    "classify_exception",
    "count_request_tokens",
    "count_text_tokens",
    "current_scope",
    "scoped",
    "usage_from_result",
]
