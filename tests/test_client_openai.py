"""``guard.client()`` with openai installed: openai's own client, objects and helpers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from llmguard_sdk import (
    Guard,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RequestValidationError,
    StreamInterruptedError,
)
from llmguard_sdk.client import _async_openai_client, _openai_client
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

MakeGuard = Callable[..., Guard]


def test_completions_are_openais_own_objects(fake: FakeProvider, make_guard: MakeGuard) -> None:
    client = _openai_client(make_guard(fake))
    assert isinstance(client, openai.OpenAI)
    completion = client.chat.completions.create(model="m", messages=USER, max_tokens=20)
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == "Echo: hello there"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 6
    assert completion.llmguard.route == "primary"  # type: ignore[attr-defined]
    assert "llmguard" not in completion.model_dump()


def test_stream_chunks_are_openais_own(fake: FakeProvider, make_guard: MakeGuard) -> None:
    client = _openai_client(make_guard(fake))
    with client.chat.completions.create(model="m", messages=USER, stream=True) as stream:
        chunks = list(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    # openai's own example, `chunk.choices[0]` on every chunk, works: usage comes (in a last
    # chunk without choices) only when asked for, as from the provider
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Echo: hello there"
    options: dict[str, Any] = {"stream_options": {"include_usage": True}}
    with client.chat.completions.create(model="m", messages=USER, stream=True, **options) as stream:
        chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3


def test_helpers_frameworks_use(fake: FakeProvider, make_guard: MakeGuard) -> None:
    client = _openai_client(make_guard(fake))
    raw = client.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert raw.headers["x-llmguard-route"] == "primary"
    assert raw.parse().choices[0].message.content == "Echo: hello there"
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=USER, stream=True
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    assert text == "Echo: hello there"
    assert [m.id for m in client.models.list()] == ["fake-model"]


def test_guard_errors_reach_the_caller_unchanged(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, retry=None)
    client = _openai_client(guard)
    with pytest.raises(RequestValidationError, match="n must be 1"):
        client.chat.completions.create(model="m", messages=USER, n=2)
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        client.chat.completions.create(model="m", messages=USER)
    assert len(fake.requests) == 1  # the SDK's retries are off: one loop, the Guard's


def test_a_broken_stream_s_error_reaches_the_caller_unchanged(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # a stream that broke after its first chunk raised openai.APIError (the seam's error
    # event), not the Guard's StreamInterruptedError with the text delivered so far
    guard = make_guard(fake, retry=None)
    fake.always(Fault(cut_stream_after=2))
    pieces: list[str] = []
    stream = _openai_client(guard).chat.completions.create(model="m", messages=USER, stream=True)
    with pytest.raises(StreamInterruptedError) as caught:
        pieces.extend(c.choices[0].delta.content or "" for c in stream)
    assert "".join(pieces) == caught.value.partial_text == "Echo: hello"

    async def run() -> str:
        client = _async_openai_client(guard)
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        with pytest.raises(StreamInterruptedError) as caught:
            async for _chunk in stream:
                pass
        return caught.value.partial_text

    assert anyio.run(run) == "Echo: hello"


def test_async_client_is_openais(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)

    async def run() -> tuple[str | None, str]:
        client = _async_openai_client(guard)
        assert isinstance(client, openai.AsyncOpenAI)
        completion = await client.chat.completions.create(model="m", messages=USER)
        assert completion.llmguard.route == "primary"  # type: ignore[attr-defined]
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        await guard.aclose()
        return completion.choices[0].message.content, "".join(pieces)

    assert anyio.run(run) == ("Echo: hello there", "Echo: hello there")


def test_without_openai_the_look_alike_serves() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["openai"] = None  # as if it were not installed
        from llmguard_sdk import Guard, OpenAICompatibleProvider
        from llmguard_sdk.client import ChatCompletion
        from llmguard_sdk.testing import FakeProvider

        with FakeProvider() as fake:
            guard = Guard(OpenAICompatibleProvider(fake.base_url), environ={})
            completion = guard.client().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert isinstance(completion, ChatCompletion), type(completion)
            print(completion.choices[0].message.content)
            guard.close()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Echo: hi"


def test_a_per_call_timeout_bounds_the_guarded_call(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    client = _openai_client(make_guard(fake, retry=None))
    assert client.timeout is None  # the client has no timeout of its own: the Guard's applies
    fake.always(Fault(latency=3.0))
    with pytest.raises(ProviderTimeoutError):
        client.chat.completions.create(model="m", messages=USER, timeout=0.3)


def test_the_guard_s_own_methods(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)
    completion = guard.client().chat.completions.create(model="m", messages=USER)
    assert isinstance(completion, ChatCompletion)
    assert isinstance(guard.aclient(), openai.AsyncOpenAI)
    seam = openai.OpenAI(
        api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=guard.http_client()
    )
    assert seam.chat.completions.create(model="m", messages=USER).choices[0].message.content == (
        "Echo: hello there"
    )
    assert type(guard.async_http_client(library="httpx")).__module__.startswith("httpx")


def test_with_options_keeps_the_guard(fake: FakeProvider, make_guard: MakeGuard) -> None:
    # openai's with_options() / copy() build a new client of the same class with openai's
    # keywords: GuardedOpenAI(guard) took none (TypeError), so the idiom our own
    # RetryMultiplicationWarning advises, `client.with_options(max_retries=0)`, failed
    guard = make_guard(fake)
    client = _openai_client(guard).with_options(timeout=5.0, max_retries=0)
    assert client.guard is guard
    completion = client.chat.completions.create(model="m", messages=USER)
    assert completion.llmguard.route == "primary"
    assert _openai_client(guard).copy().models.list().data[0].id == "fake-model"

    async def run() -> str | None:
        aclient = _async_openai_client(guard).with_options(timeout=5.0)
        try:
            assert aclient.guard is guard
            answer = await aclient.chat.completions.create(model="m", messages=USER)
            content: str | None = answer.choices[0].message.content
            return content
        finally:  # the client, then the Guard's async side (its connections in this loop)
            await aclient.close()
            await guard.aclose()

    assert anyio.run(run) == "Echo: hello there"
