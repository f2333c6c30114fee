"""An async generator function decorated with ``@retry`` or ``@breakers.protect`` (or both),
read part-way and left unclosed as ``asyncio.run()``'s main task returns, is closed whole.

The loop closes it in a task of its own, which the run's shutdown cancels before it starts;
on CPython before 3.13 the cancellation is thrown in where the generator waits for its reader
and a second ``GeneratorExit`` then at its first await. The decorators passed the
cancellation on to the function's generator, which met that ``GeneratorExit`` in its own
cleanup (cut short at its first await); stacked, the shutdown logged "aclose(): asynchronous
generator is already running"; and met in the breaker's shielded give-back (a Redis round
trip), it cut that short (the permit left out if it had not been sent yet): a shield does not
keep a ``GeneratorExit`` out. Trio was not affected. As the Guard's
streams do (tests/test_stream_dropped.py), the decorators take that ``GeneratorExit`` first."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from llmguard_sdk.breaker import Breakers
from llmguard_sdk.retry import retry

from .conftest import RedisTarget
from .test_breaker_protect import Driven, driven_breakers, trip_and_half_open
from .test_stream_dropped import logged_running


@pytest.fixture(params=["memory", "redis"])
def driven(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Driven]:
    yield from driven_breakers(request.param, redis_target)


def _protect(breakers: Breakers) -> Callable[[Any], Any]:
    return breakers.protect("r")


def _retry(breakers: Breakers) -> Callable[[Any], Any]:
    return retry(attempts=2)


def _retry_over_protect(breakers: Breakers) -> Callable[[Any], Any]:
    return lambda fn: retry(attempts=2)(breakers.protect("r")(fn))


def _protect_over_retry(breakers: Breakers) -> Callable[[Any], Any]:
    return lambda fn: breakers.protect("r")(retry(attempts=2)(fn))


DECORATORS = [_protect, _retry, _retry_over_protect, _protect_over_retry]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("decorate", DECORATORS, ids=lambda d: d.__name__.strip("_"))
def test_a_decorated_async_generator_abandoned_as_its_loop_ends_is_closed_whole(
    driven: Driven,
    decorate: Callable[[Breakers], Callable[[Any], Any]],
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if backend == "trio":
        pytest.importorskip("trio")
    breakers = trip_and_half_open(driven)  # two probe permits
    cleaned: list[str] = []

    @decorate(breakers)
    async def numbers() -> AsyncIterator[int]:
        try:
            for number in range(100):
                await anyio.sleep(0.01)
                yield number
        finally:
            cleaned.append("began")
            with anyio.CancelScope(shield=True):  # (as a stream's close awaits)
                await anyio.lowlevel.checkpoint()
            cleaned.append("ended")

    async def abandon() -> None:
        stream = numbers()
        assert await stream.__anext__() == 0  # ... and it is left unclosed as the run ends

    assert logged_running(abandon, backend, caplog) == []
    assert cleaned == ["began", "ended"]
    # its probe permit given back, no outcome recorded (closed by the loop): two probes
    assert [breakers.permit("r").allowed for _ in range(3)] == [True, True, False]
    assert breakers.state("r") == "half_open"
