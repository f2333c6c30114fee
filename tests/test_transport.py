"""The transport seam: ``OpenAI(http_client=guard.http_client())`` answered by the Guard."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import httpx2
import openai
import pytest
from openai.types.responses import ResponseOutputMessage

from llmguard_sdk import AnthropicProvider, Guard, OpenAICompatibleProvider
from llmguard_sdk.client import GuardedClient
from llmguard_sdk.errors import ConfigurationError, LLMGuardError
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import async_http_client, http_client, transport

from .conftest import USER
from .rawserver import REFUSAL, RawServer, http_response, sse_head

MakeGuard = Callable[..., Guard]


def _sdk(client: Any) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=client)


def _dumps(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c.model_dump(exclude={"id", "created"}) for c in chunks]


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
def test_streamed_chunks_match_the_provider_s_own(
    fake: FakeProvider, make_guard: MakeGuard, library: Any
) -> None:
    options: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    direct = openai.OpenAI(api_key="sk-x", base_url=fake.base_url, max_retries=0)
    expected = list(direct.chat.completions.create(model="fake-model", messages=USER, **options))
    seam = _sdk(http_client(make_guard(fake), library=library))
    got = list(seam.chat.completions.create(model="fake-model", messages=USER, **options))
    assert _dumps(got) == _dumps(expected)
    assert len(got) == 6  # role, three pieces, finish, usage
    assert fake.requests[-1].path == "/v1/chat/completions"


def test_plain_call_and_headers(fake: FakeProvider, make_guard: MakeGuard) -> None:
    seam = _sdk(http_client(make_guard(fake, cache=True), library="httpx2"))
    first = seam.chat.completions.with_raw_response.create(model="m", messages=USER)
    again = seam.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert first.parse().choices[0].message.content == "Echo: hello there"
    assert first.headers["x-llmguard-route"] == "primary"
    assert re.fullmatch("req_[0-9a-f]{32}", first.headers["x-request-id"])
    assert again.headers["x-llmguard-route"] == "cache"
    assert again.parse().choices[0].message.content == "Echo: hello there"
    assert len(fake.requests) == 1


def test_errors_are_the_sdk_s_and_not_retried_by_it(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    seam = _sdk(http_client(make_guard(fake, retry=None)))  # the SDK keeps max_retries=2
    fake.always(Fault(status=503))
    with pytest.raises(openai.InternalServerError) as caught:
        seam.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 503
    assert caught.value.response.headers["x-llmguard-error"] == "ProviderUnavailableError"
    assert len(fake.requests) == 1  # x-should-retry: false: the SDK did not retry
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        seam.chat.completions.create(model="m", messages=USER, n=2)
    with pytest.raises(openai.NotFoundError, match="does not serve"):
        seam.embeddings.create(model="m", input="x")


def test_an_error_answer_carries_the_provider_s_request_id(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # a success passed the provider's x-request-id on, an error answer did not: the SDK's
    # error had no request_id to quote to the provider's support
    fake.always(Fault(status=503))
    with pytest.raises(openai.InternalServerError) as caught:
        _sdk(http_client(make_guard(fake, retry=None))).chat.completions.create(
            model="m", messages=USER
        )
    assert re.fullmatch("req_[0-9a-f]{32}", caught.value.request_id or "")


def test_any_route_answers_in_openai_s_shape(fake: FakeProvider) -> None:
    guard = Guard(
        AnthropicProvider(fake.base_url, api_key="sk-ant", model="claude-x", name="claude"),
        environ={},
    )
    seam = _sdk(http_client(guard))
    completion = seam.chat.completions.create(model="claude-x", messages=USER, max_tokens=20)
    assert completion.choices[0].message.content == "Echo: hello there"
    assert fake.requests[-1].path == "/v1/messages"
    chunks = list(seam.chat.completions.create(model="claude-x", messages=USER, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: hello there"
    )
    guard.close()


def test_fallback_through_the_seam(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(status=503))
    seam = _sdk(http_client(make_guard(fake, fake2, retry=None)))
    raw = seam.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert raw.headers["x-llmguard-route"] == "backup"
    assert raw.parse().model == "backup-model"


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
def test_async_seam(fake: FakeProvider, make_guard: MakeGuard, library: Any) -> None:
    guard = make_guard(fake)

    async def run() -> tuple[str | None, str]:
        client = openai.AsyncOpenAI(
            api_key="sk-x",
            base_url="http://guard.test/v1",
            http_client=async_http_client(guard, library=library),
        )
        completion = await client.chat.completions.create(model="m", messages=USER)
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await guard.aclose()
        return completion.choices[0].message.content, text

    assert anyio.run(run) == ("Echo: hello there", "Echo: hello there")


def test_bare_transports_and_scope(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)
    assert isinstance(transport(guard, library="httpx"), httpx.BaseTransport)
    assert isinstance(transport(guard, library="httpx2"), httpx2.BaseTransport)
    with httpx.Client(transport=transport(guard, library="httpx")) as client:
        answer = client.post(
            "http://guard.test/v1/chat/completions",
            json={"model": "m", "messages": USER},
            headers={"x-llmguard-tenant": "acme", "X-Title": "app"},
        )
    assert answer.json()["choices"][0]["message"]["content"] == "Echo: hello there"
    assert fake.requests[-1].headers["x-title"] == "app"
    assert "x-llmguard-tenant" not in fake.requests[-1].headers
    with pytest.raises(ConfigurationError, match="library"):
        transport(guard, library="requests")  # type: ignore[call-overload]


def test_unknown_provider_route_is_not_a_crash(make_guard: MakeGuard) -> None:
    guard = Guard(
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", name="down"),
        environ={},
        retry=None,
        timeout=2,
    )
    seam = _sdk(http_client(guard))
    with pytest.raises(openai.APIStatusError) as caught:
        seam.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 503
    guard.close()


def test_the_sdk_s_timeout_shortens_the_guard_s(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, retry=None)
    fake.always(Fault(latency=3.0))
    seam = _sdk(http_client(guard))
    with pytest.raises(openai.APIStatusError) as caught:
        seam.chat.completions.create(model="m", messages=USER, timeout=0.3)
    assert caught.value.status_code == 504
    assert caught.value.response.headers["x-llmguard-error"] == "ProviderTimeoutError"


@pytest.mark.parametrize("path", ["chat", "messages"])
def test_a_timeout_in_extra_body_does_not_outlast_the_guard_s(
    fake: FakeProvider, make_guard: MakeGuard, path: str
) -> None:
    # extra_body={"timeout": 30} became the call's deadline (the SDK's own timeout off), so
    # a call outlived the Guard's timeout of 0.3 s
    guard = make_guard(fake, retry=None, timeout=0.3)
    fake.always(Fault(latency=3.0))
    body = {"model": "m", "max_tokens": 10, "messages": USER, "timeout": 30}
    url = "http://guard.test/v1/" + ("chat/completions" if path == "chat" else "messages")
    with httpx.Client(transport=transport(guard, library="httpx"), timeout=None) as client:
        answer = client.post(url, json=body)
    assert answer.status_code == 504
    assert answer.headers["x-llmguard-error"] == "ProviderTimeoutError"
    assert fake.requests
    assert all("timeout" not in (request.body or {}) for request in fake.requests)


def test_a_stream_broken_after_content_ends_in_the_sdk_s_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(cut_stream_after=2))
    seam = _sdk(http_client(make_guard(fake, retry=None)))
    pieces: list[str | None] = []
    stream = seam.chat.completions.create(model="m", messages=USER, stream=True)
    with pytest.raises(openai.APIError, match="stream broke"):
        pieces.extend(c.choices[0].delta.content for c in stream if c.choices)
    assert pieces == ["", "Echo:", " hello"]  # what came before the break reached the caller


@pytest.mark.parametrize(
    ("given", "waits"), [("1e306", (str(10**12), str(10**9))), ("2.5", ("2500", "3"))]
)
def test_a_retry_after_is_the_sdk_s_rate_limit_error_with_its_wait(
    fake: FakeProvider, make_guard: MakeGuard, given: str, waits: tuple[str, str]
) -> None:
    # Retry-After: 1e306 is finite, its milliseconds were not: OverflowError out of the SDK;
    # and only retry-after-ms was sent: frameworks and HTTP clients that read Retry-After
    # (whole seconds, rounded up, as OpenAI and Anthropic send beside the ms) found no wait
    seam = _sdk(http_client(make_guard(fake, retry=None)))
    fake.always(Fault(status=429, retry_after=given))
    with pytest.raises(openai.RateLimitError) as caught:
        seam.chat.completions.create(model="m", messages=USER)
    headers = caught.value.response.headers
    assert (headers["retry-after-ms"], headers["retry-after"]) == waits


def test_non_ascii_header_values_reach_the_sdk(fake: FakeProvider) -> None:
    # str header values must be ASCII in httpx: a route's name or a provider's header that
    # is not failed the call with a UnicodeEncodeError out of the seam
    guard = Guard([OpenAICompatibleProvider(fake.base_url, name="primär")], environ={})
    fake.always(Fault(headers={"x-ratelimit-policy": "café"}))
    seam = _sdk(http_client(guard))
    plain = seam.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert (plain.headers["x-ratelimit-policy"], plain.headers["x-llmguard-route"]) == (
        "café",
        "primär",
    )
    with seam.chat.completions.with_streaming_response.create(
        model="m", messages=USER, stream=True
    ) as streamed:
        assert streamed.headers["x-llmguard-route"] == "primär"
        assert list(streamed.iter_lines())
    guard.close()


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
def test_a_stream_closed_before_it_is_read_gives_its_slot_back(
    fake: FakeProvider, make_guard: MakeGuard, library: Any
) -> None:
    # the Guard's stream had started (its first chunk is read before the answer goes back),
    # but closing the SDK's stream before reading it never closed it: its concurrency slot
    # (and connection, spend hold) stayed taken, and the next call was refused
    guard = make_guard(fake, rate_limits={"primary": RateLimit(concurrency=1)})
    seam = _sdk(http_client(guard, library=library))
    stream = seam.chat.completions.create(model="m", messages=USER, stream=True)
    assert isinstance(guard.rate_limiter, MemoryRateLimiter)
    assert guard.rate_limiter.in_flight("primary") == 1
    stream.close()
    assert guard.rate_limiter.in_flight("primary") == 0
    completion = seam.chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "Echo: hello there"


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
def test_an_async_stream_closed_before_it_is_read_gives_its_slot_back(
    fake: FakeProvider, make_guard: MakeGuard, library: Any
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(concurrency=1)})

    async def run() -> str | None:
        client = openai.AsyncOpenAI(
            api_key="sk-x",
            base_url="http://guard.test/v1",
            http_client=async_http_client(guard, library=library),
        )
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        await stream.close()
        assert isinstance(guard.rate_limiter, MemoryRateLimiter)
        assert guard.rate_limiter.in_flight("primary") == 0
        completion = await client.chat.completions.create(model="m", messages=USER)
        await guard.aclose()
        return completion.choices[0].message.content

    assert anyio.run(run) == "Echo: hello there"


@pytest.mark.parametrize("include_usage", [None, False])
def test_a_stream_without_include_usage_has_no_usage_chunk(
    fake: FakeProvider, make_guard: MakeGuard, include_usage: bool | None
) -> None:
    # the Guard always asks its routes for usage, and the seam sent it on as a last chunk
    # with no choices: `chunk.choices[0]` (fine against the provider) raised IndexError
    options: dict[str, Any] = {"stream": True}
    if include_usage is not None:
        options["stream_options"] = {"include_usage": include_usage}
    direct = openai.OpenAI(api_key="sk-x", base_url=fake.base_url, max_retries=0)
    expected = list(direct.chat.completions.create(model="fake-model", messages=USER, **options))
    seam = _sdk(http_client(make_guard(fake)))
    got = list(seam.chat.completions.create(model="fake-model", messages=USER, **options))
    assert _dumps(got) == _dumps(expected)
    assert [c.choices[0].delta.content for c in got] == ["", "Echo:", " hello", " there", None]
    assert all(c.usage is None for c in got)


def test_a_local_rate_limit_is_the_sdk_s_rate_limit_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # "429 for rate limits": the Guard's own limiter refusing (RateLimitExceededError) came
    # back as a 503 (openai.InternalServerError), which rate-limit handlers do not catch
    guard = make_guard(
        fake, retry=None, rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)}
    )
    seam = _sdk(http_client(guard))
    seam.chat.completions.create(model="m", messages=USER)
    with pytest.raises(openai.RateLimitError) as caught:
        seam.chat.completions.create(model="m", messages=USER)
    assert caught.value.response.headers["x-llmguard-error"] == "RateLimitExceededError"
    assert float(caught.value.response.headers["retry-after-ms"]) > 0
    assert len(fake.requests) == 1


def test_a_refusal_reaches_the_sdk_as_a_refusal() -> None:
    # OpenAI's structured-output refusal (no content, `refusal` beside it) came back as an
    # empty content and no refusal: the check openai documents (`message.refusal`) missed it
    with RawServer(http_response(REFUSAL)) as raw:
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None)
        message = _sdk(http_client(guard)).chat.completions.create(model="m", messages=USER)
        response = _sdk(http_client(guard)).responses.create(model="m", input="hi")
        guard.close()
    assert message.choices[0].message.refusal == "I cannot help with that."
    assert message.choices[0].message.content is None
    # the Responses endpoint answered an empty output_text and no refusal part
    refusal = {"type": "refusal", "refusal": "I cannot help with that."}
    output = response.output[0]
    assert isinstance(output, ResponseOutputMessage)
    assert [part.model_dump() for part in output.content] == [refusal]


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("/v1/messages", {"messages": 5}),
        ("/v1/messages", {"tools": 5}),
        ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
        (
            "/v1/messages",
            {"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]},
        ),
        ("/v1/responses", {"tools": 5}),
        ("/v1/chat/completions", {"extra_body": 5}),
        ("/v1/chat/completions", {"extra_body": "x"}),
        # a stream flag that is not a boolean was read as false: a JSON answer, not a stream
        ("/v1/chat/completions", {"stream": "true"}),
        ("/v1/responses", {"stream": 1}),
        ("/v1/messages", {"stream": "yes"}),
    ],
)
def test_a_malformed_request_is_a_400_not_a_crash(
    fake: FakeProvider, make_guard: MakeGuard, path: str, bad: dict[str, Any]
) -> None:
    # these raised TypeError / KeyError / AttributeError out of the transport, which the SDKs
    # take for a connection error (and retry)
    body = {"model": "m", "max_tokens": 10, "messages": USER, "input": "hi", **bad}
    with httpx.Client(transport=transport(make_guard(fake), library="httpx")) as client:
        answer = client.post(f"http://guard.test{path}", json=body)
    assert answer.status_code == 400
    assert answer.headers["x-llmguard-error"] == "RequestValidationError"
    assert not fake.requests


_LOGPROBS = {"content": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []}]}
_LOGPROBS_ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Hi"},
                "logprobs": _LOGPROBS,
            }
        ],
    }
).encode()


def test_logprobs_reach_the_sdk() -> None:
    # `logprobs=True` went to the provider, and its logprobs were dropped on the way back
    # (a plain answer's; a stream's chunks still carry none)
    with RawServer(http_response(_LOGPROBS_ANSWER)) as raw:
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None)
        answer = _sdk(http_client(guard)).chat.completions.create(
            model="m", messages=USER, logprobs=True
        )
        guard.close()
    assert answer.choices[0].logprobs is not None
    assert answer.choices[0].logprobs.model_dump(exclude_none=True) == _LOGPROBS


def test_a_context_overflow_carries_openai_s_code(fake: FakeProvider) -> None:
    # frameworks tell an overflow by OpenAI's code `context_length_exceeded` (pydantic-ai's
    # ModelContextWindowExceededError, LangChain's OpenAIContextOverflowError); it had none
    small = OpenAICompatibleProvider(fake.base_url, model="m", name="small", context_window=8)
    guard = Guard(small, environ={})
    with pytest.raises(openai.BadRequestError) as caught:
        _sdk(http_client(guard)).chat.completions.create(model="m", messages=USER, max_tokens=50)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.response.headers["x-llmguard-error"] == "ContextLengthExceededError"
    assert not fake.requests
    guard.close()


def _chunk_event(delta: dict[str, Any], *, logprobs: object = None, finish: Any = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return b"data: " + json.dumps({"id": "c", "model": "m", "choices": [choice]}).encode() + b"\n\n"


def _token(text: str) -> dict[str, Any]:
    return {
        "content": [
            {"token": text, "logprob": -0.5, "bytes": list(text.encode()), "top_logprobs": []}
        ]
    }


_REFUSAL_STREAM = (
    _chunk_event({"role": "assistant", "content": None, "refusal": ""})
    + _chunk_event({"refusal": "I cannot "})
    + _chunk_event({"refusal": "help with that."})
    + _chunk_event({}, finish="stop")
    + b"data: [DONE]\n\n"
)
_LOGPROBS_STREAM = (
    _chunk_event({"role": "assistant", "content": ""})
    + _chunk_event({"content": "Hi"}, logprobs=_token("Hi"))
    + _chunk_event({"content": " there"}, logprobs=_token(" there"))
    + _chunk_event({}, finish="stop")
    + b"data: [DONE]\n\n"
)


def _streamed(client: Any) -> tuple[list[str], list[Any]]:
    """The refusal deltas and the logprobs of a stream's chunks, as an openai client (or the
    look-alike GuardedClient) gives them out."""
    chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    refusals = [c.delta.refusal for c in choices if getattr(c.delta, "refusal", None)]
    logprobs = [getattr(c, "logprobs", None) for c in choices]
    return refusals, [
        p if isinstance(p, dict) else p.model_dump(exclude_none=True) for p in logprobs if p
    ]


@pytest.mark.parametrize("events", [_REFUSAL_STREAM, _LOGPROBS_STREAM], ids=["refusal", "logprobs"])
def test_streamed_refusals_and_logprobs_reach_the_sdk(events: bytes) -> None:
    # chunks carrying only a refusal delta were not emitted, and no chunk carried its
    # logprobs: the SDK saw neither; the assembled answer kept only the last chunk's logprobs
    with RawServer(sse_head(), (events,)) as raw:
        direct = openai.OpenAI(api_key="sk-x", base_url=raw.base_url, max_retries=0)
        expected = _streamed(direct)
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None)
        with guard:
            got = _streamed(_sdk(http_client(guard)))
            looked = _streamed(GuardedClient(guard))  # guard.client() without openai
            with guard.chat(USER, stream=True) as stream:
                list(stream)
    assert got == expected
    assert looked == expected  # it gave refusal pieces out as empty content, without logprobs
    assert expected[0] or expected[1]  # the provider sent what is compared
    metadata = stream.response.metadata
    assert metadata.get("refusal", "") == "".join(expected[0])
    tokens = [item for logprobs in expected[1] for item in logprobs["content"]]
    assert metadata.get("logprobs", {}).get("content", []) == tokens


def test_a_stream_cut_after_a_refusal_piece_is_not_replayed() -> None:
    # refusal pieces reach the caller now, but did not count as delivered: a stream cut after
    # one was retried, and the caller got the piece again from each attempt
    events = _chunk_event({"role": "assistant", "content": None, "refusal": "I cannot "})
    with RawServer(sse_head(), (events,)) as raw:
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={})
        pieces: list[str] = []
        with guard, pytest.raises(LLMGuardError), guard.chat(USER, stream=True) as stream:
            pieces.extend(chunk.metadata.get("refusal", "") for chunk in stream)
    assert pieces == ["I cannot "]


def _responses_streamed(client: openai.OpenAI) -> tuple[list[Any], Any]:
    """The refusal and text events of a Responses stream, and its final response."""
    events: list[Any] = list(client.responses.create(model="m", input="hi", stream=True))
    kinds = ("response.refusal.delta", "response.refusal.done", "response.output_text.delta")
    return [e for e in events if e.type in kinds], events[-1].response


@pytest.mark.parametrize("events", [_REFUSAL_STREAM, _LOGPROBS_STREAM], ids=["refusal", "logprobs"])
def test_streamed_refusals_and_logprobs_reach_the_responses_sdk(events: bytes) -> None:
    # the Responses endpoint wrote text deltas with empty logprobs and no refusal events: an
    # SDK's responses.create(stream=True) saw neither what the provider refused nor logprobs
    with RawServer(sse_head(), (events,)) as raw:
        direct = openai.OpenAI(api_key="sk-x", base_url=raw.base_url, max_retries=0)
        refusals, logprobs = _streamed(direct)
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None)
        with guard:
            got, response = _responses_streamed(_sdk(http_client(guard)))
    tokens = [item for piece in logprobs for item in piece["content"]]
    deltas = [e for e in got if e.type == "response.refusal.delta"]
    assert [e.delta for e in deltas] == refusals
    done = [e.refusal for e in got if e.type == "response.refusal.done"]
    assert done == (["".join(refusals)] if refusals else [])
    texts = [e for e in got if e.type == "response.output_text.delta"]
    assert [p.model_dump() for e in texts for p in e.logprobs] == tokens
    parts = [part.model_dump(exclude_none=True) for part in response.output[0].content]
    if refusals:
        assert parts == [{"type": "refusal", "refusal": "".join(refusals)}]
    else:
        assert parts[0]["logprobs"] == tokens


def _answered(client: Any) -> dict[str, Any]:
    choice = client.chat.completions.create(model="m", messages=USER).choices[0]
    message = choice.message
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is not None and not isinstance(logprobs, dict):
        logprobs = logprobs.model_dump(exclude_none=True)
    return {
        "content": message.content,
        "refusal": getattr(message, "refusal", None),
        "logprobs": logprobs,
    }


@pytest.mark.parametrize("body", [REFUSAL, _LOGPROBS_ANSWER], ids=["refusal", "logprobs"])
def test_the_look_alike_client_s_answers_carry_refusal_and_logprobs(body: bytes) -> None:
    # guard.client() without openai answered an empty content, no refusal and no logprobs
    with RawServer(http_response(body)) as raw:
        direct = openai.OpenAI(api_key="sk-x", base_url=raw.base_url, max_retries=0)
        expected = _answered(direct)
        guard = Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None)
        with guard:
            looked = _answered(GuardedClient(guard))
    assert expected["refusal"] or expected["logprobs"]  # the provider sent what is compared
    assert looked == expected
