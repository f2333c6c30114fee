"""An async generator wrapped by a decorator (``@retry``, ``@breakers.protect``) and dropped
in a reference cycle is closed once, by its wrapper: the event loop, which finalizes every
async generator it saw start, closes the wrapper only (it closed the user's generator too, in
a task that failed with "aclose(): asynchronous generator is already running" while the
wrapper was closing it)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from llmguard_sdk.breaker import BreakerPolicy, Breakers, MemoryBreakerBackend
from llmguard_sdk.retry import retry


def _words(closed: list[str]) -> Any:
    async def words() -> AsyncIterator[str]:
        try:
            for word in ("one", "two", "three"):
                yield word
        finally:
            await anyio.sleep(0.01)  # (a close that awaits: a connection given back)
            closed.append("words")

    return words


def _decorated(how: str, closed: list[str]) -> Any:
    if how == "retry":
        return retry(_words(closed), attempts=2)
    return Breakers(MemoryBreakerBackend(BreakerPolicy())).protect("words")(_words(closed))


@pytest.mark.parametrize("how", ["retry", "protect"])
def test_a_decorated_async_generator_collected_in_a_cycle_is_closed_once(how: str) -> None:
    loop_errors: list[Any] = []
    closed: list[str] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, c: loop_errors.append(c))
        items = _decorated(how, closed)()
        assert await items.__anext__() == "one"
        cycle: list[Any] = [items]
        cycle.append(cycle)
        del items, cycle
        gc.collect()
        for _ in range(20):
            await asyncio.sleep(0.005)

    # Earlier tests' garbage is collected first, with no loop running: collected in the
    # scenario, an async Redis client left on a loop now closed reports itself to this
    # loop's handler ("Unclosed RedisCluster client"), which is not this test's subject.
    gc.collect()
    anyio.run(scenario, backend="asyncio")
    assert [context.get("exception") or context["message"] for context in loop_errors] == []
    assert closed == ["words"]
