"""A 200 answer that is the provider's (or its router's) error object of a kind the SDK does
not know (``{"error": {"message": "..."}}``, no ``type`` or ``code``) costs nothing: the
provider says it failed the request, as with a known kind. Such an error keeps the answer's
status 200, which the rule for a stream dropped after its 200 took for a request the provider
took (charged its prompt). A plain call's JSON answer, a stream request answered with JSON,
a stream's error event before any content. Real Redis budgets, a loopback HTTP server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from llmguard_sdk import Guard, LLMGuardError
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.providers import OpenAICompatibleProvider

from .conftest import USER

PRICES = PriceTable.default_table().with_prices({"odd-model": Price(input=100.0, output=200.0)})
# no type, no code; or a bare string (Ollama's, TGI's error)
ERRORS = [{"message": "the upstream model failed"}, "the upstream model failed"]


class _Failing(BaseHTTPRequestHandler):
    """Answers every chat call 200 with ``{"error": server.error}``: as JSON, or
    (``server.event``) a stream request as an event stream whose first event is the error."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["content-length"]))
        streamed = bool(json.loads(raw).get("stream")) and self.server.event
        error = json.dumps({"error": self.server.error}).encode()
        body = b"data: " + error + b"\n\n" if streamed else None
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if body else "application/json")
        body = body or error
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(params=["json", "event"])
def failing(request: pytest.FixtureRequest) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    server.event = request.param == "event"  # type: ignore[attr-defined]
    server.error = ERRORS[0]  # type: ignore[attr-defined]
    Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _guard(server: ThreadingHTTPServer, redis_url: str, redis_prefix: str) -> Guard:
    route = OpenAICompatibleProvider(
        f"http://127.0.0.1:{server.server_address[1]}/v1", model="odd-model", name="odd"
    )
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    return Guard(
        [route], budgets=budgets, environ={}, store=redis_url, key_prefix=redis_prefix, retry=None
    )


def _call(guard: Guard, stream: bool) -> str:
    """One call of :data:`USER`, streamed and read to its end or not: its text."""
    if not stream:
        return guard.chat(USER, max_tokens=20).text
    with guard.chat(USER, stream=True, max_tokens=20) as chunks:
        return "".join(chunk.text for chunk in chunks)


def _charged(guard: Guard) -> float:
    (row,) = guard.budget_status()
    assert row["held_usd"] == 0
    return float(row["spent_usd"])


@pytest.mark.parametrize("error", ERRORS, ids=["object", "string"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_200_error_object_of_an_unknown_kind_costs_nothing(
    failing: ThreadingHTTPServer, redis_url: str, redis_prefix: str, stream: bool, error: object
) -> None:
    failing.error = error  # type: ignore[attr-defined]
    with _guard(failing, redis_url, redis_prefix) as guard:
        with pytest.raises(LLMGuardError, match="upstream model failed"):
            _call(guard, stream)
        assert _charged(guard) == 0  # (was the prompt, $0.0008)
