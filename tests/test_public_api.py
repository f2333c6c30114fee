"""The exported names are part of the API: this test pins them."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import llmguard_sdk

EXPECTED = [
    "AllRoutesFailedError",
    "AnthropicProvider",
    "AsyncChatStream",
    "AsyncChunkStream",
    "AsyncGuardedClient",
    "AuthenticationError",
    "BadRequestError",
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
    "ContextLengthExceededError",
    "DeploymentGroup",
    "Embedder",
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
    "LocalProvider",
    "MalformedResponseError",
    "MemoryStore",
    "Message",
    "OpenAICompatibleProvider",
    "OpenAIEmbedder",
    "OpenAIResponsesProvider",
    "OutputFilter",
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
    "RateLimitExceededError",
    "RateLimitedError",
    "RedisClusterStore",
    "RedisStore",
    "RefusedError",
    "ReleaseConflictError",
    "RequestValidationError",
    "ResponseCache",
    "RetryBudgetPolicy",
    "RetryDetails",
    "RetryMultiplicationWarning",
    "RetryPolicy",
    "Rule",
    "Scope",
    "Store",
    "StreamChunk",
    "StreamInterruptedError",
    "TaskRouter",
    "Telemetry",
    "Timings",
    "TokenCount",
    "UnknownModelPriceError",
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
    assert len(errors) == 24
    for error in errors:
        assert issubclass(error, llmguard_sdk.LLMGuardError)
        assert error.__name__ in llmguard_sdk.errors.__doc__  # the documented tree is complete


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert llmguard_sdk.__version__ == version("llmguard-sdk")


def test_import_loads_neither_redis_nor_numpy() -> None:
    """``import llmguard_sdk`` stays light: Redis and numpy come with their first use."""
    code = (
        "import json, sys; import llmguard_sdk; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('redis', 'numpy', 'llama_cpp', 'tiktoken', 'opentelemetry'))))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = {name.split(".")[0] for name in json.loads(found.stdout)}
    assert "redis" not in loaded
    assert "numpy" not in loaded
    assert "llama_cpp" not in loaded
    print(f"modules loaded by import llmguard_sdk (of the heavy ones): {sorted(loaded)}")


def test_import_time_is_reported() -> None:
    """tools/import_time.py measures ``import llmguard_sdk`` (``-X importtime``) and says it."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "tools" / "import_time.py"
    found = subprocess.run(
        [sys.executable, str(script), "--json", "--runs", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(found.stdout)
    assert report["import_ms"] > 0
    assert "redis" not in report["heavy_modules"]
    print(f"import llmguard_sdk: {report['import_ms']:.0f} ms")


def test_telemetry_exports_the_parts_passed_to_telemetry() -> None:
    import llmguard_sdk.telemetry as telemetry
    from llmguard_sdk.telemetry.anomaly import Anomalies, AnomalyEvent
    from llmguard_sdk.telemetry.sampling import EvalSink

    assert telemetry.__all__ == ["Anomalies", "AnomalyEvent", "EvalSink", "Telemetry"]
    assert (telemetry.Anomalies, telemetry.AnomalyEvent, telemetry.EvalSink) == (
        Anomalies,
        AnomalyEvent,
        EvalSink,
    )
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        telemetry.Nothing  # noqa: B018
