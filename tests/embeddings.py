"""An OpenAI-shaped /v1/embeddings endpoint on loopback, backed by the hashing embedder."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from llmguard_sdk.cache import HashingEmbedder


class Embeddings(BaseHTTPRequestHandler):
    """Answers with the hashing embedder's vectors (rows in reverse order; the first row
    alone when ``broken``; ``raw`` bytes instead when set). Once ``holding`` is set, each
    request is held until ``released`` is (or a minute passes)."""

    embedder = HashingEmbedder(dimension=64)
    seen: ClassVar[list[dict[str, Any]]] = []
    broken = False
    raw: ClassVar[bytes | None] = None
    holding = threading.Event()
    released = threading.Event()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"body": body, "auth": self.headers.get("Authorization")})
        if self.holding.is_set():
            self.released.wait(60)
        vectors = self.embedder.embed(body["input"])
        data = [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        payload = json.dumps({"data": data[::-1] if not self.broken else data[:1]}).encode()
        payload = self.raw if self.raw is not None else payload
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client gave up waiting
            pass

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serve_embeddings() -> Iterator[str]:
    """The endpoint's base URL while it runs (its settings reset; held requests released
    at the end)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Embeddings)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Embeddings.seen.clear()
    Embeddings.broken, Embeddings.raw = False, None
    Embeddings.holding.clear()
    Embeddings.released.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        Embeddings.released.set()
        server.shutdown()
        server.server_close()
