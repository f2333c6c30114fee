"""``BatchProvider.close()`` cancels the batches it submitted that its callers still wait
for: the provider would run (and bill) them to the end, and nobody would read the answers."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import anyio
import pytest

from llmguard_sdk import ChatRequest, ProviderError
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.testing import FakeProvider

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
CREATE = {"openai": "/v1/batches", "anthropic": "/v1/messages/batches"}


def _in_flight(fake: FakeProvider, api: str) -> str:
    """The path of the batch the route created, once its status has been read (the batch
    is in flight then; a bounded wait)."""
    for _ in range(400):
        for request in fake.requests:
            if request.method == "GET" and request.path.startswith(CREATE[api] + "/"):
                return request.path
        time.sleep(0.025)
    raise AssertionError("no batch was created")


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_close_cancels_a_batch_in_flight(
    fake: FakeProvider, api: Literal["openai", "anthropic"]
) -> None:
    fake.batch_seconds = 600.0
    route = BatchProvider(fake.base_url, api=api, model="m", window=0.01, poll_interval=0.02)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(route.complete, REQUEST, model="m", deadline=time.monotonic() + 30)
        batch = _in_flight(fake, api)
        route.close()
        cancels = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/cancel")]
        assert [r.path for r in cancels] == [batch + "/cancel"]  # once, by close()
        with pytest.raises(ProviderError, match="closed"):
            waiting.result(timeout=10)  # the caller is told at once, not at the deadline
    time.sleep(0.1)  # the route's own thread sends no second cancel as it ends
    assert len([r for r in fake.requests if r.path.endswith("/cancel")]) == 1


def test_a_cancel_that_fails_is_logged_and_close_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeProvider(model="m").start()
    fake.batch_seconds = 600.0
    route = BatchProvider(fake.base_url, model="m", window=0.01, poll_interval=0.02)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(route.complete, REQUEST, model="m", deadline=time.monotonic() + 30)
        _in_flight(fake, "openai")
        fake.stop()  # the cancel finds nobody listening
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            route.close()
        with pytest.raises(ProviderError, match="closed"):
            waiting.result(timeout=10)
    assert any("could not cancel the batch" in r.getMessage() for r in caplog.records)


class _Unanswered(BaseHTTPRequestHandler):
    """A batch API whose batch never ends and whose cancel is not answered until
    ``server.release`` is set (30 s at most)."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"] or 0))
        if self.path.endswith("/cancel"):
            self.server.cancels += 1
            self.server.release.wait(30)
        self._send({"id": "b1", "status": "in_progress"})

    def do_GET(self) -> None:
        self.server.polled.set()
        self._send({"id": "b1", "status": "in_progress"})


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """A server of ``handler`` on loopback, with its counters and events, for one test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.cancels, server.release, server.polled = 0, threading.Event(), threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


@pytest.fixture
def unanswered() -> Iterator[ThreadingHTTPServer]:
    yield from _serve(_Unanswered)


def test_close_gives_a_cancel_no_more_than_close_timeout(
    unanswered: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://127.0.0.1:{unanswered.server_port}/v1"
    route = BatchProvider(url, model="m", window=0.01, poll_interval=0.02)
    route.close_timeout = 0.5
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(route.complete, REQUEST, model="m", deadline=time.monotonic() + 30)
        assert unanswered.polled.wait(10)
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            closing = pool.submit(route.close)
            closing.result(timeout=20)  # returns while the cancel is still unanswered
        assert not unanswered.release.is_set()
        assert unanswered.cancels == 1
        with pytest.raises(ProviderError, match="closed"):
            waiting.result(timeout=10)
    assert any("could not cancel the batch" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_aclose_cancels_a_batch_in_flight(fake: FakeProvider) -> None:
    fake.batch_seconds = 600.0
    route = BatchProvider(fake.base_url, model="m", window=0.01, poll_interval=0.02)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(route.complete, REQUEST, model="m", deadline=time.monotonic() + 30)
        batch = await anyio.to_thread.run_sync(_in_flight, fake, "openai")
        await route.aclose()
        assert [r.path for r in fake.requests if r.path.endswith("/cancel")] == [batch + "/cancel"]
        with pytest.raises(ProviderError, match="closed"):
            waiting.result(timeout=10)


class _ReadHeld(_Unanswered):
    """A batch API whose batch has ended at once, and whose results file is not answered
    until ``server.release`` is set (30 s at most)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"] or 0))
        self._send({"id": "file-1" if self.path.endswith("/files") else "b1"})

    def do_GET(self) -> None:
        if self.path.endswith("/content"):
            self.server.polled.set()  # (the results are being read)
            self.server.release.wait(30)
            row = {"custom_id": "x", "response": {"status_code": 200, "body": {}}}
            raw = json.dumps(row).encode() + b"\n"
            self.send_response(200)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        self._send({"id": "b1", "status": "completed", "output_file_id": "file-2"})


@pytest.fixture
def read_held() -> Iterator[ThreadingHTTPServer]:
    yield from _serve(_ReadHeld)


def test_close_while_the_results_are_read_fails_the_calls_as_closed(read_held: Any) -> None:
    """The batch has ended and its results are being read as the route closes: its callers
    are told the route closed (the error close() gives every other call it fails), not
    the closed connection pool's error."""
    url = f"http://127.0.0.1:{read_held.server_port}/v1"
    route = BatchProvider(url, model="m", window=0.01, poll_interval=0.02)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(route.complete, REQUEST, model="m", deadline=time.monotonic() + 30)
        assert read_held.polled.wait(10)
        route.close()
        read_held.release.set()
        with pytest.raises(ProviderError) as caught:
            waiting.result(timeout=10)
    assert str(caught.value).startswith("the BatchProvider closed")
    assert type(caught.value) is ProviderError
    assert read_held.cancels == 0  # (an ended batch: nothing to cancel)
