"""The ``gen_ai.provider.name`` of a vendor SDK's objects, for ``@guard.protect`` calls.

A protected function calls a provider through its own SDK; the conventions name the provider
(``openai``, ``anthropic``, ``aws.bedrock`` ...), not the label the function was given. The
name is read from the package an object comes from: a client the function reaches, the
answer it returned, the exception it raised. Light on purpose: no OpenTelemetry import.
"""

from __future__ import annotations

import types
from collections.abc import Iterable

__all__ = ["UNKNOWN", "ProviderNames", "first_sdk_provider_name", "sdk_provider_name"]

UNKNOWN = "unknown"

# top-level package -> the conventions' name; a client class named below overrides it
_PACKAGES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "groq": "groq",
    "mistralai": "mistral_ai",
    "cohere": "cohere",
    "llama_cpp": "llama.cpp",
}
_CLASSES = {
    "AzureOpenAI": "azure.ai.openai",
    "AsyncAzureOpenAI": "azure.ai.openai",
    "AnthropicBedrock": "aws.bedrock",
    "AsyncAnthropicBedrock": "aws.bedrock",
    "AnthropicVertex": "gcp.vertex_ai",
    "AsyncAnthropicVertex": "gcp.vertex_ai",
}


def sdk_provider_name(found: object) -> str | None:
    """The provider of the SDK ``found`` (a module, a client, an answer, an exception, or an
    exception caused by one) belongs to, or None when it belongs to none we know."""
    seen = 0
    while found is not None and seen < 4:  # an exception wrapping the SDK's (raise ... from)
        if isinstance(found, types.ModuleType):
            package = found.__name__
        else:
            cls = found if isinstance(found, type) else type(found)  # OpenAI, or OpenAI()
            if cls.__name__ in _CLASSES:
                return _CLASSES[cls.__name__]
            package = cls.__module__ or ""
        name = _PACKAGES.get(package.partition(".")[0])
        if name is not None:
            return name
        found = found.__cause__ if isinstance(found, BaseException) else None
        seen += 1
    return None


def first_sdk_provider_name(candidates: Iterable[object]) -> str | None:
    """The provider of the candidate that tells the most: a client class such as
    ``AzureOpenAI`` (it says more than the ``openai`` package), then an object (a client, an
    answer) before a class or a module (a function that catches ``openai.APIError`` around
    an ``anthropic`` client calls Anthropic); the first of equals."""
    ranked = []
    for order, found in enumerate(candidates):
        name = sdk_provider_name(found)
        if name is not None:
            plain = isinstance(found, (type, types.ModuleType))
            ranked.append((name not in _CLASSES.values(), plain, order, name))
    return min(ranked)[-1] if ranked else None


class ProviderNames:
    """The provider of one protected function: that of the clients it reaches, else of the
    first answer or exception that tells, then kept, so that its later failures (a timeout,
    a cancellation) carry the same name as its answers."""

    def __init__(self, reachable: Iterable[object]) -> None:
        self.name = first_sdk_provider_name(reachable)

    def of(self, *found: object) -> str:
        """The provider's name (``unknown`` until something tells it)."""
        if self.name is None:
            self.name = first_sdk_provider_name(found)
        return self.name or UNKNOWN
