"""The exported names are part of the API: this test pins them."""

from __future__ import annotations

import inspect

import llmguard_sdk

EXPECTED = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert llmguard_sdk.__all__ == EXPECTED
    assert sorted(llmguard_sdk.__all__) == llmguard_sdk.__all__


def test_every_exported_name_exists_and_is_documented() -> None:
    for name in llmguard_sdk.__all__:
        value = getattr(llmguard_sdk, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name} has no docstring"


def test_every_error_is_an_llmguard_error() -> None:
    errors = [getattr(llmguard_sdk, n) for n in llmguard_sdk.__all__ if n.endswith("Error")]
    assert len(errors) == 21
    for error in errors:
        assert issubclass(error, llmguard_sdk.LLMGuardError)
        assert error.__name__ in llmguard_sdk.errors.__doc__  # the documented tree is complete


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert llmguard_sdk.__version__ == version("llmguard-sdk")
