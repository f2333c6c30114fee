"""The provider's own sync HTTP/1.1 transport (providers/_http11.py) at the edges its async twin
was found wanting at (tests/test_ahttp11_edges.py): what a request asks of its connection, a
101, headers that would break their line, and a process with many descriptors."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider, ProviderError
from llmguard_sdk.providers._http11 import StdlibTransport
from llmguard_sdk.testing import FakeProvider
from tests.rawserver import EarlyAnswerServer, RawServer
from tests.test_http11 import BODY, TIMEOUTS, post


def _send(transport: StdlibTransport, url: str, **headers: str) -> bytes:
    request = httpx.Request(
        "POST", url, content=b"{}", headers=headers, extensions={"timeout": TIMEOUTS}
    )
    response = transport.handle_request(request)
    try:
        return response.read()
    finally:
        response.close()


def test_a_request_that_asks_to_close_its_connection_is_its_last() -> None:
    """``Connection: close`` sent ends the connection (as h11 does), whatever the answer says;
    it went back to the pool and the next call was sent on a connection the server was done
    with (here held silent: the next call waited for its read timeout)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    with RawServer(head % len(BODY), (BODY,), hold=True) as server:
        transport = StdlibTransport()
        for _ in range(2):
            assert _send(transport, f"{server.base_url}/x", Connection="close") == BODY
            assert (transport._open, transport._idle.get(("http", "127.0.0.1", _port(server)))) in (
                (0, None),
                (0, []),
            )
        transport.close()


def _port(server: RawServer) -> int:
    return int(server.sock.getsockname()[1])


def test_a_connection_switched_to_another_protocol_is_not_reused() -> None:
    head = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
    with RawServer(head, hold=True) as server:
        transport = StdlibTransport()
        assert _send(transport, f"{server.base_url}/x") == b""
        assert transport._open == 0
        transport.close()


def test_connections_are_kept_when_descriptors_pass_1023(
    high_descriptors: Callable[[], None],
) -> None:
    with FakeProvider() as fake:
        transport = StdlibTransport()
        high_descriptors()
        for _ in range(3):
            _send(transport, f"{fake.base_url}/chat/completions")
        ((connection, _),) = [idle for pooled in transport._idle.values() for idle in pooled]
        assert connection.sock is not None
        assert connection.sock.fileno() > 1023
        assert fake.stats.connections == 1
        transport.close()


@pytest.mark.parametrize(
    "headers",
    [
        {"X-User": "a\r\nX-Injected: 1"},
        {"X-User": "a\x00b"},
        {"X-User\r\nX-Injected": "1"},
        {"X User": "1"},
    ],
)
def test_a_header_that_would_break_its_line_is_an_httpx_error(headers: dict[str, str]) -> None:
    """http.client refuses these with a ValueError, past every typed error the provider maps:
    h11's LocalProtocolError, as the async transport raises, and the connection freed."""
    with FakeProvider() as fake:
        transport = StdlibTransport(httpx.Limits(max_connections=1))
        url = f"{fake.base_url}/chat/completions"
        with pytest.raises(httpx.LocalProtocolError):
            _send(transport, url, **headers)
        assert transport._open == 0
        _send(transport, url)
        transport.close()


REPEATED = b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\n\r\n{}"
REPEATED_LINES = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nContent-Length: 2\r\n\r\n{}"
CONFLICTING = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 5\r\n\r\n{}"


HTTP10 = b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
HTTP10_KEPT = b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\n{}"
_CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
LONG_CHUNK_SIZE = _CHUNKED + b"0000000000000002\r\n{}\r\n0\r\n\r\n"  # 16 hex digits
SIGNED_CHUNK_SIZE = _CHUNKED + b"+2\r\n{}\r\n0\r\n\r\n"  # int(b"+2", 16) reads it
ENDLESS_TRAILERS = _CHUNKED + b"2\r\n{}\r\n0\r\n" + b"x-trailer: 1\r\n" * 101 + b"\r\n"
OVERLONG_CHUNK = _CHUNKED + b"2\r\n{}XX0\r\n\r\n"  # "XX" past the chunk's size
FEW_TRAILERS = _CHUNKED + b"2\r\n{}\r\n0\r\n" + b"x-trailer: 1\r\n" * 3 + b"\r\n"
_CODED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: %s\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
GZIP_CHUNKED = _CODED % b"gzip, chunked"  # taken for no framing: read until closed
CHUNKED_TWICE = _CHUNKED.replace(b"\r\n\r\n", b"\r\ntransfer-encoding: chunked\r\n\r\n")
# answers framed as h11 reads them: read whole, their connection kept (both transports)
FRAMED = [
    pytest.param(REPEATED, id="length-listed-twice"),
    pytest.param(REPEATED_LINES, id="length-lines-twice"),
    pytest.param(FEW_TRAILERS, id="few-trailers"),
]
# answers h11 refuses: a protocol error, their connection closed (both transports)
MISFRAMED = [
    pytest.param(CONFLICTING, id="lengths-disagree"),
    pytest.param(LONG_CHUNK_SIZE, id="long"),
    pytest.param(SIGNED_CHUNK_SIZE, id="signed"),
    pytest.param(ENDLESS_TRAILERS, id="trailers"),
    pytest.param(OVERLONG_CHUNK, id="overlong"),
    pytest.param(GZIP_CHUNKED, id="gzip-chunked"),
    pytest.param(_CODED % b"gzip", id="gzip"),
    pytest.param(CHUNKED_TWICE + b"2\r\n{}\r\n0\r\n\r\n", id="chunked-twice"),
]


@pytest.mark.parametrize(("raw", "kept"), [(HTTP10, 0), (HTTP10_KEPT, 1)], ids=["close", "kept"])
def test_an_http_1_0_answer_says_so_and_closes_unless_kept_alive(raw: bytes, kept: int) -> None:
    """An HTTP/1.0 server's answer is reported as ``HTTP/1.0`` (always ``HTTP/1.1`` before),
    and its connection closes with it unless it says ``keep-alive``."""
    with RawServer(raw, hold=True) as server:
        transport = StdlibTransport()
        request = httpx.Request(
            "POST", f"{server.base_url}/x", content=b"{}", extensions={"timeout": TIMEOUTS}
        )
        response = transport.handle_request(request)
        assert (response.http_version, response.read()) == ("HTTP/1.0", b"{}")
        response.close()
        assert transport._open == kept
        transport.close()


@pytest.mark.parametrize("raw", FRAMED)
def test_an_answer_framed_as_h11_reads_it_is_read_whole_and_kept(raw: bytes) -> None:
    """A length given twice alike (proxies repeat it, as a list or as lines) is that length,
    as h11 reads it: ``int("2, 2")`` failed and the body was read until the connection closed
    (here held: until the read timeout). A few trailers are read past."""
    with RawServer(raw, hold=True) as server:
        transport = StdlibTransport()
        assert _send(transport, f"{server.base_url}/x") == b"{}"
        assert transport._open == 1  # read whole and kept
        transport.close()


@pytest.mark.parametrize("raw", MISFRAMED)
def test_an_answer_h11_refuses_is_a_protocol_error(raw: bytes) -> None:
    """Lengths that disagree, a chunk size of 16 hex digits or more (or one ``int()`` reads but
    HTTP does not: a sign), and more trailer lines than a head may have, are refused as a
    head's would be: http.client took any ``int(line, 16)`` and read trailers without end. A
    ``Transfer-Encoding`` other than ``chunked`` alone (``gzip, chunked``) is refused at once:
    taken for no framing, the body was read until the connection closed (here held: until
    the read timeout)."""
    with RawServer(raw, hold=True) as server:
        transport = StdlibTransport()
        with pytest.raises(httpx.RemoteProtocolError):
            _send(transport, f"{server.base_url}/x")
        assert transport._open == 0
        transport.close()


def test_idle_connections_past_their_expiry_are_closed_though_the_pool_is_not_full() -> None:
    """An idle connection past ``keepalive_expiry`` is closed by later calls, whichever origin
    they go to (it was closed only when the pool was full, or its own origin was called again:
    a connection to an origin no longer called held its socket until the transport closed),
    and one below the connection an origin's next call takes too (the latest was taken, the
    older ones under it never looked at again)."""
    with FakeProvider() as first, FakeProvider() as second:
        transport = StdlibTransport(httpx.Limits(keepalive_expiry=0.5))
        held = [post(transport, f"{first.base_url}/chat/completions") for _ in range(2)]
        for response in held:  # two connections to first, idle
            response.read()
            response.close()
        time.sleep(0.7)  # both past their expiry
        for _ in range(3):
            post(transport, f"{second.base_url}/chat/completions").read()
        assert transport._open == 1  # second's only
        transport.close()


TOO_LARGE = (
    b"HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b'content-length: 44\r\n\r\n{"error": {"message": "request too large"}}\n'
)
HUGE = ChatRequest.model_validate({"messages": [{"role": "user", "content": "x" * 2**25}]})


def test_an_answer_sent_before_the_request_was_written_whole_is_read() -> None:
    """A server that answers a body too large with a 413 and closes without reading it: the
    rest of the request met a reset, and the call failed as a connection error with no
    status (retryable, sent again as large), where httpx's transport reads the answer."""
    with EarlyAnswerServer(TOO_LARGE) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        with pytest.raises(ProviderError) as raised:
            provider.complete(HUGE, model="m", deadline=time.monotonic() + 10)
        provider.close()
    assert raised.value.status_code == 413
    assert "request too large" in str(raised.value)
