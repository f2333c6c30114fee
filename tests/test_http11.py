"""The provider's own sync HTTP/1.1 transport (providers/_http11.py) against real servers on
loopback: keep-alive and servers that close, chunked and compressed bodies, the pool's bound,
TLS with the same trust as httpx's transport, and the errors the provider maps."""

from __future__ import annotations

import gzip
import http.client
import http.server
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.errors import ProviderTimeoutError, ProviderUnavailableError
from llmguard_sdk.providers._abort import Abort, abortable
from llmguard_sdk.providers._http11 import DEADLINE, StdlibTransport
from llmguard_sdk.providers._http11_wire import StdlibResponse
from llmguard_sdk.testing import FakeProvider
from tests.rawserver import RawServer
from tests.tlsserver import serve_tls

ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi there"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
BODY = json.dumps(ANSWER).encode()
TIMEOUTS = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}


def ask(provider: OpenAICompatibleProvider) -> str | None:
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    return provider.complete(request, model="m", deadline=time.monotonic() + 10).text


def post(
    transport: StdlibTransport, url: str, timeouts: dict[str, float] = TIMEOUTS
) -> httpx.Response:
    request = httpx.Request("POST", url, content=b"{}", extensions={"timeout": timeouts})
    return transport.handle_request(request)


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    # RawServer answers one request per connection, then closes it (keep-alive announced)
    with RawServer(head % len(BODY), (BODY,)) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        assert ask(provider) == "hi there"
        time.sleep(0.3)  # the server's close reaches the idle connection
        assert ask(provider) == "hi there"  # a new connection, not a failed send
        provider.close()


def test_chunked_and_gzip_bodies_are_read_whole() -> None:
    packed = gzip.compress(BODY)
    chunks = tuple(b"%x\r\n%s\r\n" % (len(part), part) for part in (packed[:20], packed[20:]))
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    with RawServer(head, (*chunks, b"0\r\n\r\n")) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        assert ask(provider) == "hi there"
        provider.close()


def test_the_pool_bounds_connections_and_frees_them_when_a_body_is_read() -> None:
    with FakeProvider() as fake:
        transport = StdlibTransport(httpx.Limits(max_connections=1))
        url = f"{fake.base_url}/chat/completions"
        held = post(transport, url)  # its body not read: the only connection is in use
        with pytest.raises(httpx.PoolTimeout):
            post(transport, url, {**TIMEOUTS, "pool": 0.2})
        held.read()
        held.close()
        again = post(transport, url)  # the same connection, back in the pool
        again.read()
        again.close()
        assert fake.stats.connections == 1
        transport.close()
        with pytest.raises(RuntimeError, match="closed"):
            post(transport, url)


def test_a_pool_wait_under_an_abort_leaves_nothing_for_a_later_abort_to_stop() -> None:
    """A hedge leg's wait for a free connection registers a wake-up with the leg's abort;
    once the wait ends (its pool timeout, or a connection freed for it) the wake-up is
    removed: an abort after it has nothing to stop. Each ended wait's was kept, so the
    race's halt of that loser waited its grace for a call it could not stop."""
    with FakeProvider() as fake:
        transport = StdlibTransport(httpx.Limits(max_connections=1))
        url = f"{fake.base_url}/chat/completions"
        abort = Abort()
        held = post(transport, url)  # the only connection, in use
        with abortable(abort):
            for _ in range(20):
                with pytest.raises(httpx.PoolTimeout):
                    post(transport, url, {**TIMEOUTS, "pool": 0.01})
            freeing = threading.Timer(0.2, held.close)  # (freed while it waits, or before)
            freeing.start()
            try:
                post(transport, url).close()
            finally:
                freeing.join()
        assert abort.abort() is False
        transport.close()

    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"
    with RawServer(head, (BODY,)) as server:  # then the connection closes
        transport = StdlibTransport()
        response = post(transport, f"{server.base_url}/chat/completions")
        with pytest.raises(httpx.RemoteProtocolError):
            response.read()


@pytest.mark.parametrize("transport", [StdlibTransport, httpx.HTTPTransport])
def test_a_head_cut_short_is_a_protocol_error_as_httpx_reads_it(transport: type) -> None:
    """A connection closed within the head: httpx (h11) raises RemoteProtocolError; ours took
    the end of the stream for the end of the head (as http.client does) and read an empty
    body, so the provider reported a malformed answer instead of a broken connection."""
    with RawServer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n") as server:
        request = httpx.Request(
            "POST",
            f"{server.base_url}/chat/completions",
            content=b"{}",
            extensions={"timeout": TIMEOUTS},
        )
        with pytest.raises(httpx.RemoteProtocolError):
            transport().handle_request(request).read()


def test_connection_refused_is_a_connect_error_never_sent() -> None:
    server = FakeProvider()
    server.start()
    base_url = server.base_url
    server.stop()
    with pytest.raises(httpx.ConnectError):
        post(StdlibTransport(), f"{base_url}/chat/completions")


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback with a certificate of its own, and the certificate's file."""
    with serve_tls(tmp_path, BODY) as served:
        yield served


def trust_only_certifi(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy, and no certificates named by the environment: certifi's roots alone."""
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)


def test_tls_trusts_what_httpx_trusts(
    tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, cert_file = tls_server
    trust_only_certifi(monkeypatch)
    untrusting = OpenAICompatibleProvider(base_url)  # certifi's roots: not this certificate
    with pytest.raises(ProviderUnavailableError) as refused:
        ask(untrusting)
    assert refused.value.request_sent is False
    untrusting.close()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # as httpx reads it
    trusting = OpenAICompatibleProvider(base_url)
    assert ask(trusting) == "hi there"
    assert ask(trusting) == "hi there"
    trusting.close()


class _Socket:
    """What ``HTTPResponse`` reads a response from: raw bytes."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.raw)


# answers with odd heads (read by both transports, sync and async)
HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length:  -4 \r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}",
    b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\nHTTP/1.1 429 Too Many\nRetry-After: 3\n\n",
    b"HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n",
]


@pytest.mark.parametrize("raw", HEADS)
def test_the_head_is_read_as_http_client_reads_it(raw: bytes) -> None:
    ours = StdlibResponse(_Socket(raw), method="POST")  # type: ignore[arg-type]
    theirs = http.client.HTTPResponse(_Socket(raw), method="POST")  # type: ignore[arg-type]
    ours.begin()
    theirs.begin()
    for field in ("status", "reason", "version", "chunked", "will_close", "length"):
        assert getattr(ours, field) == getattr(theirs, field), field
    # values without the spaces around them, as httpx (h11) reads them
    assert ours.getheaders() == [(name, value.strip()) for name, value in theirs.getheaders()]
    assert ours.getheader("set-cookie") == theirs.getheader("set-cookie")
    assert ours.getheader("missing", "none") == theirs.getheader("missing", "none")
    assert ours.read() == theirs.read()


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # the server closed before answering
        b"HTTQ/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n",
    ],
)
def test_a_bad_head_fails_as_http_client_fails(raw: bytes) -> None:
    with pytest.raises(http.client.HTTPException) as theirs:
        http.client.HTTPResponse(_Socket(raw), method="POST").begin()  # type: ignore[arg-type]
    with pytest.raises(type(theirs.value)):
        StdlibResponse(_Socket(raw), method="POST").begin()  # type: ignore[arg-type]


def test_folded_and_malformed_header_lines_are_read_as_httpx_reads_them() -> None:
    folded = b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n\t two\r\nContent-Length: 0\r\n\r\n"
    response = StdlibResponse(_Socket(folded), method="POST")  # type: ignore[arg-type]
    response.begin()
    assert response.getheader("x-folded") == "one two"
    assert httpx.Response(200, headers=response.getheaders()).headers["x-folded"] == "one two"
    for line in (b"No-Colon-Line", b": no name"):
        raw = b"HTTP/1.1 200 OK\r\n%s\r\nContent-Length: 0\r\n\r\n" % line
        with pytest.raises(http.client.HTTPException, match="malformed header"):
            StdlibResponse(_Socket(raw), method="POST").begin()  # type: ignore[arg-type]


def test_idle_connections_expire_and_give_way_to_another_origin() -> None:
    with FakeProvider() as first, FakeProvider() as second:
        transport = StdlibTransport(httpx.Limits(max_connections=1, keepalive_expiry=0.3))
        for fake in (first, first):  # back to back: one connection
            post(transport, f"{fake.base_url}/chat/completions").read()
        assert first.stats.connections == 1
        time.sleep(0.5)  # idle past keepalive_expiry: not used again
        post(transport, f"{first.base_url}/chat/completions").read()
        assert first.stats.connections == 2
        # the only slot is first's idle connection: closed to make room, no pool timeout
        post(transport, f"{second.base_url}/chat/completions", {**TIMEOUTS, "pool": 0.2}).read()
        assert second.stats.requests == 1
        transport.close()


def test_interim_answers_are_skipped_as_httpx_skips_them() -> None:
    raw = (
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    )
    response = StdlibResponse(_Socket(raw), method="POST")  # type: ignore[arg-type]
    response.begin()
    assert (response.status, response.read()) == (200, b"{}")


def test_a_stream_read_to_its_last_event_leaves_its_connection_for_the_next_call() -> None:
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    with FakeProvider() as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="m")
        for _ in range(3):
            chunks = list(provider.stream(request, model="m", deadline=time.monotonic() + 10))
            assert "".join(chunk.text for chunk in chunks)
        assert ask(provider)  # a plain call after the streams, on the same connection
        assert fake.stats.streams == 3
        assert fake.stats.connections == 1  # the terminator after [DONE] read without waiting
        provider.close()


def test_a_stream_left_with_more_to_come_is_closed_without_waiting() -> None:
    event = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (len(event), event)
    with RawServer(head, (chunk,) * 50, gap=0.2, hold=True) as server:
        transport = StdlibTransport()
        response = post(transport, f"{server.base_url}/chat/completions")
        stream = response.iter_raw()
        assert next(stream)  # the first event; 49 more to come, one every 0.2 s
        started = time.monotonic()
        response.close()
        assert time.monotonic() - started < 0.15  # nothing waited for
        assert transport._open == 0  # the connection was closed, not kept


def test_non_ascii_header_values_are_read_and_free_their_connection() -> None:
    # httpx's Headers takes str values as ASCII only: a UTF-8 value failed the call with a
    # UnicodeEncodeError and kept its pool slot (every later call: PoolTimeout)
    # (the server answers one request a connection and says so: a second request on the
    # connection it is closing was reset on a busy machine)
    head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-note: café\r\n"
    head += "connection: close\r\n"
    with RawServer(head.encode() + b"content-length: %d\r\n\r\n" % len(BODY), (BODY,)) as server:
        transport = StdlibTransport(httpx.Limits(max_connections=1))
        timeouts = {**TIMEOUTS, "pool": 0.5}
        for _ in range(2):
            response = post(transport, f"{server.base_url}/chat/completions", timeouts)
            assert response.headers["x-note"] == "café"
            assert response.read() == BODY
            response.close()
        transport.close()


def test_a_head_dripped_a_byte_at_a_time_cannot_outlast_the_deadline() -> None:
    # each byte well within the read timeout: only the watchdog bounds the whole head
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"
    with RawServer(b"", (*(head[i : i + 1] for i in range(len(head))), b"{}"), gap=0.05) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
        started = time.monotonic()
        with pytest.raises(ProviderTimeoutError):  # the head takes about 3.5 s
            provider.complete(request, model="m", deadline=started + 0.5)
        assert time.monotonic() - started < 1.5
        with pytest.raises(ProviderTimeoutError):
            list(provider.stream(request, model="m", deadline=time.monotonic() + 0.5))
        provider.close()


def test_a_204_that_says_chunked_has_no_body_to_wait_for() -> None:
    # 204 and 304 never have a body (h11 ignores the header): the body's read waited for a
    # chunk that never comes, until the deadline
    head = b"HTTP/1.1 204 No Content\r\ntransfer-encoding: chunked\r\n\r\n"
    with RawServer(head, hold=True) as server:
        transport = StdlibTransport()
        started = time.monotonic()
        response = post(transport, f"{server.base_url}/chat/completions")
        assert (response.status_code, response.read()) == (204, b"")
        assert time.monotonic() - started < 1.0
        transport.close()


def test_a_stream_whose_terminator_is_split_is_not_reused_half_read() -> None:
    # "0\r" read without waiting, "\n\r\n" 0.3 s later: the half-read line was taken for the
    # whole terminator and the connection reused; the next call read "\n" as its status line
    event = b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\n'
    event += b"data: [DONE]\n\n"
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    parts = (b"%x\r\n%s\r\n0\r" % (len(event), event), b"\n\r\n")
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    with RawServer(head, parts, gap=0.3) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        for _ in range(2):  # the second on a new connection
            chunks = provider.stream(request, model="m", deadline=time.monotonic() + 10)
            assert "".join(chunk.text for chunk in chunks) == "x"
        provider.close()


def _through_proxy(proxy: RawServer, deadline: float) -> httpx.Response:
    transport = StdlibTransport(
        proxy=httpx.Proxy(f"http://127.0.0.1:{proxy.sock.getsockname()[1]}")
    )
    extensions = {"timeout": TIMEOUTS, DEADLINE: deadline}
    url = "https://api.example.test/v1/chat/completions"
    return transport.handle_request(httpx.Request("POST", url, extensions=extensions))


def test_a_proxy_dripping_its_connect_answer_cannot_outlast_the_deadline() -> None:
    # http.client reads the CONNECT answer a line at a time, each read with its own timeout
    answer = b"HTTP/1.1 200 Connection established\r\nX-Pad: " + b"p" * 40 + b"\r\n\r\n"
    drip = tuple(answer[i : i + 1] for i in range(len(answer)))  # about 4.5 s
    with RawServer(b"", drip, gap=0.05, hold=True) as proxy:
        started = time.monotonic()
        with pytest.raises((httpx.ConnectError, httpx.ProxyError)):  # both: not sent
            _through_proxy(proxy, started + 0.5)
        assert time.monotonic() - started < 1.5


def test_a_proxy_s_malformed_connect_answer_is_a_proxy_error() -> None:
    # it was http.client's BadStatusLine, past every typed error of the provider
    with RawServer(b"garbage\r\n\r\n") as proxy, pytest.raises(httpx.ProxyError):
        _through_proxy(proxy, time.monotonic() + 5)
