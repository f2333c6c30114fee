"""The provider's own async HTTP/1.1 transport (providers/_ahttp11.py) against real servers on
loopback: our FakeProvider, raw canned answers, and uvicorn (h11) as an independent peer that
reads what we send. Keep-alive and servers that close, chunked bodies both ways, the pool's
bound and its waiters, cancellation, TLS, and every head read as the sync transport reads it."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from anyio import wait_all_tasks_blocked

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.errors import ProviderUnavailableError
from llmguard_sdk.providers._ahttp11 import AnyioTransport
from llmguard_sdk.providers._http11 import StdlibTransport
from llmguard_sdk.testing import FakeProvider
from tests.rawserver import RawServer
from tests.test_http11 import BODY, HEADS, TIMEOUTS, trust_only_certifi
from tests.tlsserver import serve_tls

pytestmark = pytest.mark.anyio
REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


async def ask(provider: OpenAICompatibleProvider) -> str | None:
    return (await provider.acomplete(REQUEST, model="m", deadline=time.monotonic() + 10)).text


async def post(
    transport: AnyioTransport,
    url: str,
    timeouts: dict[str, float] = TIMEOUTS,
    content: Any = CHAT,
) -> httpx2.Response:
    request = httpx2.Request("POST", url, content=content, extensions={"timeout": timeouts})
    response: httpx2.Response = await transport.handle_async_request(request)
    return response


async def read_whole(transport: AnyioTransport, url: str) -> bytes:
    response = await post(transport, url)
    try:
        return await response.aread()
    finally:
        await response.aclose()


async def test_async_calls_go_through_it_and_keep_their_connection() -> None:
    with FakeProvider() as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="m")
        for _ in range(3):
            assert await ask(provider)
        assert isinstance(provider._async_pool().transport, AnyioTransport)
        assert fake.stats.connections == 1
        await provider.aclose()


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    # RawServer answers one request per connection, then closes it (keep-alive announced)
    with RawServer(head % len(BODY), (BODY,)) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        assert await ask(provider) == "hi there"
        await anyio.sleep(0.3)  # the server's close reaches the idle connection
        assert await ask(provider) == "hi there"  # a new connection, not a failed send
        await provider.aclose()


async def test_chunked_and_gzip_bodies_are_read_whole() -> None:
    packed = gzip.compress(BODY)
    chunks = tuple(b"%x\r\n%s\r\n" % (len(part), part) for part in (packed[:20], packed[20:]))
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    with RawServer(head, (*chunks, b"0\r\nx-trailer: 1\r\n\r\n"), gap=0.01) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        assert await ask(provider) == "hi there"
        await provider.aclose()


async def test_the_pool_bounds_connections_and_frees_them_when_a_body_is_read() -> None:
    with FakeProvider() as fake:
        transport = AnyioTransport(httpx2, httpx2.Limits(max_connections=1))
        url = f"{fake.base_url}/chat/completions"
        held = await post(transport, url)  # its body not read: the only connection is in use
        with pytest.raises(httpx2.PoolTimeout):
            await post(transport, url, {**TIMEOUTS, "pool": 0.2})
        assert not transport._waiting  # the waiter that gave up left no trace
        await held.aread()
        await held.aclose()
        again = await post(transport, url)  # the same connection, back in the pool
        await again.aread()
        await again.aclose()
        assert fake.stats.connections == 1
        await transport.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await post(transport, url)


async def test_a_waiter_gets_the_connection_a_finished_call_frees() -> None:
    with FakeProvider() as fake:
        transport = AnyioTransport(httpx2, httpx2.Limits(max_connections=2))
        url = f"{fake.base_url}/chat/completions"
        bodies: list[bytes] = []

        async def call() -> None:
            response = await post(transport, url)
            bodies.append(await response.aread())
            await response.aclose()

        async with anyio.create_task_group() as tasks:
            for _ in range(12):  # six times more calls than connections, none times out
                tasks.start_soon(call)
        assert len(bodies) == 12
        assert all(json.loads(body)["choices"] for body in bodies)
        assert fake.stats.connections == 2
        assert transport._open == 2
        assert not transport._waiting
        await transport.aclose()
        assert transport._open == 0


async def test_a_waiter_is_served_before_a_call_that_came_after_it() -> None:
    """A connection freed while a call waits for one goes to that call: a call that came
    later took it first (the woken waiter found the pool full and queued again, at the back:
    under steady load it waited until its pool timeout while later calls were served)."""
    with FakeProvider() as fake:
        transport = AnyioTransport(httpx2, httpx2.Limits(max_connections=1))
        url = f"{fake.base_url}/chat/completions"
        served: list[str] = []

        async def call(name: str) -> None:
            response = await post(transport, url)
            served.append(name)
            await response.aread()
            await response.aclose()

        held = await post(transport, url)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call, "first")
            await wait_all_tasks_blocked()  # "first" waits for the only connection
            await held.aread()
            await held.aclose()  # the connection is freed: "first" is woken ...
            await call("later")  # ... and this call, made now, comes after it
        assert served == ["first", "later"]
        assert (transport._open, len(transport._waiting), fake.stats.connections) == (1, 0, 1)
        await transport.aclose()


async def test_a_waiter_cancelled_as_it_is_woken_passes_the_connection_on() -> None:
    """A waiter handed the freed connection and cancelled before it ran (asyncio.timeout,
    wait_for, a hedge's loser) passes it to the next waiter: the wake-up was lost, and the
    next waiter failed with PoolTimeout beside an idle connection."""
    with FakeProvider() as fake:
        transport = AnyioTransport(httpx2, httpx2.Limits(max_connections=1))
        url = f"{fake.base_url}/chat/completions"
        held = await post(transport, url)
        first = asyncio.get_running_loop().create_task(post(transport, url))
        await wait_all_tasks_blocked()
        second = asyncio.get_running_loop().create_task(
            post(transport, url, {**TIMEOUTS, "pool": 2})
        )
        await wait_all_tasks_blocked()
        await held.aread()
        await held.aclose()  # "first" is woken ...
        first.cancel()  # ... and cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await first
        response = await second
        assert json.loads(await response.aread())["choices"]
        await response.aclose()
        assert (transport._open, len(transport._waiting), fake.stats.connections) == (1, 0, 1)
        await transport.aclose()


async def test_a_call_cancelled_mid_answer_closes_its_connection_and_frees_its_slot() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4\r\n\r\n"
    with RawServer(head, (b"{",), hold=True) as server:  # three bytes of the body never come
        transport = AnyioTransport(httpx2, httpx2.Limits(max_connections=1))
        url = f"{server.base_url}/chat/completions"
        with anyio.move_on_after(0.3) as scope:
            response = await post(transport, url)
            await response.aread()
        assert scope.cancelled_caught
        await response.aclose()
        assert transport._open == 0  # not kept half read: the slot is free again
    with RawServer(b"", (head,), gap=5) as server:  # the head comes after 5 s
        url = f"{server.base_url}/chat/completions"
        with anyio.move_on_after(0.3) as scope:  # cancelled while the head is awaited
            await post(transport, url)
        assert scope.cancelled_caught
        assert transport._open == 0
        await transport.aclose()


async def test_a_body_cut_short_is_an_error_not_a_short_answer() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"
    with RawServer(head, (BODY,)) as server:  # then the connection closes
        transport = AnyioTransport(httpx2)
        response = await post(transport, f"{server.base_url}/chat/completions")
        with pytest.raises(httpx2.RemoteProtocolError):
            await response.aread()
        assert transport._open == 0


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # the server closed before answering
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n",  # closed within the head
        b"HTTQ/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nNo-Colon-Line\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: no name\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",  # a bad chunk size
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n",
    ],
)
async def test_a_bad_answer_is_a_protocol_error_and_frees_its_connection(raw: bytes) -> None:
    with RawServer(raw) as server:
        transport = AnyioTransport(httpx2)
        with pytest.raises(httpx2.RemoteProtocolError):
            await read_whole(transport, f"{server.base_url}/chat/completions")
        assert transport._open == 0


async def test_connection_refused_is_a_connect_error_never_sent() -> None:
    server = FakeProvider()
    server.start()
    base_url = server.base_url
    server.stop()
    with pytest.raises(httpx2.ConnectError):
        await post(AnyioTransport(httpx2), f"{base_url}/chat/completions")


# the heads that test_http11 reads with the sync transport and a few more, each served whole
ANSWERS = [
    *HEADS,
    b"HTTP/1.1 204 No Content\r\ntransfer-encoding: chunked\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n\t two\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nx-note: café\r\ncontent-length: 2\r\n\r\n{}".encode(),
    b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\r\n{}",  # until closed
]


@pytest.mark.parametrize("raw", ANSWERS)
async def test_every_answer_is_read_as_the_sync_transport_reads_it(raw: bytes) -> None:
    with RawServer(raw) as server:
        url = f"{server.base_url}/chat/completions"
        sync = StdlibTransport()
        theirs = sync.handle_request(
            httpx.Request("POST", url, content=b"{}", extensions={"timeout": TIMEOUTS})
        )
        their_body = theirs.read()
        transport = AnyioTransport(httpx2)
        ours = await post(transport, url)
        our_body = await ours.aread()
        await ours.aclose()
        assert ours.status_code == theirs.status_code
        assert ours.reason_phrase == theirs.reason_phrase
        assert ours.headers.multi_items() == theirs.headers.multi_items()
        assert our_body == their_body
        theirs.close()
        sync.close()
        await transport.aclose()


async def test_idle_connections_expire_and_give_way_to_another_origin() -> None:
    with FakeProvider() as first, FakeProvider() as second:
        limits = httpx2.Limits(max_connections=1, keepalive_expiry=0.3)
        transport = AnyioTransport(httpx2, limits)
        for fake in (first, first):  # back to back: one connection
            await read_whole(transport, f"{fake.base_url}/chat/completions")
        assert first.stats.connections == 1
        await anyio.sleep(0.5)  # idle past keepalive_expiry: not used again
        await read_whole(transport, f"{first.base_url}/chat/completions")
        assert first.stats.connections == 2
        # the only slot is first's idle connection: closed to make room, no pool timeout
        other = f"{second.base_url}/chat/completions"
        await (await post(transport, other, {**TIMEOUTS, "pool": 0.2})).aread()
        assert second.stats.requests == 1
        await transport.aclose()


async def test_a_stream_read_to_its_last_event_leaves_its_connection_for_the_next_call() -> None:
    with FakeProvider() as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="m")
        for _ in range(3):
            stream = provider.astream(REQUEST, model="m", deadline=time.monotonic() + 10)
            assert "".join([chunk.text async for chunk in stream])
        assert await ask(provider)  # a plain call after the streams, on the same connection
        assert fake.stats.streams == 3
        assert fake.stats.connections == 1  # the terminator after [DONE] read without waiting
        await provider.aclose()


async def test_a_stream_left_with_more_to_come_is_closed_without_waiting() -> None:
    event = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (len(event), event)
    with RawServer(head, (chunk,) * 50, gap=0.2, hold=True) as server:
        transport = AnyioTransport(httpx2)
        response = await post(transport, f"{server.base_url}/chat/completions")
        assert await response.aiter_raw().__anext__()  # the first event; 49 more to come
        started = time.monotonic()
        await response.aclose()
        assert time.monotonic() - started < 0.15  # nothing waited for
        assert transport._open == 0  # the connection was closed, not kept


async def test_a_stream_whose_terminator_is_split_is_not_reused_half_read() -> None:
    event = b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\n'
    event += b"data: [DONE]\n\n"
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    parts = (b"%x\r\n%s\r\n0\r" % (len(event), event), b"\n\r\n")
    with RawServer(head, parts, gap=0.3) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        for _ in range(2):  # the second on a new connection
            stream = provider.astream(REQUEST, model="m", deadline=time.monotonic() + 10)
            assert "".join([chunk.text async for chunk in stream]) == "x"
        await provider.aclose()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback with a certificate of its own, and the certificate's file."""
    with serve_tls(tmp_path, BODY) as served:
        yield served


async def test_tls_trusts_what_httpx_trusts(
    tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, cert_file = tls_server
    trust_only_certifi(monkeypatch)
    untrusting = OpenAICompatibleProvider(base_url)  # certifi's roots: not this certificate
    with pytest.raises(ProviderUnavailableError) as refused:
        await ask(untrusting)
    assert refused.value.request_sent is False
    await untrusting.aclose()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # as httpx reads it
    trusting = OpenAICompatibleProvider(base_url)
    assert await ask(trusting) == "hi there"
    idle = trusting._async_pool().transport._idle
    kept = [connection for pooled in idle.values() for connection, _ in pooled]
    assert await ask(trusting) == "hi there"
    # the same connection again: nothing a TLS stream holds (its records read, a session
    # ticket) reads as bytes read ahead
    assert [connection for pooled in idle.values() for connection, _ in pooled] == kept
    assert len(kept) == 1
    await trusting.aclose()


class _Echo:
    """uvicorn (h11) on loopback in a thread: an independent reader of what we send. Each
    request is answered with its method, target, headers and body as JSON, streamed in
    chunks when the request asks ``?stream=N``."""

    def __init__(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            self._app, host="127.0.0.1", port=0, log_level="warning", interface="asgi3"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = json.dumps(
            {
                "method": scope["method"],
                "path": scope["path"],
                "query": scope["query_string"].decode(),
                "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
                "body": body.decode("latin-1"),
            }
        ).encode()
        query = scope["query_string"].decode()
        parts = int(query.removeprefix("stream=")) if query.startswith("stream=") else 0
        headers = [(b"content-type", b"application/json")]
        if not parts:
            headers.append((b"content-length", str(len(answer)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if not parts:
            await send({"type": "http.response.body", "body": answer})
            return
        step = -(-len(answer) // parts)
        for start in range(0, len(answer), step):
            piece = answer[start : start + step]
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    with _Echo() as base_url:
        yield base_url


async def test_an_independent_server_reads_our_requests_as_sent(echo: str) -> None:
    transport = AnyioTransport(httpx2)
    big = b"x" * 300_000  # more than one write's worth

    async def parts() -> AsyncIterator[bytes]:
        for piece in (b"one,", b"", b"two,", b"three"):
            yield piece

    for content, expected in ((b"{}", b"{}"), (big, big), (parts(), b"one,two,three")):
        response = await post(transport, f"{echo}/v1/chat/completions?q=%C3%A9", content=content)
        seen = json.loads(await response.aread())
        await response.aclose()
        assert (seen["method"], seen["path"], seen["query"]) == (
            "POST",
            "/v1/chat/completions",
            "q=%C3%A9",
        )
        assert seen["body"].encode("latin-1") == expected
        headers = dict(seen["headers"])
        assert headers["host"] == echo.removeprefix("http://")
    assert transport._open == 1  # every request on the one connection
    await transport.aclose()


async def test_an_independent_server_s_chunked_answers_are_read_whole(echo: str) -> None:
    transport = AnyioTransport(httpx2, httpx2.Limits(max_connections=1))
    for parts in (1, 3, 40):
        response = await post(transport, f"{echo}/v1/x?stream={parts}", content=b"abc")
        assert response.headers["transfer-encoding"] == "chunked"
        pieces = [piece async for piece in response.aiter_raw()]
        await response.aclose()
        assert json.loads(b"".join(pieces))["body"] == "abc"
    assert transport._open == 1  # read whole: the connection kept
    await transport.aclose()


async def test_the_httpx_library_gets_its_own_responses_and_errors() -> None:
    with FakeProvider() as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="m", http_library="httpx")
        assert await ask(provider)
        pool = provider._async_pool()
        assert isinstance(pool.transport, AnyioTransport)
        await provider.aclose()
    transport = AnyioTransport(httpx)
    request = httpx.Request("POST", "ftp://127.0.0.1/x", extensions={"timeout": TIMEOUTS})
    with pytest.raises(httpx.UnsupportedProtocol):
        await transport.handle_async_request(request)
    assert transport._open == 0


def test_under_trio_calls_streams_and_waiters_share_the_pool() -> None:
    """anyio streams, events and cancel scopes: the same transport under trio's event loop."""
    with FakeProvider() as fake:

        async def run() -> tuple[list[str | None], str]:
            provider = OpenAICompatibleProvider(fake.base_url, model="m", max_connections=2)
            answers: list[str | None] = []

            async def call() -> None:
                answers.append(await ask(provider))

            async with anyio.create_task_group() as tasks:
                for _ in range(8):  # four times more calls than connections
                    tasks.start_soon(call)
            stream = provider.astream(REQUEST, model="m", deadline=time.monotonic() + 10)
            streamed = "".join([chunk.text async for chunk in stream])
            assert isinstance(provider._async_pool().transport, AnyioTransport)
            await provider.aclose()
            return answers, streamed

        answers, streamed = anyio.run(run, backend="trio")
        assert answers == ["Echo: hi"] * 8
        assert streamed == "Echo: hi"
        assert fake.stats.connections == 2  # the stream took an idle one
