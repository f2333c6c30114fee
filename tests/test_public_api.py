"""The exported names are part of the API: this test pins them."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

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


def test_all_is_pinned_and_sorted() -> None:
    assert llmguard_sdk.__all__ == EXPECTED
    assert sorted(llmguard_sdk.__all__) == llmguard_sdk.__all__


def _is_class(value: object) -> bool:
    """A class, not a generic alias such as ``Callable[[CallEvent], None]`` (a type alias,
    documented by the string after it: ``inspect.isclass`` takes one for a class on Python
    3.10)."""
    return inspect.isclass(value) and not isinstance(value, types.GenericAlias)


def test_a_type_alias_is_not_taken_for_a_class() -> None:
    assert not _is_class(Callable[[str], None])
    assert not _is_class(dict[str, int])
    assert _is_class(llmguard_sdk.Guard)


def test_every_exported_name_exists_and_is_documented() -> None:
    for name in llmguard_sdk.__all__:
        value = getattr(llmguard_sdk, name)
        if _is_class(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name} has no docstring"


def test_every_error_is_an_llmguard_error() -> None:
    errors = [getattr(llmguard_sdk, n) for n in llmguard_sdk.__all__ if n.endswith("Error")]
    assert len(errors) == 33
    for error in errors:
        assert issubclass(error, llmguard_sdk.LLMGuardError)
        assert error.__name__ in llmguard_sdk.errors.__doc__  # the documented tree is complete


def test_every_error_is_importable_from_the_package() -> None:
    """The README: "every error" is importable from ``llmguard_sdk``; ``except
    llmguard_sdk.UnknownModelError`` was an AttributeError (as were two others)."""
    missing = [n for n in llmguard_sdk.errors.__all__ if n not in llmguard_sdk.__all__]
    assert not missing, f"errors llmguard_sdk does not export: {missing}"


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


def test_import_loads_none_of_the_packages_modules() -> None:
    """``import llmguard_sdk`` imported every module of the package (the Guard, providers,
    caches, pydantic's models, httpx, anyio): a third of a second of CPU before any code of
    the caller's, or of the ``llmguard`` command's, ran. Each public name is imported at
    its first use now, and is the very object its module defines."""
    code = (
        "import json, sys; import llmguard_sdk; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('llmguard_sdk', 'pydantic', 'httpx', 'anyio'))))"
    )
    assert _printed_by_fresh_python(code) == [
        "llmguard_sdk",
        "llmguard_sdk._exports",
        "llmguard_sdk._version",
    ]
    star = (
        "import json, sys; from llmguard_sdk import *; import llmguard_sdk; "
        "print(json.dumps(sorted(n for n in llmguard_sdk.__all__ if n in globals() "
        "and n in dir(llmguard_sdk))))"
    )
    assert _printed_by_fresh_python(star) == sorted(EXPECTED)


@pytest.mark.parametrize(
    "module",
    [
        "llmguard_sdk._core.assembly",
        "llmguard_sdk._quick_request",
        "llmguard_sdk.telemetry.redaction",
        "llmguard_sdk.transport._chat",
        "llmguard_sdk._anthropic_client",
    ],
)
def test_a_module_imported_first_finds_its_cycle_whole(module: str) -> None:
    """``import llmguard_sdk`` imported every module in one order, so that a module imported
    first by name found the modules it shares a cycle with already built. Now that it imports
    none, these were an ImportError in a fresh interpreter ("partially initialized module")."""
    assert _printed_by_fresh_python(f"import json, {module}; print(json.dumps(1))") == 1


@pytest.mark.slow  # a fresh interpreter for each of the package's modules: minutes
@pytest.mark.timeout(900)
def test_every_module_of_the_package_imports_first() -> None:
    """Each module of the package, imported first in a fresh interpreter, imports: no cycle
    meets a module half-built (a public name's module is one of them)."""
    import pkgutil
    from concurrent.futures import ThreadPoolExecutor

    names = [m.name for m in pkgutil.walk_packages(llmguard_sdk.__path__, "llmguard_sdk.")]

    def failure(name: str) -> str | None:
        done = subprocess.run(
            [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120
        )
        said = (done.stderr.strip().splitlines() or [""])[-1]
        optional = said.startswith("ModuleNotFoundError") and "llmguard_sdk" not in said
        return None if done.returncode == 0 or optional else f"{name}: {said}"

    with ThreadPoolExecutor(max_workers=4) as pool:  # (each waits for its interpreter)
        failed = [found for found in pool.map(failure, names) if found is not None]
    assert not failed


def test_importing_the_guard_compiles_no_tokenizer_patterns() -> None:
    """``Field(default_factory=list)`` in a config model made pydantic read ``list``'s
    signature from its text as the Guard's modules were imported, which on Python 3.11
    compiled the tokenizer's patterns: some 20 ms, nothing the import needed."""
    code = (
        "import json, tokenize; from llmguard_sdk import Guard; "
        "info = getattr(tokenize, '_compile', None); "
        "print(json.dumps(info.cache_info().currsize if hasattr(info, 'cache_info') else 0))"
    )
    assert _printed_by_fresh_python(code) == 0


def _printed_by_fresh_python(code: str) -> Any:
    """The JSON ``code`` prints, run by a fresh interpreter."""
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(found.stdout)


def test_a_public_name_is_its_modules_object() -> None:
    """``llmguard_sdk.X`` is the object of the module that defines it (one class, not a
    copy); a submodule is an attribute too, as the eager imports made it; an unknown name
    is an AttributeError."""
    assert llmguard_sdk.Guard is importlib.import_module("llmguard_sdk.guard").Guard
    assert llmguard_sdk.LLMGuardError is llmguard_sdk.errors.LLMGuardError
    assert llmguard_sdk.MemoryStore is llmguard_sdk.store.MemoryStore
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = llmguard_sdk.NoSuchName
    with pytest.raises(ImportError):
        from llmguard_sdk import no_such_module  # noqa: F401


def test_import_time_is_reported() -> None:
    """tools/import_time.py measures ``import llmguard_sdk`` (``-X importtime``) and says it;
    ``--names Guard`` measures ``from llmguard_sdk import Guard`` (the package imports the
    Guard's modules at that first use: the bare import alone is light)."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "tools" / "import_time.py"
    reports = {}
    for names in ([], ["--names", "Guard"]):
        found = subprocess.run(
            [sys.executable, str(script), "--json", "--runs", "1", *names],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        report = json.loads(found.stdout)
        assert report["import_ms"] > 0
        assert "redis" not in report["heavy_modules"]
        reports[report["statement"]] = report["import_ms"]
    assert set(reports) == {"import llmguard_sdk", "from llmguard_sdk import Guard"}
    print(", ".join(f"{statement}: {ms:.0f} ms" for statement, ms in reports.items()))


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


def _public_modules() -> list[str]:
    import pkgutil

    names = ["llmguard_sdk"]
    for info in pkgutil.walk_packages(llmguard_sdk.__path__, "llmguard_sdk."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return names


def _assignment_documented(module_name: str, name: str, depth: int = 0) -> bool:
    """Whether ``name`` is assigned at the top of ``module_name`` (or of the module it is
    imported from) with a string right after it: an attribute docstring, which is what
    ``help()`` and Sphinx show for a type alias or a constant."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module_name)
    assert spec is not None
    assert spec.origin is not None
    assert depth < 10
    with open(spec.origin, encoding="utf-8") as source:
        body = ast.parse(source.read()).body
    for index, node in enumerate(body):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            after = body[index + 1] if index + 1 < len(body) else None
            return isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        imports = [node]  # (a package imports its names at their first use: TYPE_CHECKING)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            imports = [child for child in node.body if isinstance(child, ast.ImportFrom)]
        for statement in imports:
            if not isinstance(statement, ast.ImportFrom):
                continue
            for alias in statement.names:
                if (alias.asname or alias.name) == name:
                    package = module_name  # a package's own __init__, else its parent
                    if not spec.submodule_search_locations:
                        package = module_name.rpartition(".")[0]
                    relative = "." * statement.level + (statement.module or "")
                    origin = importlib.util.resolve_name(relative, package)
                    return _assignment_documented(origin, alias.name, depth + 1)
    return False


def _undocumented(module_name: str) -> list[str]:
    import importlib

    module = importlib.import_module(module_name)
    missing = []
    for name in getattr(module, "__all__", ()):
        value = getattr(module, name)
        if inspect.ismodule(value) or name.startswith("__"):
            continue
        if _is_class(value):
            if not (value.__dict__.get("__doc__") or "").strip():
                missing.append(name)
            for attr, member in vars(value).items():
                function = getattr(member, "__func__", member)
                public = not attr.startswith("_") or attr == "__call__"
                # getdoc lends __call__ the doc of type's own ("Call self as a function.")
                doc = function.__doc__ if attr == "__call__" else inspect.getdoc(function)
                if public and inspect.isfunction(function) and not doc:
                    missing.append(f"{name}.{attr}")
        elif callable(value) and getattr(value, "__module__", "").startswith("llmguard_sdk"):
            if not inspect.getdoc(value):
                missing.append(name)
        elif not _assignment_documented(module_name, name):
            missing.append(name)  # a type alias or a constant: a string after it documents it
    return missing


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_public_name_of_every_public_module_is_documented(module_name: str) -> None:
    assert not _undocumented(module_name), f"{module_name}: no docstring for these"


def _args_section_gaps(value: type) -> list[str]:
    """Parameters of ``value`` that its docstring (the class's and its __init__'s), when it
    has an ``Args:`` section, names neither there nor as ``name`` in its prose."""
    import re

    own_init = value.__dict__.get("__init__")
    doc = (value.__doc__ or "") + ((own_init.__doc__ or "") if own_init else "")
    if "Args:" not in doc:
        return []
    try:
        parameters = inspect.signature(value).parameters
    except (TypeError, ValueError):
        return []
    section = doc.split("Args:", 1)[1]
    documented = set()  # "name:", "*name:", "name (unit):", "a, b:" or "a / b:" at a line's start
    separator = r"(?:,(?: and)? | / )"
    pattern = rf"^\s+(\**\w+(?:{separator}\**\w+)*)(?: \(.*?\))?:"
    for names in re.findall(pattern, section, re.M):
        documented |= {n.strip("* ") for n in re.split(separator, names)}
    named = set(re.findall(r"``(\w+)", doc))  # or named in the prose: ``ttl`` seconds ...
    return [n for n in parameters if n not in documented | named and not n.startswith("_")]


def test_an_args_section_names_every_parameter() -> None:
    gaps = {}
    for name in llmguard_sdk.__all__:
        value = getattr(llmguard_sdk, name)
        if _is_class(value) and (missing := _args_section_gaps(value)):
            gaps[name] = missing
    assert not gaps, f"parameters missing from the Args: sections: {gaps}"
