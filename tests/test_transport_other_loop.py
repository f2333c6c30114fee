"""A keep-alive ``async_transport`` of yours, used on a second event loop (a second
``asyncio.run()``), fails the call with a ConfigurationError that says why and what to do (it
was a bare ``RuntimeError: Event loop is closed`` out of the Guard). It is the caller's setup,
not the route's health: the route's breaker does not count it, and no other route is tried
(a fallback would hide the mistake behind answers from the next route)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk.breaker import BreakerPolicy, Breakers, MemoryBreakerBackend
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

# one failure would open a route's breaker
POLICY = BreakerPolicy(window=10, minimum_calls=1, failure_rate=0.5, open_seconds=60)


def _guard(fake: FakeProvider, fake2: FakeProvider, transport: Any) -> Guard:
    """Two routes: ``primary`` (``fake``) sends through ``transport``, ``backup``
    (``fake2``) through its own pools."""
    primary = OpenAICompatibleProvider(
        fake.base_url, model="fake-model", name="primary", async_transport=transport
    )
    backup = OpenAICompatibleProvider(fake2.base_url, model="backup-model", name="backup")
    breakers = Breakers(MemoryBreakerBackend(POLICY))
    return Guard([primary, backup], environ={}, telemetry=False, retry=None, breaker=breakers)


async def _streamed(guard: Guard) -> str:
    chunks = await guard.achat(USER, stream=True)
    async with chunks:
        return "".join([chunk.text async for chunk in chunks])


async def _answered(guard: Guard) -> str:
    return (await guard.achat(USER)).text


@pytest.mark.parametrize("call", [_answered, _streamed], ids=["achat", "stream"])
@pytest.mark.filterwarnings("ignore::ResourceWarning")  # (the first loop's kept connection)
def test_a_keep_alive_transport_on_a_second_loop_is_a_configuration_error(
    fake: FakeProvider, fake2: FakeProvider, call: Any
) -> None:
    transport = httpx.AsyncHTTPTransport()  # keep-alive: its connection stays on loop one
    guard = _guard(fake, fake2, transport)
    try:
        assert asyncio.run(_answered(guard))
        with pytest.raises(ConfigurationError, match=r"'primary'.*async_transport") as caught:
            asyncio.run(call(guard))
        message = str(caught.value)
        assert "Event loop is closed" in message
        assert "PerLoopTransport" in message
        assert "max_keepalive_connections=0" in message
        assert isinstance(caught.value.__cause__, RuntimeError)
        assert fake2.stats.requests == 0  # the backup route was not tried
        assert guard.breakers is not None
        assert guard.breakers.state("primary") == "closed"
        assert guard.breakers.state("backup") == "closed"
    finally:
        guard.close()


def test_a_transport_that_keeps_no_connection_serves_every_loop(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """The remedy the error names: keep-alive off, the same transport serves both loops."""
    transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    guard = _guard(fake, fake2, transport)
    try:
        for _ in range(2):
            assert asyncio.run(_answered(guard))
        assert (fake.stats.requests, fake2.stats.requests) == (2, 0)
    finally:
        guard.close()
    asyncio.run(transport.aclose())
