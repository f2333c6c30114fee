"""``@guard.protect`` on a plain ``def`` that returns a coroutine (``return
async_client.chat.completions.create(...)``, no ``async def``): the call is the awaited one,
retried, bounded and reported as an async function's. It was reported ``ok`` (no usage) before
it ran, and its 503 was never retried."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    CallEvent,
    Guard,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RetryPolicy,
)

ANSWER = {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def test_a_returned_coroutine_is_retried_and_reported_when_it_ends() -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], retry=RetryPolicy(base=0.001, cap=0.002))
    sent: list[int] = []

    async def create() -> dict[str, Any]:
        sent.append(1)
        if len(sent) == 1:
            raise ProviderUnavailableError("503", route="openai", status_code=503)
        return ANSWER

    @guard.protect(feature="titles")
    def ask() -> Coroutine[Any, Any, dict[str, Any]]:
        return create()

    async def main() -> dict[str, Any]:
        return await ask()

    assert anyio.run(main) == ANSWER
    assert len(sent) == 2
    (event,) = events
    assert (event.outcome, event.attempts) == ("ok", 2)
    assert event.usage is not None
    assert event.usage.input_tokens == 3


def test_a_returned_coroutine_is_bounded_by_the_timeout() -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append])

    async def hang() -> None:
        await anyio.sleep(5)

    @guard.protect(timeout=0.05)
    def ask() -> Coroutine[Any, Any, None]:
        return hang()

    async def main() -> None:
        await ask()

    with pytest.raises(ProviderTimeoutError):
        anyio.run(main)
    assert [e.outcome for e in events] == ["error"]
