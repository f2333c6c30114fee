"""``@guard.protect`` given something other than a function says so at once, naming the fix."""

from __future__ import annotations

import pytest

from llmguard_sdk import ConfigurationError, Guard


def test_a_feature_name_given_positionally_is_refused_naming_the_keyword() -> None:
    guard = Guard()
    with pytest.raises(ConfigurationError) as refused:
        guard.protect("summaries")  # type: ignore[call-overload]  # (@guard.protect("summaries"))

    message = str(refused.value)
    assert "'summaries'" in message
    assert "feature=" in message


def test_protect_still_takes_a_function_and_keywords() -> None:
    guard = Guard()

    @guard.protect
    def bare(text: str) -> str:
        return text

    @guard.protect(feature="summaries")
    def named(text: str) -> str:
        return text

    assert bare("a") == "a"
    assert named("b") == "b"
