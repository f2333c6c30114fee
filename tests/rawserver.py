"""A loopback server that answers every request with canned raw bytes, for odd providers."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider, ProviderError

from .loopback import LoopbackServer

HI = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})


class RawServer(LoopbackServer):
    """Accepts connections; on each request sends ``head`` (:meth:`respond`'s answer to the
    request's body) then each of ``parts`` after ``gap`` seconds; ``hold`` keeps the
    connection open (silent) until closed. ``received``: the bodies of the requests so far."""

    def __init__(
        self, head: bytes, parts: tuple[bytes, ...] = (), *, gap: float = 0.0, hold: bool = False
    ) -> None:
        self.head, self.parts, self.gap, self.hold = head, parts, gap, hold
        self.received: list[bytes] = []
        super().__init__()

    def respond(self, body: bytes) -> bytes:
        """What is sent first in answer to a request whose body is ``body``: ``head``."""
        return self.head

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def handle(self, conn: socket.socket) -> None:
        threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                body = _read_request(conn)
                self.received.append(body)
                conn.sendall(self.respond(body))
                for part in self.parts:
                    if self.stop.wait(self.gap):
                        return
                    conn.sendall(part)
                if self.hold:
                    self.stop.wait(30)
            except OSError:
                return


class EarlyAnswerServer(RawServer):
    """Answers each request with ``head`` once the request's head has come and closes the
    connection without reading the body, as a server refusing a body too large does (nginx's
    413): the rest of the request, still being written, meets a reset."""

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                if _read_head(conn) is not None:
                    conn.sendall(self.head)
            except OSError:
                return


def _read_head(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """Read a request's head: the head, and what came after it (``None``: closed first)."""
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _read_request(conn: socket.socket) -> bytes:
    """Read one whole request (headers and Content-Length body) and return its body: unread
    bytes at close would make the kernel answer with a reset instead of our response."""
    read = _read_head(conn)
    if read is None:
        return b""
    head, body = read
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            return body
        body += piece
    return body


def http_response(
    body: bytes, *, status: str = "200 OK", content_type: str = "application/json"
) -> bytes:
    """A whole HTTP/1.1 response with a Content-Length."""
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


def chat_chunk_event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One ``chat.completion.chunk`` event (model ``m``) with ``delta`` and ``finish``."""
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chat_answer(content: str, finish: str | None = "stop") -> bytes:
    """A whole HTTP answer: a ``chat.completion`` (model ``m``) saying ``content``, finished
    for ``finish``."""
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return http_response(json.dumps(body).encode())


def sse_head() -> bytes:
    """Headers of an event stream that ends when the connection closes."""
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


# OpenAI's structured-output refusal: no content, the refusal beside it
REFUSAL = (
    b'{"id":"chatcmpl-1","model":"m","choices":[{"index":0,"finish_reason":"stop",'
    b'"message":{"role":"assistant","content":null,"refusal":"I cannot help with that."}}],'
    b'"usage":{"prompt_tokens":9,"completion_tokens":6,"total_tokens":15}}'
)


def raised_by(provider: OpenAICompatibleProvider, streaming: bool) -> ProviderError:
    """The error ``provider`` raises for one call (a stream's when ``streaming``) saying hi;
    the provider is closed after."""
    try:
        if streaming:
            list(provider.stream(HI, model="m", deadline=time.monotonic() + 10))
        else:
            provider.complete(HI, model="m", deadline=time.monotonic() + 10)
    except ProviderError as exc:
        return exc
    finally:
        provider.close()
    raise AssertionError("the call did not fail")


def seen(error: ProviderError) -> tuple[type[ProviderError], int | None, bool]:
    """What a caller sees of a provider's error: its class, status and retry verdict."""
    return type(error), error.status_code, error.retryable
