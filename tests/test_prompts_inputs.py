"""PromptBuilder and Prompt refuse bad input with the SDK's typed errors."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, RequestValidationError
from llmguard_sdk.prompts import PromptBuilder, lint_text

TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]


def builder(**options: Any) -> PromptBuilder:
    return PromptBuilder("inputs", instructions="Answer briefly.", drift=None, **options)


@pytest.mark.parametrize("who", [{"tenant": 5}, {"user": ["u"]}])
def test_a_tenant_or_user_that_is_not_text_is_a_typed_error(who: dict[str, Any]) -> None:
    # AttributeError: 'int' object has no attribute 'strip'
    with pytest.raises(RequestValidationError, match="must be a string"):
        builder().build("hi", **who)


@pytest.mark.parametrize("field", ["metadata", "extra_body"])
def test_request_fields_that_are_not_objects_are_a_typed_error(field: str) -> None:
    # TypeError from dict() / ** on a list
    with pytest.raises(RequestValidationError, match=field):
        builder().build("hi").request(**{field: [1]})


def test_a_request_cannot_replace_the_builders_tools() -> None:
    # tools= replaced the canonical, sorted tools (and the prefix hash described other tools)
    prompt = builder(tools=TOOLS).build("hi")
    with pytest.raises(RequestValidationError, match="tools"):
        prompt.request(tools=[{"name": "other", "input_schema": {"type": "object"}}])
    assert builder().build("hi").request(tools=TOOLS).tools == TOOLS  # none of its own


def test_unknown_lint_rules_are_a_configuration_error() -> None:
    # a plain ValueError, outside the SDK's error tree
    with pytest.raises(ConfigurationError, match="unknown lint rules"):
        builder(lint_ignore=["nope"])
    with pytest.raises(ConfigurationError, match="unknown lint rules"):
        lint_text("text", ignore=["nope"])


@pytest.mark.parametrize("setter", ["set_examples", "set_documents", "set_tools"])
def test_setters_given_none_are_a_configuration_error(setter: str) -> None:
    # TypeError: 'NoneType' object is not iterable
    with pytest.raises(ConfigurationError):
        getattr(builder(), setter)(None)
