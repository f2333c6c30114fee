"""``@guard.protect`` on generators: a streaming function is guarded while it is iterated."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from llmguard_sdk import CallEvent, Guard, ProviderTimeoutError, RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

FAST = RetryPolicy(attempts=3, base=0.01, cap=0.05)
USAGE: Any = {"include_usage": True}


@pytest.mark.anyio
async def test_an_async_generator_is_reported_when_its_stream_ends(fake: FakeProvider) -> None:
    # the wrapper was a plain function returning the generator: the call was reported "ok"
    # before a token came (no usage, no latency), and the wrapper was no async generator
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(feature="chat")
    async def answer(question: str) -> AsyncIterator[Any]:
        """Stream the answer's chunks."""
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": question}]
        stream = await client.chat.completions.create(
            model="gpt-test", messages=messages, stream=True, stream_options=USAGE
        )
        async for chunk in stream:
            yield chunk

    assert inspect.isasyncgenfunction(answer)
    assert answer.__doc__ == "Stream the answer's chunks."
    chunks = [chunk async for chunk in answer("what is up")]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: what is up"
    )
    assert len(events) == 1
    event = events[0]
    assert (event.kind, event.outcome, event.scope.feature) == ("protect", "ok", "chat")
    assert event.usage is not None
    assert event.usage.output_tokens == chunks[-1].usage.completion_tokens
    assert event.model == "gpt-test"
    await client.close()


def protected_texts(guard: Guard, client: openai.OpenAI) -> Callable[[], Iterator[str]]:
    """A protected generator of the texts of a streamed answer to :data:`USER`."""

    @guard.protect
    def answer() -> Iterator[str]:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        for chunk in stream:
            yield chunk.choices[0].delta.content or ""

    return answer


def test_a_generator_failing_before_its_first_item_is_retried(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], retry=FAST, environ={})
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    answer = protected_texts(guard, client)
    fake.script(Fault(status=503))
    assert "".join(answer()) == "Echo: hello there"
    assert len(fake.requests) == 2
    assert [(e.outcome, e.attempts) for e in events] == [("ok", 2)]
    client.close()


def test_a_generator_failing_mid_stream_is_reported_not_retried(fake: FakeProvider) -> None:
    # text already went to the caller: another attempt would repeat it
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], retry=FAST, environ={})
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    answer = protected_texts(guard, client)
    fake.script(Fault(cut_stream_after=2))
    pieces: list[str] = []
    with pytest.raises(openai.APIError):
        pieces.extend(answer())
    assert pieces
    assert len(fake.requests) == 1
    assert [(e.outcome, e.attempts) for e in events] == [("error", 1)]
    assert events[0].error is not None
    client.close()


def test_a_generator_closed_early_is_reported_cancelled() -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def count() -> Generator[int, None, None]:
        yield from range(10)

    numbers = count()
    assert next(numbers) == 0
    assert events == []  # nothing is reported while the caller reads
    numbers.close()
    assert [(e.outcome, e.error) for e in events] == [("cancelled", None)]


@pytest.mark.anyio
async def test_an_async_generator_is_bounded_by_the_timeout(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(timeout=1.0)
    async def answer() -> AsyncIterator[str]:
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        async for chunk in stream:
            yield chunk.choices[0].delta.content or ""

    fake.script(Fault(first_token_delay=30))
    with pytest.raises(ProviderTimeoutError):
        async for _piece in answer():
            pass
    assert [e.outcome for e in events] == ["error"]
    assert isinstance(events[0].error, ProviderTimeoutError)
    await client.close()


def test_an_async_generator_closed_early_is_reported_cancelled() -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    async def count() -> AsyncGenerator[int, None]:
        for number in range(10):
            yield number

    async def run() -> int:
        numbers = count()
        first = await numbers.__anext__()
        await numbers.aclose()
        return first

    assert anyio.run(run) == 0
    assert [(e.outcome, e.error) for e in events] == [("cancelled", None)]
