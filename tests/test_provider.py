"""Every FakeProvider fault becomes its typed error, sync (httpx) and async: through httpx2
(the default where it is installed) and through httpx (``async-httpx``)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    AuthenticationError,
    BadRequestError,
    ChatRequest,
    ChatResponse,
    ConfigurationError,
    ContextLengthExceededError,
    Guard,
    MalformedResponseError,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    RequestValidationError,
    StreamChunk,
    StreamInterruptedError,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .rawserver import REFUSAL, RawServer, http_response, sse_head

REQUEST = ChatRequest.model_validate(
    {"messages": [{"role": "user", "content": "tell me four words"}], "max_tokens": 50}
)
MODES = ["sync", "async", "async-httpx"]
E = TypeVar("E", bound=Exception)


def _library(provider: OpenAICompatibleProvider, mode: str) -> None:
    """``async-httpx``: the provider's async calls go through httpx instead of its default."""
    if mode == "async-httpx":
        provider._async_library = "httpx"


def complete(provider: OpenAICompatibleProvider, mode: str, timeout: float = 5.0) -> ChatResponse:
    deadline = time.monotonic() + timeout
    if mode == "sync":
        return provider.complete(REQUEST, model="m", deadline=deadline)
    _library(provider, mode)

    async def run() -> ChatResponse:
        try:
            return await provider.acomplete(REQUEST, model="m", deadline=deadline)
        finally:
            await provider.aclose()

    return anyio.run(run)


def stream(
    provider: OpenAICompatibleProvider, mode: str, timeout: float = 5.0
) -> list[StreamChunk]:
    deadline = time.monotonic() + timeout
    if mode == "sync":
        return list(provider.stream(REQUEST, model="m", deadline=deadline))
    _library(provider, mode)

    async def run() -> list[StreamChunk]:
        try:
            return [c async for c in provider.astream(REQUEST, model="m", deadline=deadline)]
        finally:
            await provider.aclose()

    return anyio.run(run)


def _raised(
    error: type[E],
    provider: OpenAICompatibleProvider,
    mode: str,
    streaming: bool,
    **options: float,
) -> E:
    """What a call of ``provider`` (:func:`stream` when ``streaming``, else :func:`complete`)
    raised: an ``error``."""
    call: Callable[..., Any] = stream if streaming else complete
    with pytest.raises(error) as info:
        call(provider, mode, **options)
    return info.value


@pytest.fixture
def provider(fake: FakeProvider) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, api_key="sk-test", name="primary")


@pytest.mark.parametrize("mode", MODES)
def test_plain_answer_with_usage_and_headers(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    response = complete(provider, mode)
    assert response.text == "Echo: tell me four words"
    assert response.finish_reason == "stop"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (8, 5)
    assert not response.usage.estimated
    assert response.route == "primary"
    assert response.headers["x-request-id"].startswith("req_")
    sent = fake.requests[-1]
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body is not None
    assert sent.body["model"] == "m"
    assert sent.body["max_tokens"] == 50


@pytest.mark.parametrize("mode", MODES)
def test_stream_asks_for_usage_and_gets_it_in_the_final_chunk(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    chunks = stream(provider, mode)
    assert "".join(c.text for c in chunks) == "Echo: tell me four words"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.output_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])
    assert any(c.finish_reason == "stop" for c in chunks)
    body = fake.requests[-1].body
    assert body is not None
    assert body["stream_options"] == {"include_usage": True}


STATUS_CASES: list[tuple[Fault, type[ProviderError]]] = [
    (Fault(status=429, retry_after=2), RateLimitedError),
    (Fault(status=500), ProviderUnavailableError),
    (Fault(status=502), ProviderUnavailableError),
    (Fault(status=503), ProviderUnavailableError),
    (Fault(status=504), ProviderUnavailableError),
    (Fault(status=529), ProviderUnavailableError),
    (Fault(status=408), ProviderTimeoutError),
    (Fault(status=400), BadRequestError),
    (Fault(status=400, error_code="context_length_exceeded"), ContextLengthExceededError),
    (Fault(status=401), AuthenticationError),
    (Fault(status=403), AuthenticationError),
    (Fault(status=404), BadRequestError),
    (Fault(status=422), BadRequestError),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("fault", "error"), STATUS_CASES)
def test_http_errors_map_to_typed_errors(
    fake: FakeProvider,
    provider: OpenAICompatibleProvider,
    mode: str,
    streaming: bool,
    fault: Fault,
    error: type[ProviderError],
) -> None:
    fake.script(fault)
    raised = _raised(error, provider, mode, streaming)
    assert type(raised) is error
    assert raised.status_code == fault.status
    assert raised.route == "primary"
    assert raised.headers["x-request-id"].startswith("req_")
    if fault.retry_after is not None:
        assert raised.retry_after == 2.0


@pytest.mark.parametrize("mode", MODES)
def test_retry_after_ms_is_read(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    fake.script(Fault(status=429, retry_after_ms=1500))
    with pytest.raises(RateLimitedError) as info:
        complete(provider, mode)
    assert info.value.retry_after == 1.5
    assert info.value.retryable


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault(reset=True), ProviderUnavailableError),
        (Fault(malformed_json=True), MalformedResponseError),
        (Fault(wrong_content_type=True), MalformedResponseError),
        (Fault(hang=True), ProviderTimeoutError),
    ],
)
def test_transport_and_body_faults_map_to_typed_errors(
    fake: FakeProvider,
    provider: OpenAICompatibleProvider,
    mode: str,
    streaming: bool,
    fault: Fault,
    error: type[ProviderError],
) -> None:
    fake.script(fault)
    assert type(_raised(error, provider, mode, streaming, timeout=0.5)) is error


@pytest.mark.parametrize("mode", MODES)
def test_missing_fields_is_malformed(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    fake.script(Fault(missing_fields=True))
    with pytest.raises(MalformedResponseError, match="no choices"):
        complete(provider, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_malformed_stream_event_is_kept_in_the_error(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    """The error said "stream event is not JSON" and nothing of the event: a stream that
    failed so once (a test under load) left nothing to tell what had come instead."""
    fake.script(Fault(malformed_json=True))
    with pytest.raises(MalformedResponseError, match="not JSON") as info:
        stream(provider, mode)
    assert (
        info.value.body
        == '{"id":"chatcmpl-fake-1","object":"chat.completion","choices":[{"index":0,'
    )


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_after_content_is_interrupted_with_the_partial_text(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    fake.script(Fault(cut_stream_after=2))
    with pytest.raises(StreamInterruptedError) as info:
        stream(provider, mode)
    assert info.value.partial_text == "Echo: tell"
    assert not info.value.retryable


@pytest.mark.parametrize("mode", MODES)
def test_stream_cut_before_content_is_a_retryable_failure(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    fake.script(Fault(cut_stream_after=0))
    with pytest.raises(ProviderUnavailableError) as info:
        stream(provider, mode)
    assert info.value.retryable


@pytest.mark.parametrize("mode", MODES)
def test_slow_first_token_past_the_deadline_times_out(
    fake: FakeProvider, provider: OpenAICompatibleProvider, mode: str
) -> None:
    fake.script(Fault(first_token_delay=2.0))
    with pytest.raises(ProviderTimeoutError):
        stream(provider, mode, timeout=0.3)


def test_deadline_already_passed_raises_without_a_request(
    fake: FakeProvider, provider: OpenAICompatibleProvider
) -> None:
    with pytest.raises(ProviderTimeoutError):
        provider.complete(REQUEST, model="m", deadline=time.monotonic() - 1)
    assert fake.stats.requests == 0


def test_connections_are_reused(fake: FakeProvider, provider: OpenAICompatibleProvider) -> None:
    for _ in range(5):
        complete(provider, "sync")
    assert fake.stats.requests == 5
    assert fake.stats.connections == 1


@pytest.mark.parametrize("bad", ["no-scheme/v1", "ftp://x", "", "http://"])
def test_bad_base_url_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        OpenAICompatibleProvider(bad)


@pytest.mark.parametrize("mode", MODES)
def test_a_trickling_body_cannot_hold_the_call_past_its_deadline(mode: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    started = time.monotonic()
    with RawServer(head, (b" ",) * 1000, gap=0.05) as server:  # one byte every 50 ms
        provider = OpenAICompatibleProvider(server.base_url)
        with pytest.raises(ProviderTimeoutError, match="deadline"):
            complete(provider, mode, timeout=0.5)
    assert time.monotonic() - started < 5  # bounded (generous: shared CI machines)


@contextlib.contextmanager
def _timers_started() -> Iterator[list[int]]:
    """Counts the timers the running event loop is asked to start (``loop.call_at``)."""
    loop = asyncio.get_running_loop()
    started = [0]
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        started[0] += 1
        return call_at(when, callback, *args, **kwargs)

    loop.call_at = counted  # type: ignore[method-assign,assignment]
    try:
        yield started
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]


def test_an_async_call_starts_one_timer_for_its_deadline(fake: FakeProvider) -> None:
    """The deadline's cancel scope bounds an async call's whole exchange: its writes and reads
    start no timers of their own (each read and write started one, about a fifth of an async
    call's CPU at 500 calls in flight). A call with no deadline keeps the day-long timeouts."""

    async def timers(deadline: float) -> int:
        provider = OpenAICompatibleProvider(fake.base_url)
        try:
            await provider.acomplete(REQUEST, model="m", deadline=time.monotonic() + 5)  # warm
            with _timers_started() as started:
                answer = await provider.acomplete(REQUEST, model="m", deadline=deadline)
            assert "tell me four words" in answer.text
            return started[0]
        finally:
            await provider.aclose()

    assert anyio.run(timers, time.monotonic() + 5) == 1
    assert anyio.run(timers, math.inf) >= 2  # no deadline: each read and write is bounded


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", ["gzip", "identity", "GZIP ", None])
def test_an_answer_is_read_as_its_content_encoding_says(mode: str, encoding: str | None) -> None:
    """A body sent as is is read past httpx's decoder (it costs an async call ~6 µs); one
    sent compressed is still decoded."""
    answer = REFUSAL.replace(b"null", b'"hello"')
    body = gzip.compress(answer) if encoding and "gzip" in encoding.lower() else answer
    named = f"content-encoding: {encoding}\r\n" if encoding else ""
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        f"{named}content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    with RawServer(head.encode() + body) as server:
        provider = OpenAICompatibleProvider(server.base_url)
        assert complete(provider, mode).text == "hello"


def test_an_async_stream_starts_one_timer_a_read(fake: FakeProvider) -> None:
    """A stream's send and each read of its body wait under a cancel scope at the deadline:
    the transport's reads start no second timer each (two a read before)."""

    async def timers_and_chunks() -> tuple[int, int]:
        provider = OpenAICompatibleProvider(fake.base_url)
        try:
            await provider.acomplete(REQUEST, model="m", deadline=time.monotonic() + 5)  # warm
            fake.script(Fault(inter_token_delay=0.02))  # a read for each chunk
            with _timers_started() as started:
                chunks = provider.astream(REQUEST, model="m", deadline=time.monotonic() + 5)
                got = [chunk async for chunk in chunks]
            return started[0], len(got)
        finally:
            await provider.aclose()

    timers, chunks = anyio.run(timers_and_chunks)
    assert chunks >= 4
    assert timers <= chunks + 3  # the send's, one a read (and the last reads at the end)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("streaming", [False, True])
def test_connection_refused_says_the_request_was_never_sent(mode: str, streaming: bool) -> None:
    server = FakeProvider()
    server.start()
    base_url = server.base_url
    server.stop()
    provider = OpenAICompatibleProvider(base_url)
    assert _raised(ProviderUnavailableError, provider, mode, streaming).request_sent is False


def test_an_answered_failure_says_the_request_was_sent(
    fake: FakeProvider, provider: OpenAICompatibleProvider
) -> None:
    fake.script(Fault(status=503))
    with pytest.raises(ProviderUnavailableError) as info:
        complete(provider, "sync")
    assert info.value.request_sent is True


def test_rate_limit_reset_headers_become_retry_after(
    fake: FakeProvider, provider: OpenAICompatibleProvider
) -> None:
    fake.script(
        Fault(
            status=429,
            headers={"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30s"},
        )
    )
    with pytest.raises(RateLimitedError) as info:
        complete(provider, "sync")
    assert info.value.retry_after == 90.0


def test_a_refusal_is_an_answer_not_a_malformed_response() -> None:
    with RawServer(http_response(REFUSAL)) as raw:
        provider = OpenAICompatibleProvider(raw.base_url, model="m")
        answer = complete(provider, "sync")  # it was a MalformedResponseError, retried
        provider.close()
    assert answer.text == ""
    assert answer.metadata["refusal"] == "I cannot help with that."
    assert answer.usage is not None  # billed, and counted
    assert answer.usage.output_tokens == 6


def test_a_streamed_refusal_reaches_the_response_metadata() -> None:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return (
            b"data: "
            + json.dumps({"id": "c", "model": "m", "choices": [choice]}).encode()
            + b"\n\n"
        )

    events = (
        event({"role": "assistant", "content": None, "refusal": ""})
        + event({"refusal": "I cannot "})
        + event({"refusal": "help with that."})
        + event({}, "stop")
        + b"data: [DONE]\n\n"
    )
    with RawServer(sse_head(), (events,)) as raw:
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), timeout=10, environ={})
        with guard, guard.chat(REQUEST.messages, stream=True) as stream:
            assert "".join(chunk.text for chunk in stream) == ""
    assert stream.response is not None
    assert stream.response.metadata.get("refusal") == "I cannot help with that."  # was dropped


def _each_provider(fake: FakeProvider) -> list[OpenAICompatibleProvider]:
    return [
        OpenAICompatibleProvider(fake.base_url, api_key="sk-test", name="primary"),
        AnthropicProvider(fake.base_url, api_key="sk-test", model="fake-model"),
        OpenAIResponsesProvider(fake.base_url, api_key="sk-test"),
    ]


def _call(provider: OpenAICompatibleProvider, mode: str, streaming: bool, deadline: Any) -> str:
    if mode == "sync":
        if streaming:
            return "".join(c.text for c in provider.stream(REQUEST, model="m", deadline=deadline))
        return provider.complete(REQUEST, model="m", deadline=deadline).text
    _library(provider, mode)

    async def run() -> str:
        try:
            if streaming:
                chunks = provider.astream(REQUEST, model="m", deadline=deadline)
                return "".join([c.text async for c in chunks])
            return (await provider.acomplete(REQUEST, model="m", deadline=deadline)).text
        finally:
            await provider.aclose()

    return anyio.run(run)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_a_deadline_of_math_inf_is_no_deadline_and_nan_is_refused(
    fake: FakeProvider, mode: str, streaming: bool
) -> None:
    # A provider called directly (public API) with deadline=math.inf raised OverflowError (the
    # socket's timeout), and with NaN a bare ValueError; inf now means no deadline, and NaN or
    # what is not a number is refused before anything is sent.
    for provider in _each_provider(fake):
        try:
            assert "tell me four words" in _call(provider, mode, streaming, math.inf)
            sent = len(fake.requests)
            for bad in (math.nan, "soon", None, True):
                with pytest.raises(RequestValidationError, match="deadline"):
                    _call(provider, mode, streaming, bad)
            assert len(fake.requests) == sent
        finally:
            provider.close()
