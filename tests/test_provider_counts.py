"""A provider's counts given in code (``max_connections``, ``context_window``, Anthropic's
``default_max_tokens``) are whole numbers: a string or a bool is a ConfigurationError naming
the option; a ``context_window`` has a configuration file's bound, 2**31 - 1."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import (
    AnthropicProvider,
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
)

URL = "http://127.0.0.1:9/v1"
BOUND = "from 1 to 2147483647, got "


@pytest.mark.parametrize("option", ["max_connections", "context_window"])
@pytest.mark.parametrize("value", ["5", True, 0, 2.5])
def test_a_count_that_is_not_a_whole_number_is_refused(option: str, value: Any) -> None:
    """``context_window="5"`` was kept and never used (the Guard reads an int only), and
    ``max_connections="5"`` raised a bare ``TypeError`` from a comparison."""
    for build in (OpenAICompatibleProvider, AnthropicProvider):
        with pytest.raises(ConfigurationError, match=f"{option} must be a whole number"):
            build(URL, model="m", **{option: value})


@pytest.mark.parametrize("value", ["1024", None, False])
def test_anthropics_default_max_tokens_is_a_whole_number(value: Any) -> None:
    """``"1024"`` and ``None`` raised a bare ``TypeError``; ``False`` was 0 (refused) only by
    luck of the comparison."""
    with pytest.raises(ConfigurationError, match="default_max_tokens must be a whole number"):
        AnthropicProvider(URL, model="m", default_max_tokens=value)


def test_whole_numbers_are_kept() -> None:
    route = OpenAICompatibleProvider(URL, model="m", max_connections=4, context_window=8192)
    anthropic = AnthropicProvider(URL, model="m", context_window=200_000, default_max_tokens=64)
    assert (route.context_window, anthropic.context_window) == (8192, 200_000)
    assert anthropic.default_max_tokens == 64
    route.close()
    anthropic.close()


@pytest.mark.parametrize(
    "provider", [OpenAICompatibleProvider, AnthropicProvider, OpenAIResponsesProvider]
)
@pytest.mark.parametrize("window", [10**30, 2**31])
def test_a_providers_huge_context_window_is_refused_at_construction(
    provider: Any, window: int
) -> None:
    """``OpenAICompatibleProvider(context_window=10**30)`` was kept: no model's context is
    that large."""
    with pytest.raises(
        ConfigurationError, match=f"context_window must be a whole number of tokens {BOUND}"
    ):
        provider(URL, model="m", context_window=window)
    kept = provider(URL, model="m", context_window=2**31 - 1)
    assert kept.context_window == 2**31 - 1
    kept.close()


def test_a_custom_providers_huge_context_window_is_refused_by_the_guard() -> None:
    """A provider of the caller's own declaring a window no model has (set here on ours after
    its construction, as a custom provider declares it)."""
    route = OpenAICompatibleProvider(URL, model="m", name="custom")
    route.context_window = 10**30
    with pytest.raises(
        ConfigurationError,
        match=f"route 'custom': context_window must be a whole number of tokens {BOUND}",
    ):
        Guard(route, environ={})
