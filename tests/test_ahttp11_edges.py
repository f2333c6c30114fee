"""The provider's own async HTTP/1.1 transport (providers/_ahttp11.py) at its edges, against real
loopback servers: what a request asks of its connection, and a process with many descriptors."""

from __future__ import annotations

import httpx2
import pytest

from llmguard_sdk.providers._ahttp11 import AnyioTransport
from tests.rawserver import RawServer
from tests.test_http11 import BODY, TIMEOUTS

pytestmark = pytest.mark.anyio


async def test_a_request_that_asks_to_close_its_connection_is_its_last() -> None:
    """A request sent with ``Connection: close`` ends its connection (RFC 9112 9.6, as h11
    does), whatever the answer says: it went back to the pool, and the next request was sent
    on a connection the server was done with (here it keeps it, silent, and the next call
    waited for its read timeout)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    with RawServer(head % len(BODY), (BODY,), hold=True) as server:
        transport = AnyioTransport(httpx2)
        for _ in range(2):
            request = httpx2.Request(
                "POST",
                f"{server.base_url}/chat/completions",
                content=b"{}",
                headers={"Connection": "close"},
                extensions={"timeout": {**TIMEOUTS, "read": 2.0}},
            )
            response = await transport.handle_async_request(request)
            assert await response.aread() == BODY
            await response.aclose()
            assert (transport._open, transport._idle) == (0, {})
        await transport.aclose()
