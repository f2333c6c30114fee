"""What :class:`~._http11.StdlibTransport` says and reads on one connection: the request
written (:func:`exchange`) and the response's head read (:class:`StdlibResponse`), as httpx's
h11 reads it, over :mod:`http.client`."""

from __future__ import annotations

import http.client
from typing import Any

import httpx

from . import _http1
from ._http1 import MAX_HEADERS, MAX_LINE, chunk_size

__all__ = ["StdlibResponse", "exchange", "set_timeout"]


def exchange(
    connection: http.client.HTTPConnection,
    request: httpx.Request,
    timeouts: dict[str, Any],
    proxy_headers: dict[str, str] | None = None,
) -> http.client.HTTPResponse:
    """Write ``request`` on ``connection`` and read the response's head (``proxy_headers``:
    the connection is to a proxy that forwards the request, written in absolute form)."""
    set_timeout(connection, timeouts.get("write"))
    url = request.url
    target = url.raw_path.decode("ascii")
    if proxy_headers is not None:
        target = f"{url.scheme}://{url.netloc.decode('ascii')}" + target
    for name, value in request.headers.raw:  # http.client lets a NUL through, h11 does not
        if _http1.illegal_header(name, value):
            raise httpx.LocalProtocolError(f"illegal header name or value: {name[:40]!r}")
    write_error = None  # a write's failure: the answer is read all the same, as httpcore does
    try:
        connection.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in request.headers.raw:
            connection.putheader(name.decode("latin-1"), value)
        for proxy_header, text in (proxy_headers or {}).items():
            connection.putheader(proxy_header, text)
        connection.endheaders(request.read() or None)
    except TimeoutError as exc:
        raise httpx.WriteTimeout(str(exc) or "write timed out") from exc
    except OSError as exc:  # a server that answered (a 413) and closed before reading it all
        write_error = httpx.WriteError(str(exc) or type(exc).__name__)
    set_timeout(connection, timeouts.get("read"))
    try:
        response = connection.getresponse()
        if write_error or _http1.asks_to_close(request):  # its last (Connection: close, as h11)
            response.will_close = True
        return response
    except TimeoutError as exc:
        raise write_error or httpx.ReadTimeout(str(exc) or "read timed out") from exc
    except http.client.HTTPException as exc:  # closed before an answer, a bad status line
        raise write_error or httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
    except OSError as exc:
        raise write_error or httpx.ReadError(str(exc) or type(exc).__name__) from exc


class _Head:
    """A response's header lines: what :class:`http.client.HTTPResponse` and this module read
    of them (``get``, ``get_all``, ``items``), without the email parser ``http.client`` runs
    (about a quarter of a call's client CPU)."""

    __slots__ = ("_by_name", "_fields")

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self._fields = fields
        self._by_name: dict[str, list[str]] = {}
        for name, value in fields:
            self._by_name.setdefault(name.lower(), []).append(value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name`` (any case), else ``default``."""
        values = self._by_name.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str, default: list[str] | None = None) -> list[str] | None:
        """Every value of ``name`` (any case) in order, else ``default``."""
        values = self._by_name.get(name.lower())
        return list(values) if values else default

    def items(self) -> list[tuple[str, str]]:
        """Every header as ``(name, value)``, in the order received."""
        return list(self._fields)


def _read_head(fp: Any) -> _Head:
    """Read header lines up to the blank line that ends them (at most ``http.client``'s 100
    lines of 65,536 bytes), read as :func:`head_fields` reads them; the connection's end
    before the blank line is an error."""
    lines: list[bytes] = []
    while True:
        line = fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("header line")
        if len(lines) >= MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")
        if line in (b"\r\n", b"\n"):
            break
        if not line:  # closed within the head (http.client reads it as the head's end)
            raise http.client.RemoteDisconnected("peer closed connection within the head")
        lines.append(line)
    try:
        return _Head(_http1.head_fields(lines))
    except ValueError as exc:
        raise http.client.HTTPException(str(exc)) from None


class StdlibResponse(http.client.HTTPResponse):
    """:class:`http.client.HTTPResponse` with its head read by :func:`_read_head`; what it
    decides from the head (chunked, a length, whether the connection closes) as it does.
    Every interim answer is skipped, as httpx's h11 does (``http.client`` skips only 100:
    a 103 Early Hints would be taken for the answer)."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        version, status, reason = self._read_status()
        while 100 <= status < 200 and status != 101:  # interim answers (100, 103): skipped
            _read_head(self.fp)
            version, status, reason = self._read_status()
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        head = _read_head(self.fp)
        self.headers = self.msg = head
        try:
            self.chunked = _http1.chunked(head.get_all("transfer-encoding") or [])
            length = _http1.body_length(head.get_all("content-length") or [])
        except ValueError as exc:
            raise http.client.HTTPException(str(exc)) from None
        if self.chunked:
            self.chunk_left = None
        # a 101's connection speaks another protocol from here on: never reused
        self.will_close = status == 101 or self._check_close()
        self.length = None if self.chunked else length
        if status in (204, 304) or 100 <= status < 200 or self._method == "HEAD":
            self.length = 0  # never a body, whatever the head says (as h11 reads it)
            self.chunked = False
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True  # no length: the body ends when the connection does

    def _get_chunk_left(self) -> int | None:
        """After a chunk's data, its line end and nothing else (``http.client`` tossed the
        next two bytes, whatever they were: data past a chunk's size was dropped unseen, as
        the async transport refuses it), then ``http.client``'s own reading."""
        if self.chunk_left == 0:
            line = self.fp.readline(MAX_LINE + 1)
            if not line:
                raise http.client.IncompleteRead(b"")
            if line not in (b"\r\n", b"\n"):
                raise http.client.HTTPException("a chunk's data is longer than its size")
            self.chunk_left = None
        return super()._get_chunk_left()  # type: ignore[misc, no-any-return]

    def _read_next_chunk_size(self) -> int:
        """A chunk's size, as :func:`~._http1.chunk_size` reads its line (``int(line, 16)``
        took a sign, ``0x``, underscores and any number of digits). A bad one raises
        ``ValueError`` (``http.client`` makes it ``IncompleteRead``) with the response left
        open: closed, it read as whole, and its connection went back to the pool."""
        line = self.fp.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise http.client.LineTooLong("chunk size")
        size = chunk_size(line)
        if size is None:
            raise ValueError(f"bad chunk size line {line[:40]!r}")
        return size

    def _read_and_discard_trailer(self) -> None:
        """The trailers after the last chunk, read past up to the blank line: at most as
        many as a head's header lines (``http.client`` read them without end)."""
        for _ in range(MAX_HEADERS + 1):
            line = self.fp.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                raise http.client.LineTooLong("trailer line")
            if line in (b"\r\n", b"\n", b""):
                return
        raise http.client.HTTPException(f"got more than {MAX_HEADERS} trailers")


def set_timeout(connection: http.client.HTTPConnection, seconds: float | None) -> None:
    if connection.sock is not None:
        connection.sock.settimeout(seconds)
