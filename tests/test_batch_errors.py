"""A batch's per-call failures keep their kind (a loopback server speaking the batch APIs)."""

from __future__ import annotations

import concurrent.futures
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

from llmguard_sdk import (
    BadRequestError,
    ChatRequest,
    ChatResponse,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.testing import FakeProvider

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})


class _Batches(BaseHTTPRequestHandler):
    """Every batch ends at once; each call's result is ``server.result(custom_id)``. The
    first ``server.failures[kind]`` status (``"status"``) or results (``"results"``) reads
    answer 503; ``server.created`` (bytes), when set, is the answer to a batch's creation."""

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
        self._send(200, getattr(self.server, "created", None) or json.dumps({"id": "b1"}).encode())

    def _failing(self, kind: str) -> bool:
        failures = getattr(self.server, "failures", {})
        if failures.get(kind, 0) <= 0:
            return False
        failures[kind] -= 1
        self._send(503, json.dumps({"error": {"message": f"{kind} unavailable"}}).encode())
        return True

    def do_GET(self) -> None:
        base = f"http://127.0.0.1:{self.server.server_port}/v1"
        results = self.path.endswith("/results") or self.path.endswith("/content")
        if self._failing("results" if results else "status"):
            return
        if results:
            rows = [self.server.result(i) for i in self.server.ids]
            self._send(200, "\n".join(json.dumps(r) for r in rows).encode(), "application/jsonl")
            return
        status = {
            "id": "b1",
            "processing_status": "ended",
            "results_url": f"{base}/messages/batches/b1/results",
            "status": "completed",
            "output_file_id": "file-out",
            **getattr(self.server, "status", {}),
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


@pytest.mark.parametrize(
    ("api", "error", "kind", "status", "retryable"),
    [
        ("openai", {"code": "insufficient_quota"}, RateLimitedError, 429, False),
        ("anthropic", {"type": "billing_error"}, BadRequestError, 402, False),
        ("anthropic", {"type": "timeout_error"}, ProviderUnavailableError, 504, True),
    ],
)
def test_an_errored_batch_result_is_the_error_its_http_answer_is(
    batches: ThreadingHTTPServer,
    api: Literal["openai", "anthropic"],
    error: dict[str, Any],
    kind: type[ProviderError],
    status: int,
    retryable: bool,
) -> None:
    """An errored result had its kind's class without the status it stands for, and a spent
    quota (or credit) was a retryable error, as a row with a ``status_code`` is not."""
    said = {**error, "message": "it failed"}

    def result(custom_id: str) -> dict[str, Any]:
        if api == "openai":
            return {"id": "r", "custom_id": custom_id, "response": None, "error": said}
        errored = {"type": "errored", "error": {"type": "error", "error": said}}
        return {"custom_id": custom_id, "result": errored}

    raised = _failure(batches, api, result)
    assert (type(raised), raised.status_code, raised.retryable) == (kind, status, retryable)


# -- against FakeProvider's batch APIs: rows it breaks, results that are no answer ------------


def _text_of(row: dict[str, Any]) -> str:
    """The answer text of a result row of either API (the fake echoes the question)."""
    if "result" in row:
        return str(row["result"]["message"]["content"][0]["text"])
    return str(row["response"]["body"]["choices"][0]["message"]["content"])


def _outcomes(
    fake: FakeProvider, api: Literal["openai", "anthropic"], questions: list[str]
) -> dict[str, ChatResponse | BaseException]:
    """Each question's answer or error, all sent as one batch."""
    route = BatchProvider(
        fake.base_url, api=api, model="m", window=5.0, max_batch=len(questions),
        poll_interval=0.02,
    )  # fmt: skip

    def ask(question: str) -> ChatResponse:
        request = ChatRequest.model_validate({"messages": [{"role": "user", "content": question}]})
        return route.complete(request, model="m", deadline=time.monotonic() + 10)

    try:
        with concurrent.futures.ThreadPoolExecutor(len(questions)) as pool:
            futures = {q: pool.submit(ask, q) for q in questions}
            return {q: f.exception() or f.result() for q, f in futures.items()}
    finally:
        route.close()


BROKEN_ROWS: list[Callable[[dict[str, Any]], dict[str, Any] | str | None]] = [
    lambda row: {k: v for k, v in row.items() if k != "custom_id"},  # no custom_id
    lambda row: json.dumps(row)[:40],  # cut: not JSON
    lambda row: "[1, 2]",  # JSON, not an object
    lambda row: {**row, "custom_id": 7},  # a custom_id that is no string
]


@pytest.mark.parametrize("broken", BROKEN_ROWS)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_row_that_names_no_call_costs_only_its_own_call(
    fake: FakeProvider,
    api: Literal["openai", "anthropic"],
    broken: Callable[[dict[str, Any]], dict[str, Any] | str | None],
) -> None:
    """A malformed row failed the whole batch (every caller got ``the batch failed:
    KeyError``); the rows read answer their calls, the call left without one is told so."""
    fake.batch_rows = lambda row: broken(row) if "two" in _text_of(row) else row
    got = _outcomes(fake, api, ["one", "two", "three"])
    assert isinstance(got["one"], ChatResponse)
    assert got["one"].text == "Echo: one"
    assert isinstance(got["three"], ChatResponse)
    assert got["three"].text == "Echo: three"
    missing = got["two"]
    assert type(missing) is ProviderError
    assert "without this call's result" in str(missing)
    assert "1 result row could not be read" in str(missing)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_row_whose_result_is_malformed_fails_its_call_alone(
    fake: FakeProvider, api: Literal["openai", "anthropic"]
) -> None:
    """A row naming its call whose result has the wrong shape (a string) fails that call as
    malformed; it failed the whole batch."""
    key = "result" if api == "anthropic" else "response"
    fake.batch_rows = lambda row: {**row, key: "oops"} if "two" in _text_of(row) else row
    got = _outcomes(fake, api, ["one", "two"])
    assert isinstance(got["one"], ChatResponse)
    assert isinstance(got["two"], MalformedResponseError)


@pytest.mark.parametrize(
    ("api", "make", "kind", "retryable"),
    [
        ("anthropic", lambda i: {"custom_id": i, "result": {"type": "expired"}},
         ProviderTimeoutError, True),
        ("anthropic", lambda i: {"custom_id": i, "result": {"type": "canceled"}},
         ProviderUnavailableError, False),
        ("openai", lambda i: {"custom_id": i, "response": None, "error": {
            "code": "batch_expired", "message": "not run before the window ended"}},
         ProviderTimeoutError, True),
        ("openai", lambda i: {"custom_id": i, "response": None, "error": {
            "code": "batch_cancelled", "message": "the batch was cancelled"}},
         ProviderUnavailableError, False),
        ("openai", lambda i: {"custom_id": i, "response": None, "error": {
            "code": "request_timeout", "message": "the model timed out"}},
         ProviderTimeoutError, True),
    ],
)  # fmt: skip
def test_a_result_the_batch_never_ran_says_why(
    fake: FakeProvider,
    api: Literal["openai", "anthropic"],
    make: Callable[[str], dict[str, Any]],
    kind: type[ProviderError],
    retryable: bool,
) -> None:
    """An expired request is a timeout (another batch may serve it); a cancelled one is
    not resubmitted (someone cancelled the batch at the provider). Both were a bare
    ProviderError."""
    fake.batch_rows = lambda row: make(row["custom_id"])
    (raised,) = _outcomes(fake, api, ["q"]).values()
    assert type(raised) is kind
    assert isinstance(raised, ProviderError)
    assert raised.retryable is retryable
    word = "expired" if kind is ProviderTimeoutError and api == "anthropic" else ""
    assert word in str(raised)


# -- the batch's own requests: sending it, reading its status and results --------------------


def _succeeded(api: str) -> Callable[[str], dict[str, Any]]:
    """Result rows that answer each call "done"."""

    def result(custom_id: str) -> dict[str, Any]:
        if api == "anthropic":
            message = {
                "type": "message",
                "id": "msg_1",
                "model": "m",
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
                "stop_reason": "end_turn",
            }
            return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}
        body = {
            "id": "c1",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "done"},
                    "finish_reason": "stop",
                }
            ],
        }
        return {"custom_id": custom_id, "response": {"status_code": 200, "body": body}}

    return result  # fmt: skip


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_reads_that_fail_for_a_while_do_not_fail_the_batch(
    batches: ThreadingHTTPServer, api: Literal["openai", "anthropic"]
) -> None:
    """A status or results read answered 503 failed every call of a batch that went on
    running (and billing) at the provider; such reads are asked again until the deadline."""
    batches.result = _succeeded(api)  # type: ignore[attr-defined]
    batches.failures = {"status": 2, "results": 1}  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{batches.server_port}/v1"
    provider = BatchProvider(url, api=api, model="m", window=0.01, poll_interval=0.01)
    try:
        answer = provider.complete(REQUEST, model="m", deadline=time.monotonic() + 10)
    finally:
        provider.close()
    assert answer.text == "done"
    assert batches.failures == {"status": 0, "results": 0}  # type: ignore[attr-defined]


def test_a_batch_that_cannot_be_sent_is_a_route_failure() -> None:
    """A connection refused while sending the batch was a bare ProviderError, neither retried
    nor moved past; it is a ProviderUnavailableError, the request provably not sent."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = BatchProvider(f"http://127.0.0.1:{port}/v1", model="m", window=0.01)
    try:
        with pytest.raises(ProviderError) as info:
            provider.complete(REQUEST, model="m", deadline=time.monotonic() + 10)
    finally:
        provider.close()
    assert type(info.value) is ProviderUnavailableError
    assert info.value.request_sent is False


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_batch_created_with_an_answer_that_is_not_json_is_malformed(
    batches: ThreadingHTTPServer, api: Literal["openai", "anthropic"]
) -> None:
    """It was a bare ProviderError ("the batch failed: JSONDecodeError")."""
    batches.created = b"<html>oops</html>"  # type: ignore[attr-defined]
    raised = _failure(batches, api, _succeeded(api))
    assert type(raised) is MalformedResponseError


def test_a_failed_openai_batch_says_why_to_each_call(batches: ThreadingHTTPServer) -> None:
    """A batch OpenAI failed (its input refused, a queue limit) has no output file; its
    calls were told only that the batch ended without their result, not what it said."""
    error = {
        "code": "token_limit_exceeded",
        "message": "Enqueued token limit reached",
        "line": None,
    }
    batches.status = {  # type: ignore[attr-defined]
        "status": "failed",
        "output_file_id": None,
        "errors": {"object": "list", "data": [error]},
    }
    raised = _failure(batches, "openai", _succeeded("openai"))
    assert "(batch failed: Enqueued token limit reached)" in str(raised)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_an_infinite_deadline_waits_for_the_batch_and_nan_is_refused(
    fake: FakeProvider, api: Literal["openai", "anthropic"]
) -> None:
    import asyncio
    import math

    from llmguard_sdk import RequestValidationError

    route = BatchProvider(fake.base_url, api=api, model="m", window=0.02, poll_interval=0.02)
    try:  # math.inf: no deadline (it raised OverflowError), in both twins
        assert route.complete(REQUEST, model="m", deadline=math.inf).text
        answer = asyncio.run(route.acomplete(REQUEST, model="m", deadline=math.inf))
        assert answer.text
        for bad in (math.nan, "soon"):
            with pytest.raises(RequestValidationError, match="deadline"):
                route.complete(REQUEST, model="m", deadline=bad)  # type: ignore[arg-type]
        assert not route._waiting  # refused before it joined a batch
    finally:
        route.close()
