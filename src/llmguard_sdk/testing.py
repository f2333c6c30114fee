"""A real, local, OpenAI-compatible HTTP server for tests and outage drills.

:class:`FakeProvider` runs a small threaded HTTP/1.1 server on a loopback port in a
background thread.  It answers ``POST /v1/chat/completions`` (plain and streamed) with
deterministic replies and can be told to misbehave in the ways real providers do: HTTP
errors with ``Retry-After`` headers, slow answers, slow streams, hung requests, connection
resets, streams cut mid-event, broken JSON, wrong content types and provider-side rate
limits (``rpm`` / ``tpm``).

Typical use::

    with FakeProvider() as fake:
        fake.script(Fault(status=503), None)  # first request fails, second succeeds
        client = openai.OpenAI(base_url=fake.base_url, api_key="x")
        ...

Deterministic token counting (documented so tests can assert exact numbers):

* ``input_tokens`` = sum over the request's messages of ``len(text.split()) + 4`` where
  ``text`` is the message content (a string, or the text parts of a list joined with one
  space; anything else counts as empty).
* The reply is split into *pieces*: words, every piece keeping the whitespace in front of
  it, so ``"".join(pieces) == reply``.  ``output_tokens`` = number of pieces.  A smaller
  ``max_tokens`` / ``max_completion_tokens`` truncates the pieces and gives
  ``finish_reason="length"``.

Only chat-completion requests are subject to faults, rate limits and :class:`ProviderStats`;
``GET /v1/models`` and ``GET /health`` always answer normally.

It also speaks Anthropic's Messages API: ``POST /v1/messages`` (it requires the
``anthropic-version`` header and ``max_tokens``), plain and streamed (``message_start``,
``content_block_*``, ``message_delta``, ``message_stop`` events), with Anthropic's error bodies
and the same faults and limits.  Its input tokens count the same way, the ``system`` prompt
counting as one message and each tool as one message holding its JSON.

With ``prefix_cache=True`` it emulates a provider's prefix cache, on the same deterministic
tokens (each message is its words framed by 4 tokens, so the counts above hold):

* OpenAI-style: ``prompt_tokens_details.cached_tokens`` is the longest prefix the request
  shares with any earlier request (tools, hashed, count as part of the first message).
* Anthropic-style: only prefixes that end at a ``cache_control`` breakpoint are cached.
  ``cache_read_input_tokens`` is the longest breakpoint prefix written by an earlier request,
  ``cache_creation_input_tokens`` what this request writes up to its last breakpoint, and
  ``input_tokens`` the rest.

Prefixes shorter than ``prefix_cache_min_tokens`` are never cached (real providers: 1024).

The module is also runnable for benchmarks in a separate process::

    python -m llmguard_sdk.testing serve [--port N] [--model M]

which prints the base URL on one line and serves until SIGTERM, SIGINT or end of stdin.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import selectors
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, cast

from ._json import canonical_json

__all__ = ["FakeProvider", "Fault", "ProviderStats", "ReceivedRequest"]

_POLL_S = 0.05  # how often the accept loop checks for stop()
_IDLE_TIMEOUT_S = 120.0  # an idle keep-alive connection (or a stalled client) is dropped after this
_STOP_WAIT_S = 1.0  # how long stop() waits for in-flight handlers to finish
_MAX_BODY = 32 * 1024 * 1024
_MAX_RECORDED = 1000
_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
_MESSAGES_PATHS = frozenset({"/v1/messages", "/messages"})
_PREFIX_MEMORY = 4096  # prefixes (OpenAI-style: requests) the emulated cache remembers
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}
_WORD_RE = re.compile(r"\s*\S+")
_HTML_BODY = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>502 Bad Gateway</h1><p>fake upstream proxy page</p></body></html>\n"
)


@dataclass(frozen=True)
class Fault:
    """How :class:`FakeProvider` should (mis)behave for one chat-completion request.

    ``Fault()`` with all defaults is a normal answer.  The delays (``latency``,
    ``first_token_delay``, ``inter_token_delay``) combine with a normal answer, so
    ``Fault(latency=0.2)`` is a slow success.  When several failure flags are set, the first
    of ``hang``, ``reset``, ``status``, ``wrong_content_type``, ``malformed_json``,
    ``missing_fields``, ``cut_stream_after`` wins.  ``headers``, ``retry_after`` and
    ``retry_after_ms`` are added to whatever response is sent.
    """

    status: int | None = None
    """Answer with this HTTP status (400-599) and an OpenAI-style error JSON body."""
    retry_after: float | str | None = None
    """``Retry-After`` header: a number becomes seconds text, a string is used verbatim."""
    retry_after_ms: int | None = None
    """``retry-after-ms`` header value."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers."""
    error_code: str | None = None
    """Goes into ``error.code`` of the error body (e.g. ``"context_length_exceeded"``)."""
    latency: float = 0.0
    """Seconds to sleep before answering anything."""
    first_token_delay: float = 0.0
    """Streams: seconds to sleep before the first content chunk."""
    inter_token_delay: float = 0.0
    """Streams: seconds to sleep between content chunks."""
    hang: bool = False
    """Read the request, then never answer (until the server stops or ``hang_limit``)."""
    reset: bool = False
    """Read the request, then close the TCP connection abruptly (RST), no response."""
    cut_stream_after: int | None = None
    """Streams: send this many content chunks, then a partial ``data: {`` line, then close.

    For a non-streamed request the response headers and half of the body are sent before
    the connection is closed.
    """
    malformed_json: bool = False
    """200 with a body that is not valid JSON (streams: a ``data:`` line with broken JSON)."""
    wrong_content_type: bool = False
    """200 with ``Content-Type: text/html`` and an HTML body."""
    missing_fields: bool = False
    """200 with valid JSON that has no ``"choices"``."""
    omit_usage: bool = False
    """A normal answer without ``usage`` (streams: no usage chunk), as some servers give."""

    def __post_init__(self) -> None:
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"Fault.status must be 400-599, got {self.status!r}")
        for name in ("latency", "first_token_delay", "inter_token_delay"):
            value = getattr(self, name)
            if not value >= 0.0 or math.isinf(value):  # also rejects NaN
                raise ValueError(f"Fault.{name} must be a finite number >= 0, got {value!r}")
        if self.cut_stream_after is not None and self.cut_stream_after < 0:
            raise ValueError("Fault.cut_stream_after must be >= 0")
        if self.retry_after_ms is not None and self.retry_after_ms < 0:
            raise ValueError("Fault.retry_after_ms must be >= 0")

    @property
    def is_delay_only(self) -> bool:
        """True when this fault only delays (and decorates) an otherwise normal answer."""
        return not (
            self.status is not None
            or self.hang
            or self.reset
            or self.cut_stream_after is not None
            or self.malformed_json
            or self.wrong_content_type
            or self.missing_fields
        )


@dataclass(frozen=True)
class ProviderStats:
    """A snapshot of what a :class:`FakeProvider` has seen and answered.

    All counters except ``connections`` are about chat-completion requests only.
    """

    requests: int = 0
    """Chat-completion requests received (valid or not)."""
    streams: int = 0
    """Of those, requests asking for ``"stream": true``."""
    succeeded: int = 0
    """Normal 200 answers that were sent completely."""
    faults: int = 0
    """Requests answered with a :class:`Fault` other than a plain delay."""
    by_status: dict[int, int] = field(default_factory=dict)
    """How many responses were sent with each HTTP status."""
    rate_limited: int = 0
    """429 answers caused by the ``rpm`` / ``tpm`` limits."""
    input_tokens: int = 0
    """Sum of prompt tokens over successful answers."""
    output_tokens: int = 0
    """Sum of completion tokens over successful answers."""
    connections: int = 0
    """TCP connections accepted (any endpoint); shows whether clients keep connections alive."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the emulated prefix cache (``prefix_cache=True``)."""
    cache_write_input_tokens: int = 0
    """Of ``input_tokens``, those written to the emulated Anthropic-style prefix cache."""


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request as the :class:`FakeProvider` received it."""

    method: str
    """HTTP method, e.g. ``"POST"``."""
    path: str
    """Request target as sent, including any query string."""
    headers: dict[str, str]
    """Request headers with lower-case names (repeated headers joined with ``", "``)."""
    body: Any
    """The parsed JSON body, or ``None`` when there was no body or it was not valid JSON."""
    time: float
    """``time.monotonic()`` when the request was read."""


# --------------------------------------------------------------------------- helpers


def _format_duration(seconds: float) -> str:
    """Format a duration like OpenAI's ``x-ratelimit-reset-*`` headers: 20ms, 1s, 6m0s."""
    ms = max(0, math.ceil(seconds * 1000.0 - 1e-6))
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = f"{secs}.{frac:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def _format_seconds(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:g}"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
        return " ".join(parts)
    return ""


def _split_pieces(reply: str) -> list[str]:
    pieces: list[str] = _WORD_RE.findall(reply)
    trailing = reply[sum(len(p) for p in pieces) :]
    if trailing:
        if pieces:
            pieces[-1] += trailing
        else:
            pieces.append(trailing)
    return pieces


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if 400 <= status < 500:
        return "invalid_request_error"
    return "server_error"


def _error_body(message: str, err_type: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "code": code}}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _fault_headers(fault: Fault | None) -> list[tuple[str, str]]:
    if fault is None:
        return []
    out: list[tuple[str, str]] = []
    if fault.retry_after is not None:
        value = fault.retry_after
        out.append(("Retry-After", value if isinstance(value, str) else _format_seconds(value)))
    if fault.retry_after_ms is not None:
        out.append(("retry-after-ms", str(fault.retry_after_ms)))
    out.extend((str(k), str(v)) for k, v in fault.headers.items())
    return out


class _BadRequest(Exception):
    pass


@dataclass
class _ChatRequest:
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    input_tokens: int


def _parse_chat(raw: bytes, default_model: str) -> _ChatRequest:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("'messages' must be a non-empty list")
    input_tokens = 0
    for message in messages:
        if not isinstance(message, dict):
            raise _BadRequest("each message must be a JSON object")
        input_tokens += len(_content_text(message.get("content")).split()) + 4
    max_tokens: int | None = None
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _BadRequest(f"'{key}' must be a non-negative integer")
        max_tokens = value if max_tokens is None else min(max_tokens, value)
    model = body.get("model")
    options = body.get("stream_options")
    return _ChatRequest(
        body=body,
        model=model if isinstance(model, str) and model else default_model,
        stream=body.get("stream") is True,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        max_tokens=max_tokens,
        input_tokens=input_tokens,
    )


def _echo_reply(body: dict[str, Any]) -> str:
    text = ""
    for message in body.get("messages", []):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _content_text(message.get("content"))
    return "Echo: " + text


def _framed(role: str, words: list[str], tag: str = "") -> list[str]:
    """One message's fake tokens: its words framed by 4 tokens (see the module docs)."""
    return [f"<{role}{tag}>", "<s>", *words, "</s>", "<eot>"]


def _openai_tokens(body: dict[str, Any]) -> list[str]:
    """The fake tokens of a chat-completions request (tools hashed into the first message)."""
    tools = body.get("tools")
    tag = ""
    if tools:
        canonical = canonical_json(tools, default=str)
        tag = "|" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    tokens: list[str] = []
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict):
            words = _content_text(message.get("content")).split()
            tokens += _framed(str(message.get("role")), words, tag if i == 0 else "")
    return tokens


def _block_words(block: Any) -> list[str]:
    """The words of one Anthropic content block (text, tool use, tool result, image)."""
    if isinstance(block, str):
        return block.split()
    if not isinstance(block, dict):
        return []
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return str(block["text"]).split()
    if kind == "tool_use":
        return json.dumps(block.get("input"), sort_keys=True, default=str).split()
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return [w for part in content for w in _block_words(part)]
        return str(content or "").split()
    return [f"<{kind}>"]


def _anthropic_tokens(body: dict[str, Any]) -> tuple[list[str], list[int]]:
    """The fake tokens of a Messages request, and the positions just after each
    ``cache_control`` breakpoint (tools, then the system prompt, then the messages)."""
    tokens: list[str] = []
    breakpoints: list[int] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            bare = {k: v for k, v in tool.items() if k != "cache_control"}
            tokens += _framed("tool", json.dumps(bare, sort_keys=True, default=str).split())
            if "cache_control" in tool:
                breakpoints.append(len(tokens))
    parts: list[tuple[str, Any]] = []
    system = body.get("system")
    if isinstance(system, (str, list)) and system:
        parts.append(("system", system))
    parts += [
        (str(m.get("role")), m.get("content")) for m in body["messages"] if isinstance(m, dict)
    ]
    for role, content in parts:
        blocks = content if isinstance(content, list) else [content]
        tokens += [f"<{role}>", "<s>"]
        for block in blocks:
            tokens += _block_words(block)
            if isinstance(block, dict) and "cache_control" in block:
                breakpoints.append(len(tokens))
        tokens += ["</s>", "<eot>"]
    return tokens, breakpoints


def _prefix_key(tokens: list[str], length: int) -> str:
    return hashlib.sha256("\x1f".join(tokens[:length]).encode("utf-8")).hexdigest()


_TEXT_BLOCK: dict[str, Any] = {"type": "text", "text": ""}


def _messages_problem(body: Any, version: str | None) -> str | None:
    """Why a Messages request is invalid (Anthropic answers 400), or None."""
    if not version:
        return "anthropic-version: header is required"
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (an integer >= 1)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return "messages: each message needs role 'user' or 'assistant'"
        if not isinstance(message.get("content"), (str, list)):
            return "messages: each message needs content"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: must be a string or a list of text blocks"
    return None


def _anthropic_error(status: int, message: str) -> bytes:
    kind = _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return _dumps({"type": "error", "error": {"type": kind, "message": message}})


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **data}) + b"\n\n"


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmguard-fake/1.0"
    sys_version = ""
    timeout = _IDLE_TIMEOUT_S
    _chunked = True

    # ---- plumbing

    @property
    def _srv(self) -> _Server:
        return cast(_Server, self.server)

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
        if self.command == "POST" and path in _CHAT_PATHS:
            self._chat(raw, n)
            return
        if self.command == "POST" and path in _MESSAGES_PATHS:
            self._messages(raw, n)
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

    # ---- chat completions

    def _chat(self, raw: bytes, n: int) -> None:
        provider = self._srv.provider
        try:
            req = _parse_chat(raw, provider._model)
        except _BadRequest as exc:
            provider._note_chat(stream=False)
            err = _error_body(str(exc), "invalid_request_error", None)
            headers = provider._common_headers(n)
            provider._note_status(400)
            self._send(400, _dumps(err), "application/json", headers)
            return
        provider._note_chat(stream=req.stream)
        fault = provider._choose_fault()
        if fault is not None and not fault.is_delay_only:
            provider._note_fault()
            self._answer_fault(req, fault, n)
            return
        self._answer_normal(req, fault, n)

    def _answer_normal(self, req: _ChatRequest, fault: Fault | None, n: int) -> None:
        provider = self._srv.provider
        extra = _fault_headers(fault)
        try:
            reply = provider._make_reply(req.body)
        except Exception as exc:
            if not self._pause(fault.latency if fault else 0.0):
                return
            err = _error_body(f"reply callback failed: {exc!r}", "server_error", None)
            headers = provider._common_headers(n) + extra
            provider._note_status(500)
            self._send(500, _dumps(err), "application/json", headers)
            return
        pieces = _split_pieces(reply)
        finish_reason = "stop"
        if req.max_tokens is not None and req.max_tokens < len(pieces):
            pieces = pieces[: req.max_tokens]
            finish_reason = "length"
        cost = req.input_tokens + (req.max_tokens if req.max_tokens is not None else len(pieces))
        retry_after, rate_headers = provider._admit(cost)
        headers = [("x-request-id", f"req-{n}"), *rate_headers, *extra]
        if not self._pause(fault.latency if fault else 0.0):
            return
        if retry_after is not None:
            provider._note_rate_limited()
            seconds = max(1, math.ceil(retry_after))
            err = _error_body(
                f"Rate limit reached for {req.model} on the fake provider; "
                f"retry after {seconds} seconds",
                "rate_limit_error",
                "rate_limit_exceeded",
            )
            provider._note_status(429)
            if not any(name.lower().startswith("retry-after") for name, _ in extra):
                headers.append(("Retry-After", str(seconds)))
                headers.append(("retry-after-ms", str(math.ceil(retry_after * 1000))))
            self._send(429, _dumps(err), "application/json", headers)
            return
        cached = provider._openai_cached(_openai_tokens(req.body)) if provider.prefix_cache else 0
        usage: dict[str, Any] | None = {
            "prompt_tokens": req.input_tokens,
            "completion_tokens": len(pieces),
            "total_tokens": req.input_tokens + len(pieces),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        if fault is not None and fault.omit_usage:
            usage = None
        if req.stream:
            first = fault.first_token_delay if fault else 0.0
            between = fault.inter_token_delay if fault else 0.0
            self._stream(req, n, headers, pieces, finish_reason, usage, first, between)
            return
        payload = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(pieces)},
                    "finish_reason": finish_reason,
                }
            ],
        }
        if usage is not None:
            payload["usage"] = usage
        provider._note_status(200)
        provider._note_success(req.input_tokens, len(pieces))  # before the client can see it
        try:
            self._send(200, _dumps(payload), "application/json", headers)
        except OSError:
            provider._note_success(req.input_tokens, len(pieces), undo=True)
            raise

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

    def _answer_fault(self, req: _ChatRequest, fault: Fault, n: int) -> None:
        provider = self._srv.provider
        if self._silent_fault(fault):
            return
        headers = provider._common_headers(n) + _fault_headers(fault)
        if fault.status is not None:
            err = _error_body(
                f"fake error {fault.status}", _error_type(fault.status), fault.error_code
            )
            provider._note_status(fault.status)
            self._send(fault.status, _dumps(err), "application/json", headers)
            return
        provider._note_status(200)
        if fault.wrong_content_type:
            self._send(200, _HTML_BODY, "text/html; charset=utf-8", headers)
            return
        created = int(time.time())
        if fault.malformed_json:
            broken = b'{"id":"chatcmpl-fake-%d","object":"chat.completion","choices":[{"index":0,'
            if req.stream:
                self._start_stream(headers)
                self._event(b"data: " + (broken % n) + b"\n\n")
                self._event(b"data: [DONE]\n\n", last=True)
            else:
                self._send(200, broken % n, "application/json", headers)
            return
        if fault.missing_fields:
            obj: dict[str, Any] = {"id": f"chatcmpl-fake-{n}", "created": created}
            obj["model"] = req.model
            if req.stream:
                obj["object"] = "chat.completion.chunk"
                self._start_stream(headers)
                self._event(b"data: " + _dumps(obj) + b"\n\n")
                self._event(b"data: [DONE]\n\n", last=True)
            else:
                obj["object"] = "chat.completion"
                self._send(200, _dumps(obj), "application/json", headers)
            return
        # cut_stream_after
        limit = fault.cut_stream_after or 0
        try:
            reply = provider._make_reply(req.body)
        except Exception:
            reply = "Echo:"
        pieces = _split_pieces(reply)
        if req.stream:
            self._start_stream(headers)
            self._event(
                b"data: "
                + _dumps(self._chunk(req, n, {"role": "assistant", "content": ""}))
                + b"\n\n"
            )
            for i, piece in enumerate(pieces[:limit]):
                delay = fault.first_token_delay if i == 0 else fault.inter_token_delay
                if not self._pause(delay):
                    return
                self._event(b"data: " + _dumps(self._chunk(req, n, {"content": piece})) + b"\n\n")
            self._event(b'data: {"id":"chatcmpl-fake-%d","object":"chat.compl' % n)
        else:
            payload = _dumps(
                {
                    "id": f"chatcmpl-fake-{n}",
                    "object": "chat.completion",
                    "created": created,
                    "model": req.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
            self._send(
                200, payload[: len(payload) // 2], "application/json", headers, length=len(payload)
            )
        self.close_connection = True

    # ---- Anthropic messages

    def _messages(self, raw: bytes, n: int) -> None:
        provider = self._srv.provider
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            body = None
        stream = isinstance(body, dict) and body.get("stream") is True
        provider._note_chat(stream=stream)
        problem = _messages_problem(body, self.headers.get("anthropic-version"))
        if problem is not None or not isinstance(body, dict):
            provider._note_status(400)
            error = _anthropic_error(400, problem or "bad request")
            self._send(400, error, "application/json", provider._common_headers(n))
            return
        fault = provider._choose_fault()
        if fault is not None and not fault.is_delay_only:
            provider._note_fault()
            self._messages_fault(body, stream, fault, n)
            return
        self._messages_normal(body, stream, fault, n)

    def _messages_normal(
        self, body: dict[str, Any], stream: bool, fault: Fault | None, n: int
    ) -> None:
        provider = self._srv.provider
        extra = _fault_headers(fault)
        try:
            reply = provider._make_reply(body)
        except Exception as exc:
            if not self._pause(fault.latency if fault else 0.0):
                return
            provider._note_status(500)
            error = _anthropic_error(500, f"reply callback failed: {exc!r}")
            self._send(500, error, "application/json", provider._common_headers(n) + extra)
            return
        pieces = _split_pieces(reply)
        max_tokens: int = body["max_tokens"]
        finish = "stop"
        if max_tokens < len(pieces):
            pieces, finish = pieces[:max_tokens], "length"
        tokens, breakpoints = _anthropic_tokens(body)
        retry_after, rate_headers = provider._admit(len(tokens) + max_tokens)
        headers = [("request-id", f"req-{n}"), *rate_headers, *extra]
        if not self._pause(fault.latency if fault else 0.0):
            return
        if retry_after is not None:
            provider._note_rate_limited()
            provider._note_status(429)
            seconds = max(1, math.ceil(retry_after))
            if not any(name.lower().startswith("retry-after") for name, _ in extra):
                headers.append(("Retry-After", str(seconds)))
            error = _anthropic_error(429, f"rate limit reached; retry after {seconds} seconds")
            self._send(429, error, "application/json", headers)
            return
        read, written = provider._anthropic_cached(tokens, breakpoints)
        usage: dict[str, Any] | None = {
            "input_tokens": len(tokens) - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": len(pieces),
        }
        if fault is not None and fault.omit_usage:
            usage = None
        message: dict[str, Any] = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        }
        if stream:
            if usage is not None:
                message["usage"] = {**usage, "output_tokens": 0}
            provider._note_status(200)
            self._start_stream(headers)
            self._event(_sse("message_start", {"message": message}))
            self._event(_sse("content_block_start", {"index": 0, "content_block": _TEXT_BLOCK}))
            self._event(_sse("ping", {}))
            for i, piece in enumerate(pieces):
                delay = (
                    (fault.first_token_delay if i == 0 else fault.inter_token_delay) if fault else 0
                )
                if not self._pause(delay):
                    return
                delta = {"type": "text_delta", "text": piece}
                self._event(_sse("content_block_delta", {"index": 0, "delta": delta}))
            self._event(_sse("content_block_stop", {"index": 0}))
            end: dict[str, Any] = {
                "delta": {"stop_reason": _STOP_REASONS[finish], "stop_sequence": None}
            }
            if usage is not None:
                end["usage"] = {"output_tokens": len(pieces)}
            self._event(_sse("message_delta", end))
            provider._note_success(len(tokens), len(pieces))
            try:
                self._event(_sse("message_stop", {}), last=True)
            except OSError:
                provider._note_success(len(tokens), len(pieces), undo=True)
                raise
            if not self._chunked:
                self.close_connection = True
            return
        message["content"] = [{"type": "text", "text": "".join(pieces)}]
        message["stop_reason"] = _STOP_REASONS[finish]
        if usage is not None:
            message["usage"] = usage
        provider._note_status(200)
        provider._note_success(len(tokens), len(pieces))
        try:
            self._send(200, _dumps(message), "application/json", headers)
        except OSError:
            provider._note_success(len(tokens), len(pieces), undo=True)
            raise

    def _messages_fault(self, body: dict[str, Any], stream: bool, fault: Fault, n: int) -> None:
        provider = self._srv.provider
        if self._silent_fault(fault):
            return
        headers = provider._common_headers(n) + _fault_headers(fault)
        if fault.status is not None:
            provider._note_status(fault.status)
            error = _anthropic_error(fault.status, f"fake error {fault.status}")
            self._send(fault.status, error, "application/json", headers)
            return
        provider._note_status(200)
        if fault.wrong_content_type:
            self._send(200, _HTML_BODY, "text/html; charset=utf-8", headers)
            return
        start = {"id": f"msg_fake_{n}", "type": "message", "role": "assistant"}
        start["model"] = body["model"]
        if fault.malformed_json:
            broken = b'{"id":"msg_fake_%d","type":"message","content":[' % n
            if stream:
                self._start_stream(headers)
                self._event(b"event: message_start\ndata: " + broken + b"\n\n")
                self._event(_sse("message_stop", {}), last=True)
            else:
                self._send(200, broken, "application/json", headers)
            return
        if fault.missing_fields:
            if stream:
                self._start_stream(headers)
                self._event(_sse("message_start", {}))
                self._event(_sse("message_stop", {}), last=True)
            else:
                self._send(200, _dumps(start), "application/json", headers)
            return
        # cut_stream_after
        try:
            reply = provider._make_reply(body)
        except Exception:
            reply = "Echo:"
        pieces = _split_pieces(reply)
        if stream:
            self._start_stream(headers)
            self._event(_sse("message_start", {"message": {**start, "content": []}}))
            self._event(_sse("content_block_start", {"index": 0, "content_block": _TEXT_BLOCK}))
            for i, piece in enumerate(pieces[: fault.cut_stream_after or 0]):
                if not self._pause(fault.first_token_delay if i == 0 else fault.inter_token_delay):
                    return
                delta = {"type": "text_delta", "text": piece}
                self._event(_sse("content_block_delta", {"index": 0, "delta": delta}))
            self._event(b'event: content_block_delta\ndata: {"type":"content_bl')
        else:
            whole = _dumps({**start, "content": [{"type": "text", "text": reply}]})
            self._send(
                200, whole[: len(whole) // 2], "application/json", headers, length=len(whole)
            )
        self.close_connection = True

    # ---- streaming

    def _chunk(
        self, req: _ChatRequest, n: int, delta: dict[str, Any], finish: str | None = None
    ) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": req.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if req.include_usage:
            chunk["usage"] = None
        return chunk

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

    def _stream(
        self,
        req: _ChatRequest,
        n: int,
        headers: Sequence[tuple[str, str]],
        pieces: list[str],
        finish_reason: str,
        usage: dict[str, Any] | None,
        first_delay: float,
        between: float,
    ) -> None:
        self._srv.provider._note_status(200)
        self._start_stream(headers)
        self._event(
            b"data: " + _dumps(self._chunk(req, n, {"role": "assistant", "content": ""})) + b"\n\n"
        )
        for i, piece in enumerate(pieces):
            if not self._pause(first_delay if i == 0 else between):
                return
            self._event(b"data: " + _dumps(self._chunk(req, n, {"content": piece})) + b"\n\n")
        self._event(b"data: " + _dumps(self._chunk(req, n, {}, finish_reason)) + b"\n\n")
        if req.include_usage and usage is not None:
            final = {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": req.model,
                "choices": [],
                "usage": usage,
            }
            self._event(b"data: " + _dumps(final) + b"\n\n")
        # Count the success before the last write so that a client which has seen [DONE]
        # also sees it in the stats; undo it if that write fails.
        provider = self._srv.provider
        provider._note_success(req.input_tokens, len(pieces))
        try:
            self._event(b"data: [DONE]\n\n", last=True)
        except OSError:
            provider._note_success(req.input_tokens, len(pieces), undo=True)
            raise
        if not self._chunked:
            self.close_connection = True


# --------------------------------------------------------------------------- provider


class FakeProvider:
    """A real OpenAI-compatible HTTP server on a loopback port, run in a background thread.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`).  Point any OpenAI
    client at :attr:`base_url`.  Faults for the next requests are chosen, in this order of
    precedence, from the :meth:`script` queue, an active :meth:`fail_for` window, and the
    :meth:`always` default; requests without a fault are subject to the ``rpm`` / ``tpm``
    limits (sliding 60 s window) and otherwise answered normally.

    Args:
        model: model id reported by ``/v1/models`` and used when a request names none.
        reply: ``reply(body) -> str`` computes the assistant text from the request JSON;
            default: ``"Echo: " + <text of the last user message>``.
        rpm: requests per minute the fake provider allows (``None``: unlimited).
        tpm: tokens per minute it allows; a request costs its input tokens plus its
            ``max_tokens`` (or the reply's token count when no ``max_tokens`` is given).
        limit_window: the sliding window of ``rpm`` / ``tpm`` in seconds (60 by default;
            shorter windows make quick drills: ``rpm=10, limit_window=1`` is 10 per second).
            A 429 from these limits carries ``Retry-After`` (whole seconds, at least 1) and
            the exact wait in ``retry-after-ms``.
        host: interface to bind, loopback by default.
        port: port to bind; 0 picks a free one (kept across :meth:`stop` / :meth:`start`).
        hang_limit: seconds a ``Fault(hang=True)`` request hangs at most.
        name: a label for logs and thread names.
        prefix_cache: emulate a provider prefix cache and report cached tokens in usage
            (see the module docs).
        prefix_cache_min_tokens: shortest prefix the emulated cache keeps.
    """

    def __init__(
        self,
        *,
        model: str = "fake-model",
        reply: Callable[[dict[str, Any]], str] | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        limit_window: float = 60.0,
        host: str = "127.0.0.1",
        port: int = 0,
        hang_limit: float = 30.0,
        name: str = "fake",
        prefix_cache: bool = False,
        prefix_cache_min_tokens: int = 0,
    ) -> None:
        if rpm is not None and rpm < 1:
            raise ValueError("rpm must be >= 1 or None")
        if tpm is not None and tpm < 1:
            raise ValueError("tpm must be >= 1 or None")
        if not hang_limit >= 0 or math.isinf(hang_limit):
            raise ValueError("hang_limit must be a finite number >= 0")
        if prefix_cache_min_tokens < 0:
            raise ValueError("prefix_cache_min_tokens must be >= 0")
        self.prefix_cache = prefix_cache
        """Whether the emulated prefix cache is on."""
        self._prefix_min = prefix_cache_min_tokens
        self._seen_prompts: deque[list[str]] = deque(maxlen=256)
        self._written: OrderedDict[str, None] = OrderedDict()
        self.name = name
        """A label for this provider (used in thread names)."""
        self._model = model
        self._reply = reply
        if not 0 < limit_window < math.inf:
            raise ValueError("limit_window must be a positive number of seconds")
        self._rpm = rpm
        self._tpm = tpm
        self._limit_window = limit_window
        self._host = host
        self._port = port
        self._hang_limit = hang_limit

        self._lifecycle = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._bound_port: int | None = None

        self._lock = threading.Lock()
        self._counter = 0
        self._script: deque[Fault | None] = deque()
        self._window_fault: Fault | None = None
        self._window_until = 0.0
        self._default_fault: Fault | None = None
        self._rate_window: deque[tuple[float, int]] = deque()
        self._rate_tokens = 0
        self._recorded: deque[ReceivedRequest] = deque(maxlen=_MAX_RECORDED)
        self._stats: dict[str, int] = {}
        self._by_status: dict[int, int] = {}

    # ---- lifecycle

    def start(self) -> FakeProvider:
        """Start serving in a daemon thread (no-op when already started); return ``self``.

        After a :meth:`stop`, starting again binds the same port, so :attr:`url` stays valid.
        """
        with self._lifecycle:
            if self._server is not None:
                return self
            port = self._bound_port if self._bound_port is not None else self._port
            server = _Server((self._host, port), self)
            self._bound_port = server.server_port
            thread = threading.Thread(
                target=server.run, name=f"FakeProvider[{self.name}]", daemon=True
            )
            self._server = server
            self._thread = thread
            thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (no-op when not started); returns within about a second.

        Hung and streaming requests are interrupted, open connections are shut down and the
        listening socket is closed, so new connections are refused afterwards.
        """
        with self._lifecycle:
            server, thread = self._server, self._thread
            self._server = None
            self._thread = None
            if server is None:
                return
            server.stopping.set()
            if thread is not None:
                thread.join(timeout=_STOP_WAIT_S)
            server.server_close()
            server.drop_connections(timeout=_STOP_WAIT_S)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is currently started."""
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the server (the port is known once started)."""
        port = self._bound_port if self._bound_port is not None else self._port
        if port == 0:
            raise RuntimeError("FakeProvider has no port yet; call start() first")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{port}"

    @property
    def model(self) -> str:
        """The model name answered when a request names none."""
        return self._model

    @property
    def base_url(self) -> str:
        """``url + "/v1"``: what an OpenAI client takes as ``base_url``."""
        return self.url + "/v1"

    # ---- faults

    def script(self, *faults: Fault | None) -> None:
        """Queue faults for the next ``len(faults)`` chat requests (``None``: normal answer).

        Appends to any faults already queued.
        """
        with self._lock:
            self._script.extend(faults)

    def fail_for(self, seconds: float, fault: Fault) -> None:
        """Give ``fault`` to every chat request in the next ``seconds`` (monotonic clock).

        Replaces any earlier window.  The :meth:`script` queue still takes precedence.
        """
        with self._lock:
            self._window_fault = fault if seconds > 0 else None
            self._window_until = time.monotonic() + max(0.0, seconds)

    def always(self, fault: Fault | None) -> None:
        """Set the default fault for every chat request from now on (``None`` clears it)."""
        with self._lock:
            self._default_fault = fault

    def reset_faults(self) -> None:
        """Clear the script queue, the :meth:`fail_for` window and the :meth:`always` fault."""
        with self._lock:
            self._script.clear()
            self._window_fault = None
            self._window_until = 0.0
            self._default_fault = None

    # ---- observation

    @property
    def stats(self) -> ProviderStats:
        """A frozen snapshot of the counters."""
        with self._lock:
            s = self._stats
            return ProviderStats(
                requests=s.get("requests", 0),
                streams=s.get("streams", 0),
                succeeded=s.get("succeeded", 0),
                faults=s.get("faults", 0),
                by_status=dict(self._by_status),
                rate_limited=s.get("rate_limited", 0),
                input_tokens=s.get("input_tokens", 0),
                output_tokens=s.get("output_tokens", 0),
                connections=s.get("connections", 0),
                cached_input_tokens=s.get("cached_input_tokens", 0),
                cache_write_input_tokens=s.get("cache_write_input_tokens", 0),
            )

    def reset_stats(self) -> None:
        """Zero all counters (the recorded :attr:`requests` and rate-limit window stay)."""
        with self._lock:
            self._stats.clear()
            self._by_status.clear()

    def clear_prefix_cache(self) -> None:
        """Forget every prefix the emulated cache holds."""
        with self._lock:
            self._seen_prompts.clear()
            self._written.clear()

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the last (at most 1000) requests received, oldest first."""
        with self._lock:
            return list(self._recorded)

    # ---- internals used by the handler threads

    def _bump(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self._stats[key] = self._stats.get(key, 0) + amount

    def _note_connection(self) -> None:
        self._bump("connections")

    def _note_chat(self, *, stream: bool) -> None:
        with self._lock:
            self._stats["requests"] = self._stats.get("requests", 0) + 1
            if stream:
                self._stats["streams"] = self._stats.get("streams", 0) + 1

    def _note_fault(self) -> None:
        self._bump("faults")

    def _note_rate_limited(self) -> None:
        self._bump("rate_limited")

    def _note_status(self, status: int) -> None:
        with self._lock:
            self._by_status[status] = self._by_status.get(status, 0) + 1

    def _note_success(self, input_tokens: int, output_tokens: int, *, undo: bool = False) -> None:
        sign = -1 if undo else 1
        with self._lock:
            s = self._stats
            s["succeeded"] = s.get("succeeded", 0) + sign
            s["input_tokens"] = s.get("input_tokens", 0) + sign * input_tokens
            s["output_tokens"] = s.get("output_tokens", 0) + sign * output_tokens

    def _openai_cached(self, tokens: list[str]) -> int:
        """Tokens of ``tokens`` the emulated cache holds: the longest prefix shared with an
        earlier request; remembers this one."""
        if not self.prefix_cache:
            return 0
        with self._lock:
            best = 0
            for earlier in self._seen_prompts:
                shared = 0
                for a, b in zip(earlier, tokens, strict=False):
                    if a != b:
                        break
                    shared += 1
                best = max(best, shared)
            self._seen_prompts.append(tokens)
            cached = best if best >= max(1, self._prefix_min) else 0
            self._stats["cached_input_tokens"] = self._stats.get("cached_input_tokens", 0) + cached
            return cached

    def _anthropic_cached(self, tokens: list[str], breakpoints: list[int]) -> tuple[int, int]:
        """``(read, written)`` tokens of an Anthropic-style request: breakpoint prefixes only."""
        if not self.prefix_cache:
            return 0, 0
        usable = [p for p in breakpoints if p >= max(1, self._prefix_min)]
        with self._lock:
            read = 0
            for position in usable:
                key = _prefix_key(tokens, position)
                if key in self._written:
                    self._written.move_to_end(key)
                    read = max(read, position)
            written = 0
            for position in usable:
                if position > read:
                    self._written[_prefix_key(tokens, position)] = None
                    written = max(written, position - read)
            while len(self._written) > _PREFIX_MEMORY:
                self._written.popitem(last=False)
            s = self._stats
            s["cached_input_tokens"] = s.get("cached_input_tokens", 0) + read
            s["cache_write_input_tokens"] = s.get("cache_write_input_tokens", 0) + written
            return read, written

    def _record_request(self, method: str, path: str, headers: dict[str, str], body: Any) -> int:
        with self._lock:
            self._counter += 1
            self._recorded.append(ReceivedRequest(method, path, headers, body, time.monotonic()))
            return self._counter

    def _choose_fault(self) -> Fault | None:
        with self._lock:
            if self._script:
                return self._script.popleft()
            if self._window_fault is not None:
                if time.monotonic() < self._window_until:
                    return self._window_fault
                self._window_fault = None
            return self._default_fault

    def _make_reply(self, body: dict[str, Any]) -> str:
        if self._reply is None:
            return _echo_reply(body)
        return str(self._reply(body))

    def _prune_locked(self, now: float) -> None:
        window = self._rate_window
        while window and window[0][0] <= now - self._limit_window:
            self._rate_tokens -= window.popleft()[1]

    def _rate_headers_locked(self, now: float) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        window = self._rate_window
        reset = _format_duration(window[0][0] + self._limit_window - now) if window else "0s"
        if self._rpm is not None:
            out += [
                ("x-ratelimit-limit-requests", str(self._rpm)),
                ("x-ratelimit-remaining-requests", str(max(0, self._rpm - len(window)))),
                ("x-ratelimit-reset-requests", reset),
            ]
        if self._tpm is not None:
            out += [
                ("x-ratelimit-limit-tokens", str(self._tpm)),
                ("x-ratelimit-remaining-tokens", str(max(0, self._tpm - self._rate_tokens))),
                ("x-ratelimit-reset-tokens", reset),
            ]
        return out

    def _common_headers(self, n: int) -> list[tuple[str, str]]:
        headers = [("x-request-id", f"req-{n}")]
        if self._rpm is None and self._tpm is None:
            return headers
        with self._lock:
            now = time.monotonic()
            self._prune_locked(now)
            return headers + self._rate_headers_locked(now)

    def _admit(self, cost: int) -> tuple[float | None, list[tuple[str, str]]]:
        """Apply rpm/tpm: ``(None, headers)`` when admitted, else ``(wait_s, headers)``."""
        if self._rpm is None and self._tpm is None:
            return None, []
        with self._lock:
            now = time.monotonic()
            self._prune_locked(now)
            window = self._rate_window
            wait = 0.0
            if self._rpm is not None and len(window) + 1 > self._rpm:
                wait = max(wait, window[len(window) - self._rpm][0] + self._limit_window - now)
            if self._tpm is not None and self._rate_tokens + cost > self._tpm:
                if cost > self._tpm:
                    wait = max(
                        wait, self._limit_window
                    )  # can never fit; tell the client to back off
                else:
                    freed = 0
                    for stamp, tokens in window:
                        freed += tokens
                        if self._rate_tokens - freed + cost <= self._tpm:
                            wait = max(wait, stamp + self._limit_window - now)
                            break
            if wait > 0.0:
                return wait, self._rate_headers_locked(now)
            window.append((now, cost))
            self._rate_tokens += cost
            return None, self._rate_headers_locked(now)

    def __repr__(self) -> str:
        where = self.url if self._bound_port or self._port else "unbound"
        state = "running" if self.running else "stopped"
        return f"FakeProvider(name={self.name!r}, {where}, {state})"


# --------------------------------------------------------------------------- CLI


def _wait_for_eof(done: threading.Event) -> None:
    stdin = sys.stdin
    if stdin is None:
        return
    try:
        fd = stdin.fileno()
        while os.read(fd, 65536):
            pass
    except (OSError, ValueError):
        return  # no usable stdin: rely on signals
    done.set()


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llmguard_sdk.testing",
        description="Run a fake OpenAI-compatible provider (for benchmarks and drills).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve until SIGTERM, SIGINT or end of stdin")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--model", default="fake-model")
    serve.add_argument("--rpm", type=int, default=None)
    serve.add_argument("--tpm", type=int, default=None)
    serve.add_argument("--ignore-stdin", action="store_true", help="do not stop at end of stdin")
    args = parser.parse_args(argv)

    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with FakeProvider(
            model=args.model, rpm=args.rpm, tpm=args.tpm, host=args.host, port=args.port
        ) as fake:
            print(fake.base_url, flush=True)
            if not args.ignore_stdin:
                threading.Thread(target=_wait_for_eof, args=(done,), daemon=True).start()
            while not done.wait(0.2):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
