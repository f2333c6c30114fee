"""``@breakers.protect`` over a generator function, sync or async, as ``@retry`` and
``@guard.protect`` wrap one: the permit is asked when the consumer asks for the first item
(a refusal raises before the function runs), the outcome recorded when the generator ends.
Exhausted: a success; failed: as the breaker classifies the error; closed early by its
consumer (or cancelled): no outcome, the permit given back.

Before: ``breakers.protect`` refused every generator function with a ``ConfigurationError``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import CircuitOpenError, ProviderUnavailableError
from llmguard_sdk.breaker import Breakers
from llmguard_sdk.retry import retry, waits_off
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, RedisTarget
from .test_breaker_protect import Driven, driven_breakers, trip_and_half_open

ANSWER = "Echo: hello there"


def openai_words(breakers: Breakers, client: openai.OpenAI, ran: list[int]) -> Any:
    """A protected generator of the words of an openai stream; ``ran`` counts its runs."""

    @breakers.protect("openai")
    def words() -> Iterator[str]:
        ran.append(1)
        with client.chat.completions.create(model="m", messages=USER, stream=True) as stream:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content

    return words


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from driven_breakers(request.param, redis_target)


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:
        yield client


def test_a_protected_stream_trips_its_breaker_then_is_refused_before_it_runs(
    fake: FakeProvider, client: openai.OpenAI, driven: Driven
) -> None:
    ran: list[int] = []
    words = openai_words(driven.breakers, client, ran)
    fake.script(*[Fault(status=503)] * 4)
    for _ in range(4):
        with pytest.raises(openai.InternalServerError):  # the provider SDK's error, unchanged
            list(words())
    assert driven.breakers.state("openai") == "open"
    stream = words()  # nothing asked yet: a generator runs when it is read
    with pytest.raises(CircuitOpenError) as refused:
        next(stream)
    assert (refused.value.route, refused.value.state) == ("openai", "open")
    assert (len(ran), len(fake.requests)) == (4, 4)  # the refused stream never ran
    driven.breakers.reset("openai")
    assert "".join(words()) == ANSWER


def test_a_stream_cut_after_its_first_items_counts_as_a_failure(
    fake: FakeProvider, client: openai.OpenAI, driven: Driven
) -> None:
    words = openai_words(driven.breakers, client, [])
    fake.always(Fault(cut_stream_after=1))
    for _ in range(4):
        seen: list[str] = []
        with pytest.raises(openai.APIConnectionError):
            seen.extend(words())
        assert seen  # the consumer had part of it
        assert ANSWER.startswith("".join(seen))
    assert driven.breakers.state("openai") == "open"


def numbers_for(breakers: Breakers, closed: list[bool]) -> Any:
    """A protected generator of 0, 1, 2 (``fail``: a bug of the caller's after the first);
    ``closed`` notes each run's ``finally``."""

    @breakers.protect("r")
    def numbers(fail: bool = False) -> Generator[int, None, str]:
        try:
            for number in range(3):
                yield number
                if fail:
                    raise ValueError("a bug of the caller's")
        finally:
            closed.append(True)
        return "done"

    return numbers


def test_a_stream_closed_early_is_no_failure_and_gives_its_probe_back(driven: Driven) -> None:
    """Three streams closed after one item, in a half-open breaker with two probe permits:
    none is refused (each gave its probe back), none reopened it."""
    breakers = trip_and_half_open(driven)
    closed: list[bool] = []
    numbers = numbers_for(breakers, closed)
    for _ in range(3):
        stream = numbers()
        assert next(stream) == 0
        stream.close()
    assert closed == [True] * 3  # the function's own generator was closed too
    assert breakers.state("r") == "half_open"
    assert [breakers.permit("r").allowed for _ in range(3)] == [True, True, False]


def test_a_callers_bug_in_a_stream_only_gives_its_probe_back(driven: Driven) -> None:
    breakers = trip_and_half_open(driven)
    numbers = numbers_for(breakers, [])
    for _ in range(3):
        with pytest.raises(ValueError, match="caller"):
            list(numbers(fail=True))
    assert breakers.state("r") == "half_open"
    assert [breakers.permit("r").allowed for _ in range(3)] == [True, True, False]


def test_streams_read_to_their_end_are_successes_and_keep_their_return_value(
    driven: Driven,
) -> None:
    breakers = trip_and_half_open(driven)
    numbers = numbers_for(breakers, [])

    def outer() -> Iterator[int]:
        said = yield from numbers()
        assert said == "done"

    assert list(outer()) == [0, 1, 2]
    assert breakers.state("r") == "half_open"
    assert list(numbers()) == [0, 1, 2]  # the second probe that passed closes it
    assert breakers.state("r") == "closed"


def test_an_async_stream_is_watched_as_a_sync_one(driven: Driven) -> None:
    """Refused before it runs; a provider failure after an item counts; closed early or
    cancelled, its probe comes back; read to its end, a success."""
    breakers, ran = driven.breakers, []

    @breakers.protect("r")
    async def numbers(fail: bool = False, hang: bool = False) -> AsyncGenerator[int, None]:
        ran.append(1)
        for number in range(3):
            yield number
            if fail:
                raise ProviderUnavailableError("cut mid-stream")
            if hang:
                await anyio.sleep_forever()

    async def main() -> None:
        for _ in range(4):
            stream = numbers(fail=True)
            assert await stream.__anext__() == 0
            with pytest.raises(ProviderUnavailableError):
                await stream.__anext__()
        assert breakers.state("r") == "open"
        with pytest.raises(CircuitOpenError):
            await numbers().__anext__()
        assert len(ran) == 4
        driven.advance(10.5)  # half-open: two probe permits
        for _ in range(2):
            stream = numbers()
            assert await stream.__anext__() == 0
            await stream.aclose()  # closed early: its probe given back
        with anyio.CancelScope() as scope:
            async for _ in numbers(hang=True):
                scope.cancel()  # cancelled while it waits for its next item
        assert scope.cancelled_caught
        assert breakers.state("r") == "half_open"
        for _ in range(2):
            assert [n async for n in numbers()] == [0, 1, 2]
        assert breakers.state("r") == "closed"

    anyio.run(main)


def test_generator_methods_are_protected(driven: Driven) -> None:
    breakers = driven.breakers

    class Counter:
        @breakers.protect("r")
        def up(self, to: int) -> Iterator[int]:
            yield from range(to)

        @breakers.protect("r")
        @staticmethod
        async def down(start: int) -> AsyncIterator[int]:
            for number in range(start, 0, -1):
                yield number

    async def main() -> list[int]:
        return [n async for n in Counter().down(3)]

    assert list(Counter().up(3)) == [0, 1, 2]
    assert anyio.run(main) == [3, 2, 1]
    breakers.isolate("r")
    with pytest.raises(CircuitOpenError):
        next(Counter().up(3))


def test_retry_above_a_protected_stream_stops_at_the_refusal(
    fake: FakeProvider, client: openai.OpenAI, driven: Driven
) -> None:
    """``@retry`` outside, the breaker inside, over a generator: each attempt asks the
    breaker before its first item; the refusal once it opened ends the retries."""
    ran: list[int] = []
    words = retry(openai_words(driven.breakers, client, ran), attempts=10)
    fake.always(Fault(status=503))
    with waits_off(), pytest.raises(CircuitOpenError):
        list(words())
    assert len(ran) == 4  # the fifth attempt was refused before it ran
