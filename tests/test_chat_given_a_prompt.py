"""A ``Prompt`` (what ``PromptBuilder.build`` returns) passed to ``guard.chat`` as the messages
or as ``request=`` is refused saying what to pass: ``request=prompt.request(...)``."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard, PromptBuilder, RequestValidationError


@pytest.mark.parametrize("how", ["messages", "request"])
def test_a_prompt_is_refused_naming_its_request(how: str) -> None:
    prompt = PromptBuilder("support", instructions="Be brief.", drift=None).build("hi")
    guard = Guard()  # refused before any route is needed
    call: dict[str, Any] = {"request": prompt} if how == "request" else {"messages": prompt}
    with pytest.raises(RequestValidationError) as refused:
        guard.chat(**call)
    assert "request=prompt.request(" in str(refused.value)
