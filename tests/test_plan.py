"""One plan for plain calls and streams: what used to differ between the loop's copies now
holds for both (sync and async alike)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    BadRequestError,
    ChatResponse,
    Guard,
    ProviderError,
    ProviderUnavailableError,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

MakeGuard = Callable[..., Guard]
WAYS = [("sync", False), ("sync", True), ("async", False), ("async", True)]


def send(guard: Guard, mode: str, stream: bool) -> ChatResponse:
    """One call, plain or streamed, sync or async; the response."""
    if mode == "sync":
        if not stream:
            return guard.chat(USER)
        with guard.chat(USER, stream=True) as chunks:
            list(chunks)
        return chunks.response

    async def run() -> ChatResponse:
        if not stream:
            return await guard.achat(USER)
        chunks = await guard.achat(USER, stream=True)
        async with chunks:
            async for _chunk in chunks:
                pass
        return chunks.response

    return anyio.run(run)


@pytest.mark.parametrize(("mode", "stream"), WAYS)
def test_a_custom_moves_on_decides_for_every_kind_of_call(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, stream: bool
) -> None:
    def never(error: ProviderError) -> bool:
        return False

    def always(error: ProviderError) -> bool:
        return True

    stays = make_guard(fake, fake2, moves_on=never, retry=None)
    fake.script(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        send(stays, mode, stream)
    assert fake2.stats.requests == 0  # the Guard's rule kept the call on its first route

    moves = make_guard(fake, fake2, moves_on=always, retry=None)
    fake.script(Fault(status=400))  # a request error moves on too: the Guard's rule says so
    assert send(moves, mode, stream).route == "backup"
    assert fake2.stats.requests == 1


@pytest.mark.parametrize(("mode", "stream"), WAYS)
def test_without_a_rule_a_request_error_stops_every_kind_of_call(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, stream: bool
) -> None:
    guard = make_guard(fake, fake2)
    fake.script(Fault(status=400))
    with pytest.raises(BadRequestError):
        send(guard, mode, stream)
    assert fake.stats.requests == 1  # not retried either
    assert fake2.stats.requests == 0


@pytest.mark.parametrize(("mode", "stream"), WAYS)
def test_retries_then_fallback_count_the_same_for_every_kind_of_call(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, stream: bool
) -> None:
    options: dict[str, Any] = {"retry_budget": None}
    guard = make_guard(fake, fake2, **options)
    fake.always(Fault(status=503))
    response = send(guard, mode, stream)
    assert response.route == "backup"
    assert fake.stats.requests == 3  # the default policy's three attempts
    assert response.attempts == 4
