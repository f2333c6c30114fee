"""Releases: what a bad setting or a bad score gets (a typed error, nothing counted)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from llmguard_sdk import OpenAICompatibleProvider
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.releases import Release, ShadowPolicy

ROUTE = OpenAICompatibleProvider("http://127.0.0.1:9", model="m-2025-01-01", name="a")


@pytest.mark.parametrize(
    "parameters",
    [
        {"temperature": 5.0},
        {"max_tokens": -3},
        {"max_tokens": "many"},
        {"top_p": 0.0},
        {"stop": ["a", "b", "c", "d", "e"]},
    ],
)
def test_a_release_refuses_parameters_a_request_could_not_carry(parameters: Any) -> None:
    """A release's parameters were never validated: apply() copied them into the request
    unchecked (a temperature of 5, a negative max_tokens went to the provider)."""
    with pytest.raises(ConfigurationError, match="parameters"):
        Release("bot", "v1", ROUTE, parameters=parameters)


def test_a_release_applies_its_parameters_as_a_request_holds_them() -> None:
    release = Release("bot", "v1", ROUTE, parameters={"temperature": "0.5", "max_tokens": 7})
    request = release.apply(ChatRequest(messages=[{"role": "user", "content": "hi"}]))
    assert (request.temperature, request.max_tokens) == (0.5, 7)
    assert release.parameters == {"temperature": 0.5, "max_tokens": 7}


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, True, "30"])
def test_a_shadow_refuses_a_timeout_its_calls_could_not_take(timeout: Any) -> None:
    """The timeout was never checked: every shadow call then failed its own validation
    (counted as a candidate error, no pair ever compared), and an infinite one made
    ``Guard.close()`` raise OverflowError joining the worker (routes left open)."""
    with pytest.raises(ConfigurationError, match="timeout"):
        ShadowPolicy(timeout=timeout)
