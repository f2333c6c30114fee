"""A batch's per-call failures keep their kind (a loopback server speaking the batch APIs)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

from llmguard_sdk import (
    BadRequestError,
    ChatRequest,
    ProviderError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.providers.batch import BatchProvider

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})


class _Batches(BaseHTTPRequestHandler):
    """Every batch ends at once; each call's result is ``server.result(custom_id)``."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["content-length"]))
        if self.path.endswith("/messages/batches"):
            ids = [r["custom_id"] for r in json.loads(raw)["requests"]]
        elif self.path.endswith("/files"):
            ids = [m.decode() for m in re.findall(rb'"custom_id":\s*"([^"]+)"', raw)]
            self.server.ids = ids
            self._send(200, json.dumps({"id": "file-1"}).encode())
            return
        else:
            ids = self.server.ids
        self.server.ids = ids
        self._send(200, json.dumps({"id": "b1"}).encode())

    def do_GET(self) -> None:
        base = f"http://127.0.0.1:{self.server.server_port}/v1"
        if self.path.endswith("/results") or self.path.endswith("/content"):
            rows = [self.server.result(i) for i in self.server.ids]
            self._send(200, "\n".join(json.dumps(r) for r in rows).encode(), "application/jsonl")
            return
        status = {
            "id": "b1",
            "processing_status": "ended",
            "results_url": f"{base}/messages/batches/b1/results",
            "status": "completed",
            "output_file_id": "file-out",
        }
        self._send(200, json.dumps(status).encode())


@pytest.fixture
def batches() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Batches)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _failure(
    batches: ThreadingHTTPServer,
    api: Literal["openai", "anthropic"],
    result: Callable[[str], dict[str, Any]],
) -> ProviderError:
    """What one call through a batch whose results ``result`` makes raised."""
    batches.result = result  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{batches.server_port}/v1"
    provider = BatchProvider(url, api=api, model="m", window=0.01, poll_interval=0.01)
    try:
        with pytest.raises(ProviderError) as info:
            provider.complete(REQUEST, model="m", deadline=time.monotonic() + 10)
    finally:
        provider.close()
    return info.value


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", ProviderUnavailableError),
        ("rate_limit_error", RateLimitedError),
        ("invalid_request_error", BadRequestError),
    ],
)
def test_an_errored_anthropic_batch_result_keeps_its_kind(
    batches: ThreadingHTTPServer, error_type: str, kind: type[ProviderError]
) -> None:
    def result(custom_id: str) -> dict[str, Any]:
        error = {"type": error_type, "message": f"it was {error_type}"}
        return {
            "custom_id": custom_id,
            "result": {"type": "errored", "error": {"type": "error", "error": error}},
        }

    raised = _failure(batches, "anthropic", result)
    assert type(raised) is kind
    assert f"it was {error_type}" in str(raised)


def test_an_openai_batch_row_error_keeps_its_kind_and_message(
    batches: ThreadingHTTPServer,
) -> None:
    def result(custom_id: str) -> dict[str, Any]:
        error = {"code": "rate_limit_exceeded", "message": "too many tokens in flight"}
        return {"id": "r", "custom_id": custom_id, "response": None, "error": error}

    raised = _failure(batches, "openai", result)
    assert type(raised) is RateLimitedError
    assert "too many tokens in flight" in str(raised)
