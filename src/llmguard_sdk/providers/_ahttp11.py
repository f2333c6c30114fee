"""The provider's own async HTTP/1.1 transport: httpx's interface over anyio streams.

A provider's async requests go to a transport directly (see :mod:`._requests`). httpx2's
(and httpx's) ``AsyncHTTPTransport`` runs each request through httpcore's connection pool,
which looks at every pooled connection for each request (at 500 concurrent calls, about 500
checks a request), and through h11's state machine: an async call cost about three times
the CPU of a sync one through :class:`~._http11.StdlibTransport`. :class:`AnyioTransport`
sends the same request over an anyio byte stream (asyncio or trio; TLS by anyio), keeps
idle connections in a stack per origin (the last one used first: taking one is O(1)), and
answers the library's ``Response`` whose body is read from the connection as the caller
reads it, so the provider's reading, decoding (``Content-Encoding`` stays the library's
work), streaming and error mapping are unchanged.

What it keeps from the library's transport, as :class:`~._http11.StdlibTransport` does: the
same TLS context (the library's ``create_ssl_context()``), at most ``max_connections``
connections (a request that finds none free within its pool timeout fails with
``PoolTimeout``; waiting requests are served first come, first served), idle connections
kept alive (``max_keepalive_connections``, ``keepalive_expiry``) and dropped when the
server has closed them, the head read as h11 reads it (:func:`~._http1.head_fields`), the
connect / read / write / pool timeouts of the request, and the library's exception classes,
so a failure before any byte was sent (``ConnectError``, ``ConnectTimeout``,
``PoolTimeout``) stays safe to send again. A call cancelled while it sends or reads closes
its connection (its state is unknown). HTTP/1.1 only; no proxies (where the environment
names one, the library's client makes its own transports).
"""

from __future__ import annotations

import collections
import functools
import re
import ssl
import time
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import anyio
import anyio.abc

from ._aconnection import STREAM_ERRORS, Connection, stop_reading
from ._http1 import (
    MAX_HEADERS,
    MAX_LINE,
    asks_to_close,
    body_length,
    chunk_size,
    chunked,
    head_fields,
    illegal_header,
    put_idle,
    sweep_expired,
    take_longest_idle,
)

__all__ = ["AnyioTransport"]

_MAX_HEAD = MAX_LINE * 4  # bytes of a head (status line and header lines), at most
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_DRAIN_READS = 4  # reads of a stream's rest, at most, to reuse its connection
_DRAIN_WAIT = 0.004  # seconds those reads may take together
_Origin = tuple[str, str, int]


class AnyioTransport:
    """An async transport of httpx or httpx2 (``module``) over anyio streams (see the
    module docs). Use it from one event loop (a provider keeps one per loop)."""

    def __init__(self, module: ModuleType, limits: Any = None) -> None:
        self._module = module
        self._body_class = _body_class(module)
        limits = limits or module.Limits()
        self._max: int | None = limits.max_connections
        self._keep_alive: int | None = limits.max_keepalive_connections
        self._expiry: float | None = limits.keepalive_expiry
        # idle connections of each origin, each with the time it went idle (latest last)
        self._idle: dict[_Origin, list[tuple[Connection, float]]] = {}
        self._sweep: collections.deque[_Origin] = collections.deque()  # _idle's, in turn
        self._open = 0  # connections in use or idle
        self._waiting: collections.deque[_Waiter] = collections.deque()  # first come first
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def handle_async_request(self, request: Any) -> Any:
        """Send ``request`` and answer its response, the body still to be read."""
        module = self._module
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        request_head = _request_head(request, module)
        connection = await self._connection(origin, timeouts)
        write_error = None  # a write's failure: the answer is read all the same (httpcore's)
        try:
            reading = connection.read_while_sending()  # (an answer before the body's end)
            try:
                await _send_request(connection, request, request_head, timeouts, module)
            except module.WriteError as exc:  # a server that answered (a 413) and closed
                write_error = exc
            finally:
                stop_reading(reading)
            head = await _read_response_head(
                connection, timeouts.get("read"), request.method, module
            )
        except BaseException as exc:
            await self._discard(connection)
            if write_error is not None and isinstance(exc, Exception):  # (no answer came)
                raise write_error from exc
            raise
        if write_error or asks_to_close(request):  # its last on this connection (RFC 9112 9.6)
            head.will_close = True
        body = self._body_class(self, origin, connection, head, timeouts.get("read"))
        return module.Response(
            head.status,
            headers=head.raw_headers,
            stream=body,
            extensions={"http_version": head.version, "reason_phrase": head.reason},
        )

    async def __aenter__(self) -> AnyioTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when their body is read."""
        self._closed = True
        idle = [connection for pooled in self._idle.values() for connection, _ in pooled]
        self._idle.clear()
        self._sweep.clear()
        self._open -= len(idle)
        self._wake_all()
        for connection in idle:
            await connection.close()

    # -- the pool ---------------------------------------------------------------------------

    async def _connection(self, origin: _Origin, timeouts: dict[str, Any]) -> Connection:
        """An idle connection to ``origin`` that the server has not closed, else a new one
        once fewer than ``max_connections`` are open, else the first freed while this call
        waits, first come first served (up to the pool timeout)."""
        pool_timeout = timeouts.get("pool")
        wait_until = None if pool_timeout is None else time.monotonic() + pool_timeout
        if self._closed:
            raise RuntimeError("Cannot send a request, as the transport has been closed.")
        for stale in sweep_expired(self._idle, self._sweep, self._fresh):  # one origin's
            self._open -= 1
            await stale.close()
        pooled = self._idle.get(origin)
        while pooled:  # the expired ones (the longest idle first) closed, then the latest
            expired = not self._fresh(pooled[0][1])
            connection, _ = pooled.pop(0 if expired else -1)
            if not expired and connection.reusable():
                return connection
            self._open -= 1
            await connection.close()
        if self._max is not None and self._open >= self._max:
            await self._close_an_idle_one()  # of another origin: room for this one
        if self._max is None or self._open < self._max:
            self._open += 1
        else:  # none idle, none to open: waiting in line (none waits when a slot is free)
            handed = await self._wait_for_a_slot(origin, wait_until)
            if handed is not None:
                return handed
        try:
            return await self._connect(origin, timeouts.get("connect"))
        except BaseException:
            self._release_slot()
            raise

    async def _wait_for_a_slot(
        self, origin: _Origin, wait_until: float | None
    ) -> Connection | None:
        """Wait in line for a call to end: handed its connection (to ``origin``), else its
        slot (``None``: a connection to open). A freed slot goes to the first waiter, so a
        call made meanwhile cannot take it first (it waits behind)."""
        waiter = _Waiter(origin)
        self._waiting.append(waiter)
        left = None if wait_until is None else max(0.0, wait_until - time.monotonic())
        try:
            with anyio.move_on_after(left):
                await waiter.event.wait()
        except BaseException:  # cancelled, perhaps once handed one: passed on
            await self._leave(waiter)
            raise
        if self._closed or not waiter.served:
            await self._leave(waiter)
            if self._closed:
                raise RuntimeError("Cannot send a request, as the transport has been closed.")
            raise self._module.PoolTimeout("no connection free within the pool timeout")
        return waiter.connection

    async def _leave(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the line, passing on what it was handed."""
        if not waiter.served:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
        elif waiter.connection is not None:
            await self._put_back(waiter.origin, waiter.connection)
        else:
            self._release_slot()

    async def _connect(self, origin: _Origin, connect_timeout: float | None) -> Connection:
        module = self._module
        scheme, host, port = origin
        if scheme not in ("http", "https"):
            raise module.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        try:
            with anyio.fail_after(connect_timeout):
                stream: anyio.abc.ByteStream
                if scheme == "https":
                    stream = await anyio.connect_tcp(
                        host, port, ssl_context=self._tls(), tls_standard_compatible=False
                    )
                else:
                    stream = await anyio.connect_tcp(host, port)
        except TimeoutError as exc:
            raise module.ConnectTimeout(str(exc) or "connect timed out") from exc
        except (OSError, anyio.BrokenResourceError) as exc:  # refused, DNS, TLS handshake
            raise module.ConnectError(str(exc) or type(exc).__name__) from exc
        return Connection(stream)

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:  # the library's own: the same trust as its transport
            self._ssl = self._module.create_ssl_context()
        return self._ssl

    def _fresh(self, since: float) -> bool:
        """Whether a connection idle since ``since`` may still be used (the library's
        ``keepalive_expiry``: a server closes idle connections after a while)."""
        return self._expiry is None or time.monotonic() - since < self._expiry

    async def _close_an_idle_one(self) -> None:
        """Close the longest idle connection of any origin."""
        connection = take_longest_idle(self._idle)
        if connection is not None:
            self._open -= 1
            await connection.close()

    async def _put_back(self, origin: _Origin, connection: Connection) -> None:
        """Put a connection whose response was read whole back in the pool: to the first
        waiter where it waits for this origin, else idle (a waiter for another origin gets
        its slot: the connection is closed)."""
        if self._closed:
            pass
        elif self._waiting:
            if self._waiting[0].origin == origin:
                self._waiting.popleft().serve(connection)
                return
        elif self._keep_alive is None or sum(map(len, self._idle.values())) < self._keep_alive:
            put_idle(self._idle, self._sweep, origin).append((connection, time.monotonic()))
            return
        await self._discard(connection)

    async def _discard(self, connection: Connection) -> None:
        self._release_slot()
        await connection.close()

    def _release_slot(self) -> None:
        """A connection closed: its slot goes to the first waiter, else it is free."""
        if self._waiting and not self._closed:
            self._waiting.popleft().serve(None)
        else:
            self._open -= 1

    def _wake_all(self) -> None:
        while self._waiting:
            self._waiting.popleft().event.set()


class _Waiter:
    """A call waiting for a connection to ``origin``, and what it was handed: a connection,
    or (``served`` without one) a slot to open one in."""

    __slots__ = ("connection", "event", "origin", "served")

    def __init__(self, origin: _Origin) -> None:
        self.origin = origin
        self.event = anyio.Event()
        self.connection: Connection | None = None
        self.served = False

    def serve(self, connection: Connection | None) -> None:
        self.connection = connection
        self.served = True
        self.event.set()


def _request_head(request: Any, module: ModuleType) -> bytes:
    """``request``'s head (its request line and headers).

    Raises:
        LocalProtocolError: (``module``'s) a header name that is no token, or a value with a
            line break or a NUL, refused as h11 refuses them: written as they came, a value
            could add headers (or a whole request) of its own.
    """
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    for name, value in request.headers.raw:
        if illegal_header(name, value):
            raise module.LocalProtocolError(f"illegal header name or value: {name[:40]!r}")
        lines.append(name + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _send_request(
    connection: Connection, request: Any, head: bytes, timeouts: dict[str, Any], module: Any
) -> None:
    """Write ``request``'s ``head`` and body on ``connection``."""
    write = timeouts.get("write")
    try:
        body = request.content
    except module.RequestNotRead:  # a streamed body: written as it comes
        await _write(connection, head, write, module)
        chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
        async for part in request.stream:
            if part:
                framed = b"%x\r\n%s\r\n" % (len(part), part) if chunked else part
                await _write(connection, framed, write, module)
        if chunked:
            await _write(connection, b"0\r\n\r\n", write, module)
        return
    await _write(connection, head + body, write, module)


async def _write(connection: Connection, data: bytes, timeout: float | None, module: Any) -> None:
    try:
        if timeout is None:  # (a cancel scope at the call's deadline bounds it)
            await connection.stream.send(data)
        else:
            with anyio.fail_after(timeout):
                await connection.stream.send(data)
    except TimeoutError as exc:
        raise module.WriteTimeout(str(exc) or "write timed out") from exc
    except STREAM_ERRORS as exc:
        raise module.WriteError(str(exc) or type(exc).__name__) from exc


class _Head:
    """A response's status and headers, and how its body is framed."""

    __slots__ = ("chunked", "length", "raw_headers", "reason", "status", "version", "will_close")

    def __init__(
        self, status: int, reason: bytes, version: str, fields: list[tuple[str, str]], method: str
    ) -> None:
        self.status = status
        self.reason = reason
        self.version = b"HTTP/1.0" if version == "HTTP/1.0" else b"HTTP/1.1"  # as h11 says
        self.raw_headers = [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in fields
        ]
        values: dict[str, list[str]] = {}
        for name, value in fields:
            values.setdefault(name.lower(), []).append(value)
        self.chunked = chunked(values.get("transfer-encoding", []))  # ValueError: not chunked
        lengths = values.get("content-length", [])
        self.length = None if self.chunked else body_length(lengths)  # ValueError: two
        connection = values.get("connection", [""])[0].lower()
        if version == "HTTP/1.0":
            self.will_close = "keep-alive" not in connection
        else:
            self.will_close = "close" in connection
        if status == 101:  # the connection speaks another protocol from here on
            self.will_close = True
        if status in (204, 304) or status < 200 or method == "HEAD":
            self.length = 0  # never a body, whatever the head says (as h11 reads it)
            self.chunked = False
        if not self.chunked and self.length is None:
            self.will_close = True  # no length: the body ends when the connection does


async def _read_response_head(
    connection: Connection, timeout: float | None, method: str, module: ModuleType
) -> _Head:
    """Read the response's head; interim answers (100, 103) are skipped, as h11 skips them."""
    while True:
        lines = await _read_head_lines(connection, timeout, module)
        version, _, rest = lines[0].decode("iso-8859-1").partition(" ")
        code, _, reason = rest.partition(" ")
        if not (version.startswith("HTTP/1.") and len(code) == 3 and code.isdigit()):
            raise module.RemoteProtocolError(f"malformed status line {lines[0]!r}")
        status = int(code)
        if status < 100:
            raise module.RemoteProtocolError(f"malformed status line {lines[0]!r}")
        try:
            fields = head_fields(lines[1:])
        except ValueError as exc:
            raise module.RemoteProtocolError(str(exc)) from exc
        if 100 <= status < 200 and status != 101:
            continue
        try:
            return _Head(status, reason.strip().encode("ascii", "replace"), version, fields, method)
        except ValueError as exc:  # lengths that disagree, a coding other than chunked
            raise module.RemoteProtocolError(str(exc)) from exc


async def _read_head_lines(
    connection: Connection, timeout: float | None, module: ModuleType
) -> list[bytes]:
    """The lines of a head, up to the blank line that ends it."""
    buffer = connection.buffer
    start = 0
    while True:
        found = _HEAD_END.search(buffer, start)
        if found is not None:
            head = bytes(buffer[: found.start()])
            del buffer[: found.end()]
            lines = [line.rstrip(b"\r") for line in head.split(b"\n")]
            if len(lines) > MAX_HEADERS + 1 or any(len(line) > MAX_LINE for line in lines):
                raise module.RemoteProtocolError("the response's head is too large")
            return lines
        if len(buffer) > _MAX_HEAD:
            raise module.RemoteProtocolError("the response's head is too large")
        start = max(0, len(buffer) - 3)
        if not await connection.fill(timeout, module):
            if buffer:
                raise module.RemoteProtocolError("peer closed connection within the head")
            raise module.RemoteProtocolError("Server disconnected without sending a response.")


@functools.cache
def _body_class(module: ModuleType) -> type[Any]:
    """The body class of ``module``'s responses (its ``AsyncByteStream``: a response reads
    only a stream of that class asynchronously)."""
    return type("_Body", (_BodyReader, module.AsyncByteStream), {"__slots__": ()})


class _BodyReader:
    """A response's body, read from its connection as the caller iterates; the connection
    goes back to the pool once the body was read whole and the server keeps it open."""

    __slots__ = (
        "_chunk_left",
        "_connection",
        "_head",
        "_left",
        "_origin",
        "_timeout",
        "_transport",
        "_whole",
    )

    def __init__(
        self,
        transport: AnyioTransport,
        origin: _Origin,
        connection: Connection,
        head: _Head,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: Connection | None = connection
        self._head = head
        self._timeout = timeout
        self._left = head.length  # bytes of a sized body still to come (None: until closed)
        self._chunk_left = -1  # of a chunked body: bytes of this chunk to come (-1: a size)
        self._whole = head.length == 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        while not self._whole:
            data = await self._next(connection)
            if data:
                yield data

    async def _next(self, connection: Connection) -> bytes:
        """The body's next bytes (``b""``: none yet, or its end: ``_whole``)."""
        module = self._transport._module
        if self._head.chunked:
            return await _next_chunk(self, connection, module)
        if not connection.buffer and not await connection.fill(self._timeout, module):
            if self._left is None:  # the body ends with the connection
                self._whole = True
                return b""
            raise module.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        if self._left is None:
            return connection.take(len(connection.buffer))
        data = connection.take(self._left)
        self._left -= len(data)
        self._whole = self._left == 0
        return data

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        transport = self._transport
        try:
            if not self._whole and self._head.chunked and not self._head.will_close:
                await _drain(self, connection)
        except Exception:  # the rest was malformed or cut: not reused
            self._whole = False
        except BaseException:  # cancelled
            await transport._discard(connection)
            raise
        if self._whole and not self._head.will_close and not connection.buffer:
            await transport._put_back(self._origin, connection)
        else:  # not read whole (or the server closes it, or sent more): never reused
            await transport._discard(connection)


async def _next_chunk(body: _BodyReader, connection: Connection, module: ModuleType) -> bytes:
    """The next bytes of a chunked body (its chunk-size lines and trailers read past)."""
    buffer = connection.buffer
    if body._chunk_left > 0:
        if not buffer and not await connection.fill(body._timeout, module):
            raise module.RemoteProtocolError("peer closed connection within a chunk")
        data = connection.take(body._chunk_left)
        body._chunk_left -= len(data)
        return data
    # a chunk's end (after its data), then the next size line
    line = await _line(connection, body._timeout, module)
    if body._chunk_left == 0:
        if line:
            raise module.RemoteProtocolError("a chunk's data is longer than its size")
        line = await _line(connection, body._timeout, module)
    size = chunk_size(line)
    if size is None:
        raise module.RemoteProtocolError(f"bad chunk size line {line[:40]!r}")
    if size == 0:
        for _ in range(MAX_HEADERS + 1):  # trailers, up to a blank line (as many as headers)
            if not await _line(connection, body._timeout, module):
                body._whole = True
                return b""
        raise module.RemoteProtocolError(f"got more than {MAX_HEADERS} trailers")
    body._chunk_left = size
    return b""


async def _line(connection: Connection, timeout: float | None, module: ModuleType) -> bytes:
    buffer = connection.buffer
    start = 0
    while True:
        end = buffer.find(b"\n", start)
        if end >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            return line
        if len(buffer) > MAX_LINE:
            raise module.RemoteProtocolError("a chunk's size line is too long")
        start = len(buffer)
        if not await connection.fill(timeout, module):
            raise module.RemoteProtocolError("peer closed connection within a chunked body")


async def _drain(body: _BodyReader, connection: Connection) -> None:
    """Read the rest of a chunked body if it comes without waiting: a stream the caller
    stops reading at its last event (``data: [DONE]``) has only its terminator left, mostly
    read already, and its connection can then serve the next call. Hardly anything is
    waited for: a body with more to come is not drained (its connection is closed)."""
    reads = 0
    with anyio.move_on_after(_DRAIN_WAIT):
        while not body._whole and reads < _DRAIN_READS:
            if not connection.buffer:
                reads += 1
            await body._next(connection)
