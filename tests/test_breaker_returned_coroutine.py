"""``@breakers.protect`` on a plain ``def`` that returns a coroutine is refused with a message
that fits the decorator: it said "breakers.call cannot wait ...: decorate it with
@breakers.protect" to code that was so decorated."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import anyio
import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.breaker import BreakerPolicy, Breakers, MemoryBreakerBackend


async def _answer() -> str:
    return "ok"


def test_a_decorated_def_returning_a_coroutine_is_told_to_be_async() -> None:
    breakers = Breakers(MemoryBreakerBackend(BreakerPolicy()))

    @breakers.protect("openai")
    def ask() -> Coroutine[Any, Any, str]:
        return _answer()

    async def main() -> None:
        await ask()

    with pytest.raises(ConfigurationError) as refused:
        anyio.run(main)
    message = str(refused.value)
    assert "async def" in message
    assert "breakers.acall" in message
    assert "decorate it with @breakers.protect" not in message
