"""A route's breaker around any call, as pybreaker users put one there: ``@breakers.protect``,
``breakers.call`` and ``breakers.acall``, sync and async, on functions and methods. Real
openai clients against a FakeProvider on loopback; the breakers' clock is driven, never slept.

Before: a standalone breaker needed ``permit``, ``record`` (with ``seconds=`` and ``probe=``)
and ``release`` by hand, and a forgotten ``release`` (a cancelled call, a caller's bug) held a
half-open probe permit until ``open_seconds`` had passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import openai
import pytest
from typing_extensions import assert_type

from llmguard_sdk import CircuitOpenError, ConfigurationError, ProviderUnavailableError
from llmguard_sdk.breaker import (
    BreakerPolicy,
    Breakers,
    MemoryBreakerBackend,
    RedisBreakerBackend,
)
from llmguard_sdk.retry import retry, waits_off
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, RedisTarget, redis_store

POLICY = BreakerPolicy(
    window=10, minimum_calls=4, failure_rate=0.5, open_seconds=10, half_open_permits=2
)


@pytest.fixture
def clock() -> list[float]:
    """The breakers' clock: the test moves ``clock[0]``."""
    return [0.0]


@pytest.fixture
def breakers(clock: list[float]) -> Breakers:
    return Breakers(MemoryBreakerBackend(POLICY, clock=lambda: clock[0]))


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:
        yield client


def answer(completion: Any) -> str:
    return str(completion.choices[0].message.content)


def test_a_protected_function_trips_its_routes_breaker_then_is_refused_unsent(
    fake: FakeProvider, client: openai.OpenAI, breakers: Breakers
) -> None:
    @breakers.protect("openai")
    def ask(question: str) -> str:
        completion = client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": question}],
        )
        return answer(completion)

    fake.script(*[Fault(status=503)] * 4)
    for _ in range(4):
        with pytest.raises(openai.InternalServerError):  # the provider SDK's error, unchanged
            ask("hi")
    with pytest.raises(CircuitOpenError) as refused:
        ask("hi")
    assert (refused.value.route, refused.value.state) == ("openai", "open")
    assert refused.value.retry_after == 10.0
    assert len(fake.requests) == 4  # the refused call was never sent
    assert breakers.state("other") == "closed"  # one breaker per route name
    breakers.reset("openai")
    assert assert_type(ask("hi"), str) == "Echo: hi"  # the decorated function keeps its type


def test_probes_that_pass_close_the_breaker_again(
    fake: FakeProvider, client: openai.OpenAI, breakers: Breakers, clock: list[float]
) -> None:
    def ask() -> str:
        return answer(client.chat.completions.create(model="fake-model", messages=USER))

    fake.script(*[Fault(status=503)] * 4)
    for _ in range(4):
        with pytest.raises(openai.InternalServerError):
            breakers.call("openai", ask)
    clock[0] = 11  # the open wait is over: two probes half-open, then close the breaker
    assert breakers.call("openai", ask) == "Echo: hello there"
    assert breakers.state("openai") == "half_open"
    assert breakers.call("openai", ask) == "Echo: hello there"
    assert breakers.state("openai") == "closed"


def test_a_429_pauses_the_route_for_its_retry_after(
    fake: FakeProvider, client: openai.OpenAI, breakers: Breakers
) -> None:
    fake.script(Fault(status=429, retry_after=7))
    with pytest.raises(openai.RateLimitError):
        breakers.call("openai", client.chat.completions.create, model="m", messages=USER)
    with pytest.raises(CircuitOpenError) as refused:
        breakers.call("openai", client.chat.completions.create, model="m", messages=USER)
    assert refused.value.retry_after == 7.0


@dataclass
class Driven:
    """Breakers whose clock the test moves: memory (injected clock) or Redis (offset)."""

    breakers: Breakers
    advance: Callable[[float], None]


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from driven_breakers(request.param, redis_target)


def driven_breakers(kind: str, redis_target: RedisTarget) -> Iterator[Driven]:
    """What the ``driven`` fixture yields: ``kind`` ``"memory"`` or ``"redis"``."""
    if kind == "memory":
        now = [0.0]
        backend: Any = MemoryBreakerBackend(POLICY, clock=lambda: now[0])

        def advance(seconds: float) -> None:
            now[0] += seconds

        yield Driven(Breakers(backend), advance)
        return
    store = redis_store(*redis_target(kind))
    backend = RedisBreakerBackend(store, POLICY)

    def shift(seconds: float) -> None:
        backend.clock_offset += seconds

    yield Driven(Breakers(backend), shift)
    store.close()


def trip_and_half_open(driven: Driven) -> Breakers:
    """Open the breaker of route "r", then let its open wait end: two probe permits."""

    def down() -> None:
        raise ProviderUnavailableError("down")

    breakers = driven.breakers
    for _ in range(4):
        with pytest.raises(ProviderUnavailableError):
            breakers.call("r", down)
    assert breakers.state("r") == "open"
    driven.advance(10.5)
    return breakers


def test_a_callers_own_bug_is_not_counted_and_gives_its_permit_back(driven: Driven) -> None:
    """A ValueError says nothing about the route: not recorded, however many; in half-open
    it gives back the probe permit it took (or the route had one probe fewer)."""

    def buggy() -> None:
        raise ValueError("a bug of the caller's")

    for _ in range(10):
        with pytest.raises(ValueError, match="caller"):
            driven.breakers.call("r", buggy)
    assert driven.breakers.state("r") == "closed"
    breakers = trip_and_half_open(driven)
    for _ in range(3):  # more than the two probe permits: each was given back
        with pytest.raises(ValueError, match="caller"):
            breakers.call("r", buggy)
    assert [breakers.permit("r").allowed for _ in range(3)] == [True, True, False]


def test_a_cancelled_async_call_gives_its_probe_permit_back(
    fake: FakeProvider, driven: Driven
) -> None:
    """An openai request to a provider that hangs, cancelled by its caller's scope: its
    probe permit comes back (it was held until ``open_seconds`` passed)."""
    breakers = trip_and_half_open(driven)
    fake.script(Fault(hang=True))

    async def main() -> None:
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0
        ) as client:
            with anyio.move_on_after(0.5) as scope:
                await breakers.acall("r", client.chat.completions.create, model="m", messages=USER)
            assert scope.cancelled_caught

    anyio.run(main)
    assert len(fake.requests) == 1
    assert [breakers.permit("r").allowed for _ in range(3)] == [True, True, False]


def test_an_interrupted_sync_call_gives_its_probe_permit_back(driven: Driven) -> None:
    breakers = trip_and_half_open(driven)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        breakers.call("r", interrupted)
    assert [breakers.permit("r").allowed for _ in range(3)] == [True, True, False]


def test_async_functions_methods_and_openai_async_methods_are_protected(
    fake: FakeProvider, breakers: Breakers
) -> None:
    class Assistant:
        def __init__(self, client: openai.AsyncOpenAI) -> None:
            self.client = client

        @breakers.protect("openai")
        async def ask(self) -> str:
            return answer(await self.client.chat.completions.create(model="m", messages=USER))

        @breakers.protect("openai")
        @staticmethod
        async def shout(text: str) -> str:
            return text.upper()

        @breakers.protect("openai")
        @classmethod
        def name(cls) -> str:
            return cls.__name__

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0
        ) as client:
            assistant = Assistant(client)
            create = breakers.protect("openai")(client.chat.completions.create)
            fake.script(*[Fault(status=503)] * 4)
            for _ in range(2):
                with pytest.raises(openai.InternalServerError):
                    await assistant.ask()
                with pytest.raises(openai.InternalServerError):
                    await create(model="m", messages=USER)  # a plain function: awaited too
            with pytest.raises(CircuitOpenError):
                await assistant.shout("refused")
            with pytest.raises(CircuitOpenError):
                Assistant.name()
            breakers.reset("openai")
            shouted = await assistant.shout("hi")
            assert_type(shouted, str)
            called = await breakers.acall("openai", assistant.ask)
            assert_type(called, str)
            return [shouted, called, assistant.name()]

    assert anyio.run(main) == ["HI", "Echo: hello there", "Assistant"]
    assert len(fake.requests) == 5


def test_call_keeps_the_types_of_the_function_it_calls(breakers: Breakers) -> None:
    def double(x: int, *, times: int = 2) -> str:
        return str(x * times)

    result = breakers.call("r", double, 2, times=3)
    assert_type(result, str)
    assert result == "6"


def test_retry_above_a_protected_call_does_not_retry_a_refusal(
    fake: FakeProvider, client: openai.OpenAI, breakers: Breakers
) -> None:
    """``@retry`` outside, the breaker inside: each attempt asks the breaker; once it is
    open, the refusal ends the retries (``CircuitOpenError`` is not retryable)."""
    attempts: list[int] = []

    @retry(attempts=10)
    @breakers.protect("openai")
    def ask() -> str:
        attempts.append(1)
        return answer(client.chat.completions.create(model="m", messages=USER))

    fake.always(Fault(status=503))
    with waits_off(), pytest.raises(CircuitOpenError):
        ask()
    assert len(attempts) == 4  # the fifth attempt was refused unsent


def test_what_cannot_be_protected_is_refused_at_once(breakers: Breakers) -> None:
    def numbers() -> Iterator[int]:
        yield 1

    async def later() -> int:
        return 1

    with pytest.raises(ConfigurationError, match=r"generator .* @breakers.protect"):
        breakers.call("r", numbers)  # (its call returns it unread: protect watches it read)
    with pytest.raises(ConfigurationError, match=r"breakers.call\('r'\) takes a function"):
        breakers.call("r", 5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="acall"):
        breakers.call("r", later)  # type: ignore[unused-coroutine]
    with pytest.raises(ConfigurationError, match="route"):
        breakers.protect("")
    with pytest.raises(ConfigurationError, match="route"):
        breakers.call(5, lambda: 1)  # type: ignore[arg-type]
    assert [breakers.permit("r").allowed for _ in range(3)] == [True] * 3  # none held
