"""``@retry`` over a generator function, sync or async: as ``@guard.protect`` wraps one, an
attempt that fails before its first item is retried, one that fails after it propagates
unretried (the consumer has part of the stream; a retry would hand it the same items again).
The sync stream over an openai client: tests/test_retry_streams.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

import anyio
import httpx
import pytest

from llmguard_sdk.context import RetryDetails
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.retry import retry, waits_off
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

ANSWER = "Echo: hello there"


@pytest.fixture(autouse=True)
def _no_waits() -> Iterator[None]:
    with waits_off():
        yield


def test_a_consumer_that_stops_early_closes_the_generator(fake: FakeProvider) -> None:
    """Its ``finally`` runs when the consumer closes the wrapper (no retry, no error)."""
    closed: list[bool] = []

    @retry(attempts=3)
    def numbers() -> Generator[int, None, None]:
        try:
            yield from range(10)
        finally:
            closed.append(True)

    stream = numbers()
    assert next(stream) == 0
    stream.close()
    assert closed == [True]


def test_the_generator_s_return_value_is_kept() -> None:
    @retry(attempts=2)
    def counted() -> Any:
        yield 1
        return "done"

    def outer() -> Any:
        said = yield from counted()
        return said

    items = outer()
    assert next(items) == 1
    with pytest.raises(StopIteration) as info:
        next(items)
    assert info.value.value == "done"


def test_an_async_generator_is_retried_only_before_its_first_item(fake: FakeProvider) -> None:
    fake.script(Fault(status=503), Fault(cut_stream_after=1))
    body = {"model": "m", "messages": USER, "stream": True}
    gave_up: list[RetryDetails] = []

    async def main() -> list[str]:
        got: list[str] = []
        async with httpx.AsyncClient(base_url=fake.base_url) as client:

            @retry(attempts=3, on=Exception, give_up_hooks=[gave_up.append])
            async def lines() -> AsyncIterator[str]:
                async with client.stream("POST", "/chat/completions", json=body) as answer:
                    answer.raise_for_status()
                    async for line in answer.aiter_lines():
                        if line.startswith("data: {"):
                            yield line

            async def consume() -> None:
                async for line in lines():
                    got.append(line)

            with pytest.raises(httpx.RemoteProtocolError):
                await consume()
        return got

    got = anyio.run(main)
    assert fake.stats.requests == 2  # the 503 retried; the cut after a line was not
    assert 1 <= len(got) <= 2  # the role chunk and the one content chunk before the cut
    assert [(d.reason, d.attempt) for d in gave_up] == [("stream-delivered", 2)]


def test_an_async_generator_closed_early_closes_the_function_s(fake: FakeProvider) -> None:
    closed: list[bool] = []

    @retry(attempts=3)
    async def numbers() -> AsyncGenerator[int, None]:
        try:
            for number in range(10):
                yield number
        finally:
            closed.append(True)

    async def main() -> int:
        stream = numbers()
        first = await stream.__anext__()
        await stream.aclose()
        return first

    assert anyio.run(main) == 0
    assert closed == [True]


def test_a_result_predicate_over_a_generator_is_a_configuration_error() -> None:
    """``on_result`` judges what a function returns; a generator's items are the consumer's
    already, so no result of it can be asked for again."""

    def numbers() -> Iterator[int]:
        yield 1

    with pytest.raises(ConfigurationError, match="on_result= judges"):
        retry(numbers, on_result=lambda result: result is None)
