"""A provider's async pool on a loop is closed as that loop shuts down (``asyncio.run()``'s
end): its connections were only forgotten there, left open until the pool was collected
(a ``ResourceWarning``). A transport you passed (``async_transport``) serves every loop's
pool, so it is left open for the next loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest

from llmguard_sdk import AnthropicProvider, Guard, OpenAICompatibleProvider, OpenAIResponsesProvider
from llmguard_sdk.providers.base import Provider
from llmguard_sdk.testing import FakeProvider

USER = [{"role": "user", "content": "hi"}]
_WAIT_S = 5.0  # the most a check waits for the server to see the client's close


def _open_connections(fake: FakeProvider) -> int:
    """How many connections ``fake`` still serves, once it serves none (the server notices
    a client's close at its next read: waited for, at most 5 s)."""
    server = fake._server
    assert server is not None
    give_up = time.monotonic() + _WAIT_S
    with server._conns_cond:
        while server._conns and time.monotonic() < give_up:
            server._conns_cond.wait(give_up - time.monotonic())
        return len(server._conns)


ROUTES: dict[str, Callable[[str], Provider]] = {
    "chat": lambda url: OpenAICompatibleProvider(url, model="fake-model", name="primary"),
    "messages": lambda url: AnthropicProvider(url, model="fake-model", name="primary"),
    "responses": lambda url: OpenAIResponsesProvider(url, model="fake-model", name="primary"),
}


@pytest.mark.parametrize("api", sorted(ROUTES))
@pytest.mark.usefixtures("no_collection")  # (a pool left open is not closed by its collection)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_loops_connections_close_as_asyncio_run_ends(fake: FakeProvider, api: str) -> None:
    guard = Guard([ROUTES[api](fake.base_url)], environ={}, telemetry=False)
    try:
        for _ in range(2):  # a second asyncio.run with the same Guard works as the first
            assert asyncio.run(guard.achat(USER)).text
            assert _open_connections(fake) == 0
        assert fake.stats.connections == 2
    finally:
        guard.close()


class _Yours(httpx.AsyncHTTPTransport):
    """A transport of your own that keeps no connection between calls (so that one serves
    calls on several loops) and counts its closes."""

    def __init__(self) -> None:
        super().__init__(limits=httpx.Limits(max_keepalive_connections=0))
        self.closes = 0

    async def aclose(self) -> None:
        self.closes += 1
        await super().aclose()


def test_a_transport_you_passed_stays_open_for_the_next_loop(fake: FakeProvider) -> None:
    """Closing it at one loop's end would break every later loop's calls."""
    transport = _Yours()
    provider = OpenAICompatibleProvider(
        fake.base_url, model="fake-model", name="primary", async_transport=transport
    )
    guard = Guard([provider], environ={}, telemetry=False)
    try:
        for _ in range(2):
            assert asyncio.run(guard.achat(USER)).text
            assert transport.closes == 0
    finally:
        guard.close()
    asyncio.run(transport.aclose())
