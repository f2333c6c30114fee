"""The provider's own async HTTP/1.1 transport (providers/_ahttp11.py) at its edges, against real
loopback servers: what a request asks of its connection, and a process with many descriptors."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest

from llmguard_sdk import OpenAICompatibleProvider, ProviderError
from llmguard_sdk.providers._ahttp11 import AnyioTransport
from llmguard_sdk.testing import FakeProvider
from tests.rawserver import EarlyAnswerServer, RawServer
from tests.test_ahttp11 import _Echo, post, read_whole
from tests.test_http11 import BODY, TIMEOUTS
from tests.test_http11_edges import FRAMED, HTTP10, HTTP10_KEPT, HUGE, MISFRAMED, TOO_LARGE
from tests.tlsserver import _certificate

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


async def test_connections_are_kept_when_descriptors_pass_1023(
    high_descriptors: Callable[[], None],
) -> None:
    """An idle connection whose socket's descriptor is past select()'s 1023 is still reused
    (select raised ValueError, read as "closed": a process with many files open made a new
    connection, a TLS handshake on https, for every call)."""
    with FakeProvider() as fake:
        transport = AnyioTransport(httpx2)
        high_descriptors()
        for _ in range(3):
            await read_whole(transport, f"{fake.base_url}/chat/completions")
        ((connection, _),) = [idle for pooled in transport._idle.values() for idle in pooled]
        sock = connection.stream.extra(anyio.abc.SocketAttribute.raw_socket)
        assert sock.fileno() > 1023
        assert fake.stats.connections == 1
        await transport.aclose()


async def test_a_connection_switched_to_another_protocol_is_not_reused() -> None:
    """After a 101 (Switching Protocols) the connection speaks another protocol: it went back
    to the pool (no body, no ``close``), and the next request was written into it."""
    head = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
    with RawServer(head, hold=True) as server:
        transport = AnyioTransport(httpx2)
        response = await transport.handle_async_request(
            httpx2.Request(
                "POST",
                f"{server.base_url}/chat/completions",
                content=b"{}",
                extensions={"timeout": TIMEOUTS},
            )
        )
        assert response.status_code == 101
        assert await response.aread() == b""
        await response.aclose()
        assert (transport._open, transport._idle) == (0, {})
        await transport.aclose()


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    with _Echo() as base_url:
        yield base_url


@pytest.mark.parametrize(
    "headers",
    [
        {"X-User": "a\r\nX-Injected: 1"},
        {"X-User": "a\nX-Injected: 1"},
        {"X-User": "a\x00b"},
        {"X-User\r\nX-Injected": "1"},
        {"X-User: X-Injected": "1"},
        {"X User": "1"},
    ],
)
async def test_a_header_that_would_break_its_line_is_refused_before_sending(
    echo: str, headers: dict[str, str]
) -> None:
    """A header name that is no token, or a value with a line break or a NUL, is refused as
    h11 (and http.client) refuse it, before anything is sent: it was written as it came, so a
    value could add headers of its own (or a whole request) to the request."""
    transport = AnyioTransport(httpx2)
    url = f"{echo}/v1/chat/completions"
    await read_whole(transport, url)  # a connection to keep
    request = httpx2.Request(
        "POST", url, content=b"{}", headers=headers, extensions={"timeout": TIMEOUTS}
    )
    with pytest.raises(httpx2.LocalProtocolError):
        await transport.handle_async_request(request)
    response = await transport.handle_async_request(
        httpx2.Request("POST", url, content=b"{}", extensions={"timeout": TIMEOUTS})
    )
    seen = json.loads(await response.aread())
    await response.aclose()
    assert not [name for name, _ in seen["headers"] if name.startswith("x-")]
    assert (transport._open, len(transport._idle[next(iter(transport._idle))])) == (1, 1)
    await transport.aclose()


async def test_connections_idle_past_keepalive_expiry_are_closed_under_one_in_use() -> None:
    """Idle connections past ``keepalive_expiry`` are closed though the one last used stays
    fresh (the pool takes the latest first: the ones below it were never looked at again and
    stayed open, half closed by the server, until the transport closed)."""
    with FakeProvider() as fake:
        transport = AnyioTransport(httpx2, httpx2.Limits(keepalive_expiry=1.0))
        url = f"{fake.base_url}/chat/completions"
        held = [await post(transport, url) for _ in range(3)]  # three connections
        for response in held:
            await response.aread()
            await response.aclose()
        for _ in range(2):  # the latest kept fresh; the other two go past their expiry
            await anyio.sleep(0.6)
            await read_whole(transport, url)
        assert (transport._open, fake.stats.connections) == (1, 3)
        await transport.aclose()


@pytest.mark.parametrize(("raw", "kept"), [(HTTP10, 0), (HTTP10_KEPT, 1)], ids=["close", "kept"])
async def test_an_http_1_0_answer_says_so_and_closes_unless_kept_alive(
    raw: bytes, kept: int
) -> None:
    """An HTTP/1.0 server's answer is reported as ``HTTP/1.0`` (always ``HTTP/1.1`` before),
    and its connection closes with it unless it says ``keep-alive``."""
    with RawServer(raw, hold=True) as server:
        transport = AnyioTransport(httpx2)
        response = await post(transport, f"{server.base_url}/x")
        assert (response.http_version, await response.aread()) == ("HTTP/1.0", b"{}")
        await response.aclose()
        assert transport._open == kept
        await transport.aclose()


@pytest.mark.parametrize("raw", FRAMED)
async def test_an_answer_framed_as_h11_reads_it_is_read_whole_and_kept(raw: bytes) -> None:
    """A length given twice alike is that length; a few trailers are read past."""
    with RawServer(raw, hold=True) as server:
        transport = AnyioTransport(httpx2)
        assert await read_whole(transport, f"{server.base_url}/x") == b"{}"
        assert transport._open == 1  # read whole and kept
        await transport.aclose()


@pytest.mark.parametrize("raw", MISFRAMED)
async def test_an_answer_h11_refuses_is_a_protocol_error(raw: bytes) -> None:
    """Lengths that disagree, a chunk size of 16 hex digits or more, and more trailer lines
    than a head may have, are refused as a head's would be (16 digits were taken, and
    trailers read without end); a ``Transfer-Encoding`` other than ``chunked`` alone, at once
    (read until the connection closed: here, the read timeout)."""
    with RawServer(raw, hold=True) as server:
        transport = AnyioTransport(httpx2)
        with pytest.raises(httpx2.RemoteProtocolError):
            await read_whole(transport, f"{server.base_url}/x")
        assert transport._open == 0
        await transport.aclose()


async def test_idle_connections_past_their_expiry_are_closed_though_the_pool_is_not_full() -> None:
    """An idle connection past ``keepalive_expiry`` is closed by later calls to any origin: it
    was closed only when the pool was full or its own origin was called again (a connection
    to an origin no longer called held its socket until the transport closed)."""
    with FakeProvider() as first, FakeProvider() as second:
        transport = AnyioTransport(httpx2, httpx2.Limits(keepalive_expiry=0.5))
        held = [await post(transport, f"{first.base_url}/chat/completions") for _ in range(2)]
        for response in held:  # two connections to first, idle
            await response.aread()
            await response.aclose()
        await anyio.sleep(0.7)  # both past their expiry
        for _ in range(3):
            await read_whole(transport, f"{second.base_url}/chat/completions")
        assert transport._open == 1  # second's only
        await transport.aclose()


async def test_bytes_anyio_read_ahead_on_an_idle_connection_keep_it_from_reuse() -> None:
    """An idle connection whose server sent more than was asked (here a second answer, right
    behind the first) is not reused: bytes read ahead into anyio's own buffer (asyncio's
    protocol reads up to 256 KiB a time; a receive takes 64 KiB) are invisible to a poll of
    the socket, so the next request was sent on it and read the stale answer as its own."""
    stale = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n"
    size = 65_536 - len(head % 60_000)  # the first answer: one receive's 64 KiB exactly
    first = head % size + b"x" * size
    with RawServer(first + stale, hold=True) as server:
        transport = AnyioTransport(httpx2)
        url = f"{server.base_url}/x"
        for _ in range(2):  # the second on a new connection (reused: "stale")
            assert await read_whole(transport, url) == b"x" * size
        await transport.aclose()


class _TLSRawServer(RawServer):
    """:class:`RawServer` over TLS (its own certificate, trusted through ``SSL_CERT_FILE``)."""

    def __init__(self, context: ssl.SSLContext, head: bytes, parts: tuple[bytes, ...]) -> None:
        self.context = context
        super().__init__(head, parts, hold=True)

    @property
    def base_url(self) -> str:
        return super().base_url.replace("http://", "https://")

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn = self.context.wrap_socket(conn, server_side=True)
        except OSError:
            conn.close()
            return
        super()._answer(conn)


async def test_records_a_tls_stream_read_ahead_keep_its_connection_from_reuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An extra answer in a TLS record of its own, read from the socket with the last record
    of the first: it waits in the TLS stream (not decrypted yet, or not taken), out of a
    poll's sight, and the next request read it as its own."""
    cert_file, key_file = _certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    stale = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(BODY)
    with _TLSRawServer(context, head + BODY, (stale,)) as server:
        transport = AnyioTransport(httpx2)
        for _ in range(2):  # the second on a new connection (reused: "stale")
            assert await read_whole(transport, f"{server.base_url}/x") == BODY
        await transport.aclose()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_answer_sent_before_the_request_was_written_whole_is_read(backend: str) -> None:
    """As the sync transport (tests/test_http11_edges.py): a 413 sent before the body was
    read, the connection then closed, is the call's error, not a write error with no status.
    Under asyncio, anyio reads nothing while a send waits: the answer was lost with the
    connection (as it is to httpx's own async transport); reading is on while sending."""

    async def call() -> ProviderError:
        provider = OpenAICompatibleProvider(server.base_url)
        try:
            await provider.acomplete(HUGE, model="m", deadline=time.monotonic() + 10)
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()
        raise AssertionError("the call did not fail")

    with EarlyAnswerServer(TOO_LARGE) as server:
        error = anyio.run(call, backend=backend)
    assert error.status_code == 413
    assert "request too large" in str(error)
