"""A generator function under ``@retry`` or ``@breakers.protect`` gets what its consumer sends
or throws in (``send``/``throw``, ``asend``/``athrow``), as with ``yield from``: the wrapper
is transparent. Before: a sent value reached the generator as ``None`` and a thrown exception
ended the wrapper without the generator seeing it (its ``except`` never ran)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

import anyio
import pytest

from llmguard_sdk.breaker import Breakers, MemoryBreakerBackend
from llmguard_sdk.retry import retry

from .test_breaker_protect import POLICY


class Nudge(Exception):
    """What the consumer throws in."""


def _retry() -> Callable[[Any], Any]:
    return retry(attempts=2)


def _protect() -> Callable[[Any], Any]:
    return Breakers(MemoryBreakerBackend(POLICY)).protect("r")


Wrap = Callable[[], Callable[[Any], Any]]
"""A decorator's maker: a fresh ``@retry`` or ``@breakers.protect`` per test."""

WRAPPERS = pytest.mark.parametrize("wrap", [_retry, _protect], ids=["retry", "protect"])


@WRAPPERS
def test_sent_values_and_thrown_exceptions_reach_the_generator(wrap: Wrap) -> None:
    seen: list[object] = []

    @wrap()
    def echo() -> Generator[str, object, str]:
        said: object = None
        while True:
            try:
                said = yield f"got {said}"
            except Nudge as nudge:
                seen.append(nudge)
                said = "nudged"
            if said == "stop":
                return "stopped"
            seen.append(said)

    stream = echo()
    assert next(stream) == "got None"
    assert stream.send("a") == "got a"
    nudge = Nudge()
    assert stream.throw(nudge) == "got nudged"
    with pytest.raises(StopIteration) as info:
        stream.send("stop")
    assert info.value.value == "stopped"
    assert seen == ["a", nudge, "nudged"]


@WRAPPERS
def test_an_exception_the_generator_does_not_catch_ends_it_with_that_exception(wrap: Wrap) -> None:
    cleaned: list[bool] = []

    @wrap()
    def items() -> Generator[int, None, None]:
        try:
            yield 1
            yield 2
        finally:
            cleaned.append(True)

    stream = items()
    assert next(stream) == 1
    with pytest.raises(Nudge):
        stream.throw(Nudge())
    assert cleaned == [True]


@WRAPPERS
def test_async_sent_values_and_thrown_exceptions_reach_the_generator(wrap: Wrap) -> None:
    seen: list[object] = []

    @wrap()
    async def echo() -> AsyncGenerator[str, object]:
        said: object = None
        while True:
            try:
                said = yield f"got {said}"
            except Nudge as nudge:
                seen.append(nudge)
                said = "nudged"
            seen.append(said)

    async def run() -> list[str]:
        stream = echo()
        answers = [await stream.__anext__(), await stream.asend("a")]
        answers.append(await stream.athrow(Nudge()))
        await stream.aclose()
        return answers

    assert anyio.run(run) == ["got None", "got a", "got nudged"]
    assert seen[::2] == ["a", "nudged"]
    assert isinstance(seen[1], Nudge)
