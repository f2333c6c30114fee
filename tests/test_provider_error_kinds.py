"""How error answers the status alone does not settle are classified: ``x-should-retry``
(the server's own word, as openai-python reads it), 425 Too Early, and error events inside
a stream, whose type says whether another attempt can help."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    AuthenticationError,
    BadRequestError,
    ChatRequest,
    ContextLengthExceededError,
    Guard,
    MalformedResponseError,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .rawserver import RawServer, http_response, sse_head

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})


def _raised(provider: OpenAICompatibleProvider, streaming: bool) -> Exception:
    deadline = time.monotonic() + 5.0
    try:
        if streaming:
            list(provider.stream(REQUEST, model="m", deadline=deadline))
        else:
            provider.complete(REQUEST, model="m", deadline=deadline)
    except ProviderError as exc:
        return exc
    finally:
        provider.close()
    raise AssertionError("the call did not fail")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("fault", "kind", "retryable"),
    [
        (Fault(status=503, headers={"x-should-retry": "false"}), ProviderUnavailableError, False),
        (Fault(status=409, headers={"x-should-retry": "true"}), ProviderUnavailableError, True),
        (Fault(status=409), ProviderUnavailableError, True),  # a lock timeout, as the SDKs say
        (Fault(status=409, headers={"x-should-retry": "false"}), ProviderUnavailableError, False),
        (Fault(status=429, headers={"X-Should-Retry": "False"}), RateLimitedError, False),
        (Fault(status=503, headers={"x-should-retry": "maybe"}), ProviderUnavailableError, True),
        (Fault(status=425), ProviderUnavailableError, True),
    ],
)
def test_the_servers_word_on_retrying_is_kept(
    fake: FakeProvider,
    streaming: bool,
    fault: Fault,
    kind: type[ProviderError],
    retryable: bool,
) -> None:
    fake.script(fault)
    raised = _raised(OpenAICompatibleProvider(fake.base_url, name="p"), streaming)
    assert type(raised) is kind
    assert isinstance(raised, ProviderError)
    assert raised.retryable is retryable
    assert raised.status_code == fault.status


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("should_retry", [None, "false"])
def test_an_answer_under_400_is_malformed_whatever_its_body_says(
    streaming: bool, should_retry: str | None
) -> None:
    """A 201 is no error status: its error body does not make it a rate limit; the server's
    ``x-should-retry`` still decides whether it is retried."""
    body = json.dumps({"error": {"message": "slow down", "code": "rate_limit_exceeded"}})
    extra = f"x-should-retry: {should_retry}\r\n" if should_retry else ""
    answer = (
        f"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n{extra}"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n{body}"
    ).encode()
    with RawServer(answer) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), streaming)
    assert type(raised) is MalformedResponseError
    assert (raised.status_code, raised.retryable) == (201, should_retry is None)
    assert "unexpected HTTP status 201" in str(raised)


def _openai_error_event(error: dict[str, object]) -> bytes:
    return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"},
            RateLimitedError,
        ),
        (
            {
                "message": "too long",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            ContextLengthExceededError,
        ),
        ({"message": "bad", "type": "invalid_request_error", "code": None}, BadRequestError),
        ({"message": "who", "type": "authentication_error"}, AuthenticationError),
        ({"message": "oops", "type": "server_error"}, ProviderUnavailableError),
        ({"message": "?"}, ProviderUnavailableError),
    ],
)
def test_an_openai_error_event_before_content_keeps_its_kind(
    error: dict[str, object], kind: type[ProviderError]
) -> None:
    with RawServer(sse_head(), (_openai_error_event(error),)) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), True)
    assert type(raised) is kind
    assert str(error["message"]) in str(raised)


def _anthropic_error_event(kind: str) -> bytes:
    data = {"type": "error", "error": {"type": kind, "message": f"it is {kind}"}}
    return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", ProviderUnavailableError),
        ("api_error", ProviderUnavailableError),
        ("rate_limit_error", RateLimitedError),
        ("invalid_request_error", BadRequestError),
        ("request_too_large", BadRequestError),
        ("not_found_error", BadRequestError),
        ("permission_error", AuthenticationError),
        ("authentication_error", AuthenticationError),
    ],
)
def test_an_anthropic_error_event_before_content_keeps_its_kind(
    error_type: str, kind: type[ProviderError]
) -> None:
    with RawServer(sse_head(), (_anthropic_error_event(error_type),)) as raw:
        provider = AnthropicProvider(raw.base_url, api_key="k", model="m", name="a")
        raised = _raised(provider, True)
    assert type(raised) is kind
    assert f"it is {error_type}" in str(raised)


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        ({"type": "error", "code": "rate_limit_exceeded", "message": "m"}, RateLimitedError),
        ({"type": "error", "code": "server_error", "message": "m"}, ProviderUnavailableError),
        (
            {
                "type": "response.failed",
                "response": {"error": {"code": "invalid_prompt", "message": "m"}},
            },
            BadRequestError,
        ),
    ],
)
def test_a_responses_error_event_keeps_its_kind(
    event: dict[str, object], kind: type[ProviderError]
) -> None:
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    with RawServer(sse_head(), (data,)) as raw:
        raised = _raised(OpenAIResponsesProvider(raw.base_url, name="r"), True)
    assert type(raised) is kind


@pytest.mark.parametrize(
    ("provider", "event"),
    [
        ("chat", {"error": {"type": "insufficient_quota", "message": "m"}}),
        ("chat", {"error": {"code": "insufficient_quota", "message": "m"}}),
        ("responses", {"type": "error", "code": "insufficient_quota", "message": "m"}),
        (
            "responses",
            {
                "type": "response.failed",
                "response": {"error": {"code": "insufficient_quota", "message": "m"}},
            },
        ),
    ],
)
def test_a_spent_quota_in_a_stream_is_not_retried(provider: str, event: dict[str, object]) -> None:
    """A stream's error event naming a spent quota was a retryable RateLimitedError, where
    the same error as a 429 answer is not retried: both are read alike now (and a plain rate
    limit in a stream stays retryable)."""
    plain = json.loads(json.dumps(event).replace("insufficient_quota", "rate_limit_exceeded"))
    for sent, retryable in ((event, False), (plain, True)):
        data = b"data: " + json.dumps(sent).encode() + b"\n\n"
        with RawServer(sse_head(), (data,)) as raw:
            route = (
                OpenAICompatibleProvider(raw.base_url, name="p")
                if provider == "chat"
                else OpenAIResponsesProvider(raw.base_url, name="r")
            )
            raised = _raised(route, True)
        assert type(raised) is RateLimitedError
        assert raised.retryable is retryable


def _big_error(status: str, extra: str) -> bytes:
    page = b"<html><body>" + b"<p>upstream trouble</p>" * 20_000 + b"</body></html>"  # ~460 KB
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/html\r\n{extra}"
        f"content-length: {len(page)}\r\nconnection: close\r\n\r\n"
    ).encode() + page


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("status", "extra", "kind"),
    [
        ("429 Too Many Requests", "retry-after: 7\r\n", RateLimitedError),
        ("502 Bad Gateway", "", ProviderUnavailableError),
        ("400 Bad Request", "", BadRequestError),
    ],
)
def test_an_error_answer_with_a_big_body_keeps_its_status(
    streaming: bool, status: str, extra: str, kind: type[ProviderError]
) -> None:
    """A proxy's HTML error page can be larger than the error body kept: the status still
    decides the error (it was a MalformedResponseError without status or retry_after)."""
    with RawServer(_big_error(status, extra)) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), streaming)
    assert type(raised) is kind
    assert isinstance(raised, ProviderError)
    assert raised.status_code == int(status.split()[0])
    assert raised.body is not None
    assert raised.body.startswith("<html><body><p>upstream")
    if extra:
        assert raised.retry_after == 7.0


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"message": "slow down", "code": 429, "type": "rate_limit_exceeded"}, RateLimitedError),
        ({"message": "upstream died", "code": 502}, ProviderUnavailableError),
        ({"message": "lock timeout", "code": 409}, ProviderUnavailableError),
        ({"message": "upstream took too long", "code": 408}, ProviderTimeoutError),
        ({"message": "bad model", "type": "invalid_request_error"}, BadRequestError),
    ],
)
def test_a_200_answer_that_is_an_error_keeps_its_kind_and_message(
    error: dict[str, object], kind: type[ProviderError]
) -> None:
    """Routers (OpenRouter and the like) answer 200 with an error object when the model
    behind them failed: it is that error, not a malformed answer without a message."""
    body = json.dumps({"error": error}).encode()
    with RawServer(http_response(body)) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), False)
    assert type(raised) is kind
    assert str(error["message"]) in str(raised)


def test_an_sse_error_event_without_an_error_key_keeps_its_message() -> None:
    """``event: error`` names the event an error even where its data is the error itself."""
    data = b'event: error\ndata: {"message": "model is overloaded", "type": "server_error"}\n\n'
    with RawServer(sse_head(), (data,)) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), True)
    assert type(raised) is ProviderUnavailableError
    assert "model is overloaded" in str(raised)


def _mislabelled(status: str) -> bytes:
    page = b"<html>502 Bad Gateway</html>"  # not gzip, whatever the proxy says
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/html\r\ncontent-encoding: gzip\r\n"
        f"retry-after: 4\r\ncontent-length: {len(page)}\r\nconnection: close\r\n\r\n"
    ).encode() + page


@pytest.mark.parametrize("mode", ["sync", "async", "async-httpx"])
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("status", "kind"),
    [("429 Too Many Requests", RateLimitedError), ("400 Bad Request", BadRequestError)],
)
def test_an_error_answer_whose_body_cannot_be_decoded_keeps_its_status(
    mode: str, streaming: bool, status: str, kind: type[ProviderError]
) -> None:
    """A proxy's error page labelled gzip but sent plain: the status decides the error (it
    was a MalformedResponseError without status or retry_after, and retried a 400)."""
    with RawServer(_mislabelled(status)) as raw:
        provider = OpenAICompatibleProvider(raw.base_url, name="p")
        raised = _run(provider, mode, streaming)
    assert type(raised) is kind
    assert isinstance(raised, ProviderError)
    assert raised.status_code == int(status.split()[0])
    assert raised.retry_after == 4.0


def _run(provider: OpenAICompatibleProvider, mode: str, streaming: bool) -> Exception:
    if mode == "sync":
        return _raised(provider, streaming)
    if mode == "async-httpx":
        provider._async_library = "httpx"

    async def run() -> Exception:
        deadline = time.monotonic() + 5.0
        try:
            if streaming:
                _ = [c async for c in provider.astream(REQUEST, model="m", deadline=deadline)]
            else:
                await provider.acomplete(REQUEST, model="m", deadline=deadline)
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()
        raise AssertionError("the call did not fail")

    return anyio.run(run)


@pytest.mark.parametrize("mode", ["sync", "async", "async-httpx"])
def test_a_stream_answered_with_a_json_error_keeps_its_kind(mode: str) -> None:
    """A router answers a stream request 200 with a JSON error object, not an event stream:
    it is the error it names (it was a MalformedResponseError about the content type)."""
    body = json.dumps({"error": {"message": "upstream busy", "code": 429}}).encode()
    with RawServer(http_response(body)) as raw:
        raised = _run(OpenAICompatibleProvider(raw.base_url, name="p"), mode, True)
    assert type(raised) is RateLimitedError
    assert "upstream busy" in str(raised)


def test_a_stream_answered_with_json_that_is_no_error_is_malformed() -> None:
    with RawServer(http_response(b'{"choices": []}')) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), True)
    assert type(raised) is MalformedResponseError
    assert "content type" in str(raised)


@pytest.mark.parametrize(
    "body",
    [
        # Gemini's OpenAI-compatible endpoint: a list of one error
        [{"error": {"code": 400, "message": "the model said no", "status": "INVALID_ARGUMENT"}}],
        # vLLM's error object: its message at the top
        {"object": "error", "message": "the model said no", "type": "BadRequestError", "code": 400},
        {"detail": "the model said no"},  # FastAPI's
    ],
)
def test_an_error_answers_message_is_kept_in_other_servers_shapes(body: object) -> None:
    """The message of error bodies not shaped as OpenAI's was lost ("provider answered HTTP
    400"): a user saw why the request was refused only by reading ``body``."""
    with RawServer(http_response(json.dumps(body).encode(), status="400 Bad Request")) as raw:
        raised = _raised(OpenAICompatibleProvider(raw.base_url, name="p"), False)
    assert type(raised) is BadRequestError
    assert "the model said no" in str(raised)


def _router_error(code: int) -> bytes:
    return http_response(
        json.dumps({"error": {"code": code, "message": f"upstream {code}"}}).encode()
    )


def test_a_routers_timeout_answer_is_not_billed_as_a_stalled_attempt() -> None:
    """A 200 answer naming an upstream 408 is an answer, not an attempt that stalled after
    its request was sent: the budget counted its prompt as spent."""
    prices = PriceTable.default_table().with_prices({"m": Price(input=100.0, output=200.0)})
    with RawServer(_router_error(408)) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="router")
        budgets = Budgets([Budget(limit_usd=1.0)], prices=prices)
        with Guard(route, budgets=budgets, retry=None, environ={}) as guard:
            with pytest.raises(ProviderTimeoutError) as info:
                guard.chat(USER)
            (row,) = guard.budget_status()
    assert row["spent_usd"] == 0
    assert info.value.status_code == 408


def test_a_routers_402_answer_moves_the_call_to_the_next_route(fake: FakeProvider) -> None:
    """A router's 200 answer naming a 402 (no credit there) stopped the chain as a refused
    request; a 402 answer moves the call on, and so does this one."""
    with RawServer(_router_error(402)) as raw:
        first = OpenAICompatibleProvider(raw.base_url, model="m", name="router")
        second = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="backup")
        with Guard([first, second], retry=None, environ={}) as guard:
            answer = guard.chat(USER)
    assert answer.route == "backup"


def test_a_routers_timeout_event_in_a_stream_is_not_billed_as_a_stall() -> None:
    """As its whole-answer twin: an error event naming an upstream 408 is an answer."""
    prices = PriceTable.default_table().with_prices({"m": Price(input=100.0, output=200.0)})
    event = _openai_error_event({"code": 408, "message": "upstream timed out"})
    with RawServer(sse_head(), (event,)) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="router")
        budgets = Budgets([Budget(limit_usd=1.0)], prices=prices)
        with Guard(route, budgets=budgets, retry=None, environ={}) as guard:
            with pytest.raises(ProviderTimeoutError), guard.chat(USER, stream=True) as stream:
                list(stream)
            (row,) = guard.budget_status()
    assert row["spent_usd"] == 0


@pytest.mark.parametrize("streaming", [False, True])
def test_a_spent_quota_moves_the_call_on_without_retrying_the_route(
    fake: FakeProvider, fake2: FakeProvider, streaming: bool
) -> None:
    """OpenAI's ``insufficient_quota`` 429 is a billing state, not a rate limit: the same
    route was retried (waiting for a quota no wait brings back); it is still a
    RateLimitedError, not retryable, and the chain moves on to the next route."""
    fake.always(Fault(status=429, error_code="insufficient_quota"))
    spent = _raised(OpenAICompatibleProvider(fake.base_url, name="p"), streaming)
    assert type(spent) is RateLimitedError
    assert spent.retryable is False
    first = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    second = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name="backup")
    fake.reset_stats()
    with Guard([first, second], environ={}) as guard:
        if streaming:
            with guard.chat(USER, stream=True) as stream:
                list(stream)
        else:
            assert guard.chat(USER).route == "backup"
    assert fake.stats.requests == 1
    assert fake2.stats.succeeded == 1


def test_a_plain_rate_limit_is_still_retried_on_its_route(fake: FakeProvider) -> None:
    """Only the spent quota changed: a ``rate_limit_exceeded`` 429 stays retryable."""
    fake.script(Fault(status=429, error_code="rate_limit_exceeded"))
    raised = _raised(OpenAICompatibleProvider(fake.base_url, name="p"), False)
    assert type(raised) is RateLimitedError
    assert raised.retryable is True


def _oversize_answer() -> bytes:
    body = b'{"pad": "' + b"x" * (32 * 1024 * 1024) + b'"}'  # past the 32 MiB cap
    return (
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: req-big\r\n"
        f"x-ratelimit-remaining-requests: 41\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_oversize_answer_keeps_its_status_and_headers(mode: str) -> None:
    """A 200 body past the size cap was a MalformedResponseError without the answer's
    status and headers (its request id, its rate-limit counters), as the other malformed
    answers keep them."""
    with RawServer(_oversize_answer()) as raw:
        provider = OpenAICompatibleProvider(raw.base_url, name="p")
        deadline = time.monotonic() + 30.0

        def call() -> object:
            if mode == "sync":
                return provider.complete(REQUEST, model="m", deadline=deadline)
            return anyio.run(lambda: provider.acomplete(REQUEST, model="m", deadline=deadline))

        try:
            with pytest.raises(MalformedResponseError) as info:
                call()
        finally:
            provider.close()
    assert "larger than" in str(info.value)
    assert info.value.status_code == 200
    assert info.value.headers["x-request-id"] == "req-big"
    assert info.value.headers["x-ratelimit-remaining-requests"] == "41"
