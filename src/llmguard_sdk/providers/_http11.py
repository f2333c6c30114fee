"""The provider's own sync HTTP/1.1 transport: httpx's interface over :mod:`http.client`.

A provider's sync requests go to a transport directly (see :mod:`._requests`). httpx's own
``HTTPTransport`` runs each request through httpcore's connection pool and h11's state
machine: about 10,000 Python bytecodes a call, more than every stage of a Guard together.
:class:`StdlibTransport` sends the same ``httpx.Request`` with the standard library's
:class:`http.client.HTTPConnection` (TLS, chunked bodies and keep-alive as it implements
them) and answers an ``httpx.Response`` whose body is read from the connection as the
caller reads it, so the provider's reading, decoding (``Content-Encoding`` stays httpx's
work), streaming, deadline watchdog and error mapping are unchanged. About a third of the
client CPU of httpx's transport per call on a loopback server.

What it keeps from httpx's transport: the same TLS context (``httpx.create_ssl_context()``,
certifi and ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), at most ``max_connections`` connections
per transport (a request that finds none free within its pool timeout fails with
``PoolTimeout``), idle connections kept alive (``max_keepalive_connections``) and dropped when
the server has closed them, and httpx's exception classes, so a failure before any byte was
sent (``ConnectError``, ``ConnectTimeout``, ``PoolTimeout``) stays safe to send again. HTTP/1.1
only (httpx's transport speaks HTTP/2 only when asked).

Proxies: given an ``http://`` proxy (an ``httpx.Proxy``, its credentials sent as
``Proxy-Authorization``), an ``https`` request goes through a ``CONNECT`` tunnel (TLS to the
server itself, its name checked) and an ``http`` one to the proxy in absolute form, as
httpx's transport sends them; a refused tunnel is ``ProxyError`` (nothing sent).
:func:`environment_proxy` reads the environment's ``HTTP_PROXY`` / ``HTTPS_PROXY`` /
``ALL_PROXY`` / ``NO_PROXY`` with httpx's own rules. ``https://`` and SOCKS proxies stay
httpx's (the provider's client makes its own transports for them).
"""

from __future__ import annotations

import base64
import collections
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from .._forks import per_process
from ._abort import ABANDONED, aborted, when_aborted
from ._http1 import put_idle, readable, sweep_expired, take_longest_idle
from ._http11_wire import StdlibResponse, exchange
from ._watchdog import watchdog

__all__ = [
    "DEADLINE",
    "StdlibTransport",
    "environment_proxy",
]

DEADLINE = "llmguard.deadline"
"""A request extension: the call's deadline (``time.monotonic()``); the socket is shut down
if the request is still being sent or its head read then (each read's timeout alone lets a
server that drips the head a byte at a time hold the call far past it)."""

_CHUNK = 65_536
_DRAIN_READS = 4  # reads of a stream's rest, at most, to reuse its connection
_DRAIN_WAIT = 0.001  # seconds each of those reads waits, at most
_Origin = tuple[str, str, int]


class StdlibTransport(httpx.BaseTransport):
    """An httpx transport over :class:`http.client.HTTPConnection` (see the module docs)."""

    def __init__(
        self, limits: httpx.Limits | None = None, *, proxy: httpx.Proxy | None = None
    ) -> None:
        """``proxy``: an ``http://`` proxy every request goes through (see the module docs)."""
        if proxy is not None and proxy.url.scheme != "http":
            raise ValueError(f"StdlibTransport speaks to http:// proxies only, not {proxy.url}")
        self._proxy = proxy
        self._proxy_headers = _proxy_headers(proxy) if proxy is not None else {}
        limits = limits or httpx.Limits()
        self._max = limits.max_connections
        self._keep_alive = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry  # seconds an idle connection is kept
        self._ssl: ssl.SSLContext | None = None
        self._closed = False
        per_process(self, StdlibTransport.fresh_pool)  # (a child never shares a connection)

    def fresh_pool(self) -> None:
        # idle connections of each origin, each with the time it went idle (latest last)
        self._idle: dict[_Origin, list[tuple[http.client.HTTPConnection, float]]] = {}
        self._sweep: collections.deque[_Origin] = collections.deque()  # _idle's, in turn
        self._open = 0  # connections in use or idle
        self._freed = threading.Condition()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and answer its response, the body still to be read."""
        timeouts = request.extensions.get("timeout", {})
        origin = (request.url.scheme, request.url.host, request.url.port or _port(request.url))
        deadline = request.extensions.get(DEADLINE)
        connection = self._connection(origin, timeouts, deadline)
        forwarded = self._proxy is not None and origin[0] == "http"  # absolute form, no tunnel
        watched = None
        if deadline is not None and connection.sock is not None:  # a slow-drip head included
            watched = watchdog.watch(connection.sock, deadline)
        try:
            response = exchange(
                connection, request, timeouts, self._proxy_headers if forwarded else None
            )
            return httpx.Response(
                response.status,
                # as received (bytes): httpx decodes them; str values must be ASCII there
                headers=[
                    (name.encode("latin-1"), value.encode("latin-1"))
                    for name, value in response.getheaders()
                ],
                stream=_Body(self, origin, connection, response),
                extensions={
                    "http_version": b"HTTP/1.0" if response.version == 10 else b"HTTP/1.1",
                    "reason_phrase": response.reason.encode("ascii", "replace"),
                    "network_stream": _NetworkStream(connection.sock),
                },
            )
        except BaseException:
            self._discard(connection)
            raise
        finally:
            if watched is not None:
                watchdog.cancel(watched)

    def close(self) -> None:
        """Close every idle connection; connections in use close when their body is read."""
        with self._freed:
            self._closed = True
            idle = [connection for pooled in self._idle.values() for connection, _ in pooled]
            self._idle.clear()
            self._sweep.clear()
            self._open -= len(idle)
            self._freed.notify_all()
        for connection in idle:
            connection.close()

    # -- the pool ---------------------------------------------------------------------------

    def _connection(
        self, origin: _Origin, timeouts: dict[str, Any], deadline: float | None = None
    ) -> http.client.HTTPConnection:
        """An idle connection to ``origin`` that the server has not closed, else a new one
        once fewer than ``max_connections`` are open (waiting up to the pool timeout)."""
        wait_until = _until(timeouts.get("pool"))
        unwake: Callable[[], None] | None = None  # removes the abort's wake-up of the wait
        try:
            with self._freed:
                while True:
                    if self._closed:
                        raise RuntimeError(
                            "Cannot send a request, as the transport has been closed."
                        )
                    for expired in sweep_expired(self._idle, self._sweep, self._fresh):
                        self._open -= 1  # (one origin's: each call looks at the next)
                        self._freed.notify()
                        expired.close()
                    pooled = self._idle.get(origin)
                    while pooled:
                        connection, since = pooled.pop()
                        if self._fresh(since) and _reusable(connection):
                            return connection
                        self._open -= 1
                        connection.close()
                    if self._max is not None and self._open >= self._max:
                        self._close_an_idle_one()  # of another origin: room for this one
                    if self._max is None or self._open < self._max:
                        self._open += 1
                        break
                    left = _left(wait_until)
                    if left == 0:
                        raise httpx.PoolTimeout("no connection free within the pool timeout")
                    if unwake is None:  # a hedge race's loser: not left waiting till its deadline
                        unwake = when_aborted(_wake_all, self._freed)
                    if aborted():
                        raise httpx.ConnectError(ABANDONED)
                    self._freed.wait(left)
        finally:
            if unwake is not None:  # (the wait ended: a later abort has nothing to wake)
                unwake()
        try:
            return self._connect(origin, timeouts, deadline)
        except BaseException:
            self._release_slot()
            raise

    def _connect(
        self, origin: _Origin, timeouts: dict[str, Any], deadline: float | None = None
    ) -> http.client.HTTPConnection:
        scheme, host, port = origin
        connect = timeouts.get("connect")
        to_host, to_port = host, port
        if self._proxy is not None:  # the connection is to the proxy
            to_host, to_port = self._proxy.url.host, self._proxy.url.port or 80
        connection: http.client.HTTPConnection
        if scheme == "https":
            connection = http.client.HTTPSConnection(
                to_host, to_port, timeout=connect, context=self._tls()
            )
            if self._proxy is not None:  # CONNECT first; TLS to the server, its name checked
                connection.set_tunnel(host, port, headers=self._proxy_headers)
        elif scheme == "http":
            connection = http.client.HTTPConnection(to_host, to_port, timeout=connect)
        else:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        watched: list[int] = []
        if deadline is not None:  # a proxy's CONNECT answer that drips (TLS: one timeout)
            connection._create_connection = _watched_socket(deadline, watched)  # type: ignore
        try:
            connection.connect()
        except TimeoutError as exc:
            connection.close()
            raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake, a refused tunnel
            connection.close()
            # http.client's words for a CONNECT answered with anything but 200
            refused = str(exc).startswith("Tunnel connection failed")
            error = httpx.ProxyError if refused else httpx.ConnectError
            raise error(str(exc) or type(exc).__name__) from exc
        except http.client.HTTPException as exc:  # a proxy's malformed answer to CONNECT
            connection.close()
            raise httpx.ProxyError(str(exc) or type(exc).__name__) from exc
        finally:
            for token in watched:
                watchdog.cancel(token)
        if connection.sock is not None:
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.response_class = StdlibResponse
        return connection

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()  # httpx's own: same trust as its transport
        return self._ssl

    def _fresh(self, since: float) -> bool:
        """Whether a connection idle since ``since`` may still be used (httpx's
        ``keepalive_expiry``: a server closes idle connections after a while, and one used just
        as it does so fails)."""
        return self._expiry is None or time.monotonic() - since < self._expiry

    def _close_an_idle_one(self) -> None:
        """Close the longest idle connection of any origin (the caller holds the lock)."""
        connection = take_longest_idle(self._idle)
        if connection is not None:
            self._open -= 1
            connection.close()

    def _put_back(self, origin: _Origin, connection: http.client.HTTPConnection) -> None:
        """Put a connection whose response was read whole back in the pool."""
        with self._freed:
            idle = sum(len(connections) for connections in self._idle.values())
            if not self._closed and (self._keep_alive is None or idle < self._keep_alive):
                put_idle(self._idle, self._sweep, origin).append((connection, time.monotonic()))
                self._freed.notify()
                return
            self._open -= 1
            self._freed.notify()
        connection.close()

    def _discard(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._release_slot()

    def _release_slot(self) -> None:
        with self._freed:
            self._open -= 1
            self._freed.notify()


class _Body(httpx.SyncByteStream):
    """A response's body, read from its connection as the caller iterates; the connection
    goes back to the pool once the body was read whole and the server keeps it open."""

    def __init__(
        self,
        transport: StdlibTransport,
        origin: _Origin,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: http.client.HTTPConnection | None = connection
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        response = self._response
        try:
            while True:
                chunk = response.read1(_CHUNK)
                if not chunk:
                    if response.length:  # a sized body cut short (closed, or shut down)
                        raise httpx.RemoteProtocolError(
                            "peer closed connection without sending complete message body"
                        )
                    return
                yield chunk
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out") from exc
        except http.client.HTTPException as exc:  # cut short, a bad chunk size
            raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
        except (OSError, ValueError) as exc:  # reset, or shut by the deadline watchdog
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        response = self._response
        # read whole: a chunked body closes itself at its last chunk; a sized one reaches
        # length 0 (and stays open until closed: its file, not the connection's socket)
        whole = response.isclosed() or (not response.chunked and response.length == 0)
        if not whole and response.chunked and not response.will_close:
            whole = _drained(response, connection.sock)
        response.close()
        if whole and not response.will_close:
            self._transport._put_back(self._origin, connection)
        else:  # not read whole (or the server closes it): never reused
            self._transport._discard(connection)


def _drained(response: http.client.HTTPResponse, sock: socket.socket | None) -> bool:
    """Whether the rest of a chunked body could be read without waiting: a stream the caller
    stops reading at its last event (``data: [DONE]``) has only its terminator left, mostly
    in the buffer already, and its connection can then serve the next call (else a stream
    costs a new connection, a TLS handshake on https). Hardly anything is waited for (a
    millisecond a read): a body with more to come is not drained (its connection is
    closed)."""
    if sock is None:
        return False
    try:
        # a timeout, not non-blocking mode: there a read with nothing to read gives a line cut
        # short ("0\r" of "0\r\n\r\n"), which http.client takes whole: the connection went back
        # with the rest unread. A timeout fails the read instead (the next request sets its own)
        sock.settimeout(_DRAIN_WAIT)
        for _ in range(_DRAIN_READS):
            if not response.read1(_CHUNK):
                break
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return response.isclosed()


class _NetworkStream:
    """What httpx's ``network_stream`` extension offers that the provider reads: the socket
    (for the deadline watchdog)."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket | None) -> None:
        self._sock = sock

    def get_extra_info(self, info: str) -> Any:
        return self._sock if info == "socket" else None


def _reusable(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection is still open: a socket readable while idle has been
    closed by the server (or sent something unasked); either way it is not reused."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        return not readable(sock.fileno())
    except (OSError, ValueError):
        return False


def _watched_socket(deadline: float, watched: list[int]) -> Any:
    """``socket.create_connection``, the socket then watched until ``deadline`` (the watch's
    token added to ``watched``): a proxy's answer to ``CONNECT`` is read a line at a time,
    each read with its own timeout. (A TLS handshake's timeout bounds it whole.)"""

    def create(address: Any, timeout: Any = None, source_address: Any = None) -> socket.socket:
        sock = socket.create_connection(address, timeout, source_address)
        watched.append(watchdog.watch(sock, deadline))
        return sock

    return create


def _wake_all(freed: threading.Condition) -> None:
    with freed:
        freed.notify_all()


def _port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _until(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds


def _left(until: float | None) -> float | None:
    return None if until is None else max(0.0, until - time.monotonic())


def _proxy_headers(proxy: httpx.Proxy) -> dict[str, str]:
    """The headers a proxy gets (with a tunnel, on the ``CONNECT``): the proxy's own, and its
    credentials as ``Proxy-Authorization: Basic`` (as httpx sends them)."""
    headers = dict(proxy.headers.items())
    if proxy.raw_auth is not None:
        user, password = proxy.raw_auth
        token = base64.b64encode(user + b":" + password).decode("ascii")
        headers["Proxy-Authorization"] = f"Basic {token}"
    return headers


def environment_proxy(url: httpx.URL) -> httpx.Proxy | None:
    """The proxy that the environment names for ``url`` (``None``: none), read with
    httpx's own functions, so ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` and
    ``NO_PROXY`` (hosts, domains, addresses, ``*``) decide as they do for an
    ``httpx.Client``.

    Raises:
        LookupError: httpx no longer has those functions (the caller leaves proxies to
            httpx's client).
    """
    try:
        from httpx._utils import URLPattern, get_environment_proxies
    except ImportError as exc:  # a later httpx: its client decides
        raise LookupError("httpx's environment proxy functions moved") from exc
    mounts = sorted((URLPattern(key), proxy) for key, proxy in get_environment_proxies().items())
    for pattern, proxy in mounts:  # most specific first, as the client matches them
        if pattern.matches(url):
            return None if proxy is None else httpx.Proxy(proxy)
    return None
