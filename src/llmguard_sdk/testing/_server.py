"""The fake provider's threaded HTTP server and the handler that routes its requests."""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import socketserver
import threading
import time
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from ._batch import _BatchHandler
from ._chat import _ChatHandler
from ._messages import _MessagesHandler
from ._responses import RESPONSES_PATHS, _ResponsesHandler
from ._wire import (
    _CHAT_PATHS,
    _MESSAGES_PATHS,
    _MODELS_PATHS,
    _POLL_S,
    _anthropic_error,
    _dumps,
    _error_body,
)

if TYPE_CHECKING:
    from ._provider import FakeProvider


class _Handler(_ChatHandler, _MessagesHandler, _ResponsesHandler, _BatchHandler):
    """Routes a request to the chat, messages, responses, batch, models or health answer."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    # ---- routing

    def _dispatch(self) -> None:
        raw = self._read_body()
        if raw is None:
            return
        provider = self._srv.provider
        path = self.path.split("?", 1)[0]
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                body = None
        n = provider._record_request(self.command, self.path, self._header_dict(), body)
        if b"\\ud" in raw.lower() and not _is_text(body):  # a lone surrogate (\ud800)
            said = "the request body is not valid JSON: a string holds a lone surrogate"
            refusal = _dumps(_error_body(said, "invalid_request_error", "invalid_json"))
            claude = path in _MESSAGES_PATHS
            if claude:
                refusal = _anthropic_error(400, said, n=n)
            self._send(400, refusal, "application/json", provider._common_headers(n, claude))
            return
        if self.command == "POST" and path in _CHAT_PATHS:
            self._chat(raw, n)
            return
        if self.command == "POST" and path in _MESSAGES_PATHS:
            self._messages(raw, n)
            return
        if self.command == "POST" and path in RESPONSES_PATHS:
            self._responses(raw, n)
            return
        if self._batch_api(path, raw, n):
            return
        if path in _MESSAGES_PATHS or path.startswith(_MESSAGES_PREFIXES):  # (Anthropic's 404)
            said = f"no route for {self.command} {path}"
            error = _anthropic_error(404, said, n=n)
            self._send(404, error, "application/json", provider._common_headers(n, True))
            return
        common = provider._common_headers(n)
        if self.command == "GET" and path in _MODELS_PATHS:
            payload = {
                "object": "list",
                "data": [
                    {"id": provider._model, "object": "model", "created": 0, "owned_by": "fake"}
                ],
            }
            self._send(200, _dumps(payload), "application/json", common)
        elif self.command == "GET" and path == "/health":
            self._send(200, b"ok", "text/plain; charset=utf-8", common)
        else:
            err = _error_body(
                f"no route for {self.command} {path}", "invalid_request_error", "not_found"
            )
            self._send(404, _dumps(err), "application/json", common)

    def _header_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            out[key] = f"{out[key]}, {value}" if key in out else value
        return out


_MESSAGES_PREFIXES = tuple(path + "/" for path in _MESSAGES_PATHS)


def _is_text(body: Any) -> bool:
    """Whether every string of a parsed JSON body is text that UTF-8 can carry (JSON's
    ``\\ud800`` escapes parse to lone surrogates, which real providers refuse with a 400)."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024  # 128 reset ~10 % of 500 connections opened at once
    timeout = _POLL_S

    def __init__(self, address: tuple[str, int], provider: FakeProvider) -> None:
        self.provider = provider
        self.stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_cond = threading.Condition()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), which can block on DNS.
        socketserver.TCPServer.server_bind(self)
        sockname = self.socket.getsockname()
        self.server_name = str(sockname[0])
        self.server_port = int(sockname[1])

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_cond:
            self._conns.add(request)
        self.provider._note_connection()
        super().process_request(request, client_address)

    def close_request(self, request: Any) -> None:
        try:
            super().close_request(request)
        finally:
            with self._conns_cond:
                self._conns.discard(request)
                self._conns_cond.notify_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet: clients disconnecting mid-answer is business as usual here."""

    def run(self) -> None:
        """Accept connections until ``stopping`` is set (checked every ``_POLL_S``)."""
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.socket, selectors.EVENT_READ)
                while not self.stopping.is_set():
                    if selector.select(_POLL_S) and not self.stopping.is_set():
                        self._handle_request_noblock()  # type: ignore[attr-defined]
        except (OSError, ValueError):
            pass  # listening socket closed under us

    def drop_connections(self, timeout: float) -> None:
        """Shut down every open connection, then wait (bounded) for the handlers to finish."""
        with self._conns_cond:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        with self._conns_cond:
            while self._conns:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._conns_cond.wait(left)
