"""An error inside a stream (an ``error`` event) is the same error as the same failure answered
as an HTTP error: one table gives an error object's named kind the HTTP status it stands
for, and that status gives the typed error, its ``status_code`` and whether it is retried
(a spent quota is not)."""

from __future__ import annotations

import json
import socket

import pytest

from llmguard_sdk import (
    AnthropicProvider,
    BadRequestError,
    Guard,
    OpenAICompatibleProvider,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .rawserver import RawServer, http_response, raised_by, seen, sse_head

# Anthropic's error types and the HTTP status each comes with
ANTHROPIC = [
    ("invalid_request_error", "400 Bad Request"),
    ("authentication_error", "401 Unauthorized"),
    ("billing_error", "402 Payment Required"),
    ("permission_error", "403 Forbidden"),
    ("not_found_error", "404 Not Found"),
    ("request_too_large", "413 Payload Too Large"),
    ("rate_limit_error", "429 Too Many Requests"),
    ("api_error", "500 Internal Server Error"),
    ("timeout_error", "504 Gateway Timeout"),
    ("overloaded_error", "529 Overloaded"),
]
# OpenAI's error objects and the HTTP status each comes with
OPENAI = [
    ({"type": "insufficient_quota", "code": "insufficient_quota"}, "429 Too Many Requests"),
    ({"type": "requests", "code": "rate_limit_exceeded"}, "429 Too Many Requests"),
    ({"type": "invalid_request_error", "code": "model_not_found"}, "404 Not Found"),
    ({"type": "invalid_request_error", "code": "invalid_api_key"}, "401 Unauthorized"),
    ({"type": "invalid_request_error", "code": "context_length_exceeded"}, "400 Bad Request"),
    ({"type": "server_error", "code": None}, "500 Internal Server Error"),
]


def _anthropic(kind: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": f"it is {kind}"}}


@pytest.mark.parametrize(("kind", "status"), ANTHROPIC)
def test_an_anthropic_error_event_is_the_error_its_http_answer_is(kind: str, status: str) -> None:
    """Before: an error event kept its kind's class at best, with the stream's 200 as its
    status (so a ``not_found_error`` did not move the call on as a 404 does), and a
    ``billing_error`` was a retried ProviderUnavailableError, not the 402's refusal."""
    body = json.dumps(_anthropic(kind)).encode()
    with RawServer(http_response(body, status=status)) as raw:
        answered = raised_by(AnthropicProvider(raw.base_url, api_key="k", model="m"), False)
    event = b"event: error\ndata: " + body + b"\n\n"
    with RawServer(sse_head(), (event,)) as raw:
        streamed = raised_by(AnthropicProvider(raw.base_url, api_key="k", model="m"), True)
    assert seen(streamed) == seen(answered)
    assert streamed.status_code == int(status.split()[0])
    assert f"it is {kind}" in str(streamed)


@pytest.mark.parametrize(("error", "status"), OPENAI)
def test_an_openai_error_event_is_the_error_its_http_answer_is(
    error: dict[str, object], status: str
) -> None:
    body = json.dumps({"error": {"message": "it failed", **error}}).encode()
    with RawServer(http_response(body, status=status)) as raw:
        answered = raised_by(OpenAICompatibleProvider(raw.base_url, name="p"), False)
    with RawServer(sse_head(), (b"data: " + body + b"\n\n",)) as raw:
        streamed = raised_by(OpenAICompatibleProvider(raw.base_url, name="p"), True)
    assert seen(streamed) == seen(answered)


class _Counting(RawServer):
    """A RawServer that counts the requests it answered (one per connection)."""

    def __init__(self, head: bytes, parts: tuple[bytes, ...]) -> None:
        self.requests = 0
        super().__init__(head, parts)

    def handle(self, conn: socket.socket) -> None:
        self.requests += 1
        super().handle(conn)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_spent_quota_in_a_stream_moves_the_call_on_at_once(fake2: FakeProvider, api: str) -> None:
    """OpenAI's ``insufficient_quota`` and Anthropic's ``billing_error`` (its 402) in a stream
    were retried on the route (a retryable error) before the chain moved on."""
    if api == "openai":
        event = b'data: {"error": {"message": "quota", "code": "insufficient_quota"}}\n\n'
    else:
        event = b"event: error\ndata: " + json.dumps(_anthropic("billing_error")).encode()
        event += b"\n\n"
    with _Counting(sse_head(), (event,)) as raw:
        first: OpenAICompatibleProvider = (
            OpenAICompatibleProvider(raw.base_url, model="m", name="primary")
            if api == "openai"
            else AnthropicProvider(raw.base_url, api_key="k", model="m", name="primary")
        )
        second = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name="backup")
        with Guard([first, second], environ={}) as guard, guard.chat(USER, stream=True) as stream:
            list(stream)
    assert stream.response is not None
    assert stream.response.route == "backup"
    assert raw.requests == 1  # not retried on the route whose quota is spent


def test_a_timeout_error_event_is_a_retryable_504() -> None:
    """Anthropic's ``timeout_error`` is its 504: retried, and (a status at or above 400) no
    attempt that stalled after its request, whose prompt the budget would count."""
    event = b"event: error\ndata: " + json.dumps(_anthropic("timeout_error")).encode() + b"\n\n"
    with RawServer(sse_head(), (event,)) as raw:
        raised = raised_by(AnthropicProvider(raw.base_url, api_key="k", model="m"), True)
    assert type(raised) is ProviderUnavailableError
    assert raised.retryable is True
    assert raised.status_code == 504


# Error objects that name a timeout, as providers send them in a 200 answer or a stream's
# error event, and the error each is: its class, status_code and retry verdict
TIMEOUTS = [
    # OpenAI's (a batch row's, a session turn's): the model timed out on this request, a
    # timeout (as the batch reads it); the substring "timeout" made it a 504 unavailable
    ({"type": "invalid_request_error", "code": "request_timeout"}, ProviderTimeoutError, 408),
    ({"code": "request_timeout"}, ProviderTimeoutError, 408),
    # the Responses API's: file_search's vector store did not answer in time, a gateway's 504
    ({"type": "server_error", "code": "vector_store_timeout"}, ProviderUnavailableError, 504),
    ({"type": "timeout_error"}, ProviderUnavailableError, 504),  # Anthropic's 504
    # Gemini's: the numeric code decides (its status is no field the table reads)
    ({"code": 504, "status": "DEADLINE_EXCEEDED"}, ProviderUnavailableError, 504),
    # vLLM's: the numeric code, whatever the exception class in ``type`` says
    ({"type": "TimeoutError", "code": 500, "object": "error"}, ProviderUnavailableError, 500),
    # Anthropic's request body that did not arrive in time (named in details.error_code,
    # anthropic-python's BetaRequestBodyTimeoutError): HTTP's 408, retried; it was a 400
    (
        {"type": "invalid_request_error", "details": {"error_code": "request_body_timeout"}},
        ProviderTimeoutError,
        408,
    ),
]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("error", "kind", "status"), TIMEOUTS)
def test_an_error_named_a_timeout_is_the_error_its_exact_name_says(
    streaming: bool, error: dict[str, object], kind: type[ProviderError], status: int
) -> None:
    """Any ``type`` or ``code`` holding the word ``timeout`` was a 504 unavailable: OpenAI's
    ``request_timeout`` (a timeout, as a batch row reads it) among them. Names are matched
    exactly now."""
    body = json.dumps({"error": {"message": "it timed out", **error}}).encode()
    answer = (sse_head(), (b"data: " + body + b"\n\n",)) if streaming else (http_response(body),)
    with RawServer(*answer) as raw:
        raised = raised_by(OpenAICompatibleProvider(raw.base_url, name="p"), streaming)
    assert seen(raised) == (kind, status, kind is not BadRequestError)
    assert "it timed out" in str(raised)


# Anthropic's answer when the account's credit is spent: a 400 of the same type as a bad request
CREDIT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "Your credit balance is too low to access the Anthropic API. Please go to "
        "Plans & Billing to upgrade or purchase credits.",
    },
}


@pytest.mark.parametrize("how", ["answer", "streamed answer", "stream event"])
def test_anthropic_s_spent_credit_moves_the_call_on_at_once(fake2: FakeProvider, how: str) -> None:
    """Anthropic's "credit balance is too low" 400 stopped the chain as a bad request would
    (which fails everywhere); it is a spent quota, as OpenAI's ``insufficient_quota``: the
    next route answers, and the spent one is not asked again."""
    body = json.dumps(CREDIT).encode()
    parts: tuple[bytes, ...]
    if how == "stream event":
        head, parts = sse_head(), (b"event: error\ndata: " + body + b"\n\n",)
    else:
        head, parts = http_response(body, status="400 Bad Request"), ()
    with _Counting(head, parts) as raw:
        first = AnthropicProvider(raw.base_url, api_key="k", model="m", name="primary")
        second = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name="backup")
        with Guard([first, second], environ={}) as guard:
            if how == "answer":
                response = guard.chat(USER)
            else:
                with guard.chat(USER, stream=True) as stream:
                    list(stream)
                assert stream.response is not None
                response = stream.response
    assert response.route == "backup"
    assert raw.requests == 1


def test_only_the_credit_message_makes_a_400_a_spent_quota() -> None:
    spent = json.dumps(CREDIT).encode()
    with RawServer(http_response(spent, status="400 Bad Request")) as raw:
        raised = raised_by(AnthropicProvider(raw.base_url, api_key="k", model="m"), False)
    assert seen(raised) == (RateLimitedError, 400, False)
    other = json.dumps(_anthropic("invalid_request_error")).encode()  # a plain bad request
    with RawServer(http_response(other, status="400 Bad Request")) as raw:
        raised = raised_by(AnthropicProvider(raw.base_url, api_key="k", model="m"), False)
    assert seen(raised) == (BadRequestError, 400, False)


def _stream_head(should_retry: str) -> bytes:
    return (
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        f"x-should-retry: {should_retry}\r\nconnection: close\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("should_retry", "kind", "retryable"),
    [("true", "invalid_request_error", False), ("false", "overloaded_error", True)],
)
def test_a_stream_s_x_should_retry_does_not_judge_its_error_events(
    api: str, should_retry: str, kind: str, retryable: bool
) -> None:
    """``x-should-retry`` on a stream's 200 answer describes that answer, not an error event
    that comes later inside the stream: it decided the event's retry (a bad request retried
    under ``true``, an overload not retried under ``false``); the event's own kind does."""
    if api == "anthropic":
        event = b"event: error\ndata: " + json.dumps(_anthropic(kind)).encode() + b"\n\n"
    else:
        event = b"data: " + json.dumps({"error": {"message": "m", "type": kind}}).encode()
        event += b"\n\n"
    with RawServer(_stream_head(should_retry), (event,)) as raw:
        route: OpenAICompatibleProvider = (
            AnthropicProvider(raw.base_url, api_key="k", model="m")
            if api == "anthropic"
            else OpenAICompatibleProvider(raw.base_url, name="p")
        )
        raised = raised_by(route, True)
    assert raised.retryable is retryable
