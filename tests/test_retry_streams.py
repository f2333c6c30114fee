"""``retry_context`` inside a generator that yields chunks, and ``@retry`` over a generator
function: as the Guard's own streams, a failure before the first chunk is retried, one after
it never is (the consumer already has part of the stream; a retry would hand it the same
chunks again)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import httpx
import openai
import pytest

from llmguard_sdk.context import RetryDetails
from llmguard_sdk.retry import retry, retry_context, waits_off
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

ANSWER = "Echo: hello there"


@pytest.fixture(autouse=True)
def _no_waits() -> Iterator[None]:
    with waits_off():
        yield


def _words(client: openai.OpenAI, gave_up: list[RetryDetails]) -> Iterator[str]:
    for attempt in retry_context(attempts=3, give_up_hooks=[gave_up.append]):
        with attempt:
            stream = client.chat.completions.create(model="m", messages=USER, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield attempt.deliver(chunk.choices[0].delta.content)


def _decorated_words(client: openai.OpenAI, gave_up: list[RetryDetails]) -> Iterator[str]:
    """:func:`_words` as ``@retry`` over a generator function (no ``deliver``: each item it
    yields is delivered)."""

    @retry(attempts=3, give_up_hooks=[gave_up.append])
    def words() -> Iterator[str]:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    return words()


WAYS = [_words, _decorated_words]


@pytest.mark.parametrize("words", WAYS)
def test_a_stream_cut_after_chunks_were_yielded_is_not_retried(
    fake: FakeProvider, words: Callable[[openai.OpenAI, list[RetryDetails]], Iterator[str]]
) -> None:
    """It was retried: the consumer got the first chunks, then the whole answer again
    (``@retry`` refused a generator function: it could not be retried at all)."""
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    fake.script(Fault(cut_stream_after=2))
    seen: list[str] = []
    gave_up: list[RetryDetails] = []
    with pytest.raises(openai.APIConnectionError) as info:
        seen.extend(words(client, gave_up))
    assert fake.stats.requests == 1
    assert len(seen) == 2
    assert ANSWER.startswith("".join(seen))
    assert any("delivered" in note for note in getattr(info.value, "__notes__", []))
    assert [(d.reason, d.attempt) for d in gave_up] == [("stream-delivered", 1)]
    client.close()


@pytest.mark.parametrize("words", WAYS)
def test_a_stream_cut_before_its_first_chunk_is_retried_and_delivered_once(
    fake: FakeProvider, words: Callable[[openai.OpenAI, list[RetryDetails]], Iterator[str]]
) -> None:
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    fake.script(Fault(cut_stream_after=0), Fault(status=503))
    assert "".join(words(client, [])) == ANSWER
    assert fake.stats.requests == 3
    client.close()


def test_an_async_generator_stops_retrying_once_it_delivered(fake: FakeProvider) -> None:
    """The same rule in ``async for``; each chunk is a line of the raw SSE stream."""
    fake.script(Fault(cut_stream_after=1), Fault(cut_stream_after=3))
    body = {"model": "m", "messages": USER, "stream": True}

    async def lines(client: httpx.AsyncClient) -> AsyncIterator[str]:
        async for attempt in retry_context(attempts=3, on=Exception):
            with attempt:
                async with client.stream("POST", "/chat/completions", json=body) as answer:
                    async for line in answer.aiter_lines():
                        if line.startswith("data: {"):
                            yield attempt.deliver(line)

    async def main() -> list[str]:
        got: list[str] = []

        async def consume(client: httpx.AsyncClient) -> None:
            async for line in lines(client):
                got.append(line)

        async with httpx.AsyncClient(base_url=fake.base_url) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await consume(client)
        return got

    got = anyio.run(main)
    assert fake.stats.requests == 1
    assert 1 <= len(got) <= 2  # the role chunk and the one content chunk before the cut


def test_delivering_is_only_for_the_attempt_that_delivered() -> None:
    """A failure in an attempt that delivered nothing is retried as ever, even when an
    earlier loop of the same ``retry_context`` delivered."""
    loop = retry_context(attempts=3, on=ValueError)
    calls = 0
    for attempt in loop:
        with attempt:
            assert attempt.deliver("x") == "x"
    for attempt in loop:
        with attempt:
            calls += 1
            if calls == 1:
                raise ValueError("before any chunk")
    assert calls == 2
