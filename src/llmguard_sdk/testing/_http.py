"""The HTTP plumbing every handler of the fake provider shares: bodies, answers, pauses,
aborted connections and server-sent event streams."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, cast

from ._faults import Fault
from ._wire import _IDLE_TIMEOUT_S, _MAX_BODY, _dumps, _error_body

if TYPE_CHECKING:
    from ._server import _Server


class _BaseHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmguard-fake/1.0"
    sys_version = ""
    timeout = _IDLE_TIMEOUT_S
    _chunked = True

    @property
    def _srv(self) -> _Server:
        return cast("_Server", self.server)

    def version_string(self) -> str:
        """The ``Server`` header value."""
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        """No per-request logging (keeps the server fast and the test output clean)."""

    def handle(self) -> None:
        stopping = self._srv.stopping
        self.close_connection = True
        try:
            self.handle_one_request()
            while not self.close_connection and not stopping.is_set():
                self.handle_one_request()
        except (OSError, ValueError):
            self.close_connection = True

    def _read_body(self) -> bytes | None:
        """Read the request body; ``None`` means the connection is unusable (already answered)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            return b""
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY:
            self.close_connection = True
            status = 413 if length > _MAX_BODY else 400
            err = _error_body("bad Content-Length", "invalid_request_error", None)
            self._send(status, _dumps(err), "application/json", [("Connection", "close")])
            return None
        data = self.rfile.read(length)
        if len(data) < length:
            self.close_connection = True
            return None
        return data

    def _read_chunked(self) -> bytes | None:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                return None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > _MAX_BODY:
                self.close_connection = True
                return None
            chunk = self.rfile.read(size)
            self.rfile.readline(1024)
            if len(chunk) < size:
                self.close_connection = True
                return None
            parts.append(chunk)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: Sequence[tuple[str, str]],
        *,
        length: int | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _pause(self, seconds: float) -> bool:
        """Sleep (interruptible by stop()); return False when the server is stopping."""
        if seconds > 0 and self._srv.stopping.wait(seconds):
            self.close_connection = True
            return False
        return not self._srv.stopping.is_set()

    def _abort(self) -> None:
        """Close the connection with a TCP RST (SO_LINGER 0) and without answering."""
        self.close_connection = True
        sock = self.connection
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            self.rfile.close()  # drop makefile()'s reference so close() really closes the fd
        finally:
            sock.close()

    def _silent_fault(self, fault: Fault) -> bool:
        """Sleep the fault's latency, then hang or reset; True when nothing more is sent."""
        if not self._pause(fault.latency):
            return True
        if fault.hang:
            self._srv.stopping.wait(self._srv.provider._hang_limit)
            self.close_connection = True
            return True
        if fault.reset:
            self._abort()
            return True
        return False

    # ---- streaming

    def _start_stream(self, headers: Sequence[tuple[str, str]]) -> None:
        self._chunked = self.request_version != "HTTP/1.0"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        if self._chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def _event(self, data: bytes, *, last: bool = False) -> None:
        """Write one piece of the stream (and, with ``last``, the end of the body with it)."""
        if self._chunked:
            end = b"0\r\n\r\n" if last else b""
            self.wfile.write(b"%x\r\n%s\r\n%s" % (len(data), data, end))
        else:
            self.wfile.write(data)
