"""What the response cache does with identical calls at once (as the README says): each goes
to a route, no request coalescing; every answer is stored and the next call is a hit."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from llmguard_sdk import ChatResponse, Guard
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.testing import FakeProvider, Fault

QUESTION = [{"role": "user", "content": "What is a circuit breaker?"}]


def test_identical_calls_at_once_each_reach_the_provider(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    cache = ResponseCache()
    guard = make_guard(fake, cache=cache)
    fake.always(Fault(latency=0.3))  # all three in flight before the first answer is stored
    answers: list[ChatResponse] = []
    threads = [threading.Thread(target=lambda: answers.append(guard.chat(QUESTION))) for _ in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.route for a in answers) == ["primary"] * 3
    assert fake.stats.requests == 3
    assert cache.stats.stores == 3
    assert guard.chat(QUESTION).route == "cache"

    async def burst() -> list[str]:
        other = [{"role": "user", "content": "What is a token bucket?"}]
        routes: list[str] = []

        async def one() -> None:
            routes.append((await guard.achat(other)).route)

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(one)
        routes.append((await guard.achat(other)).route)
        return routes

    assert anyio.run(burst) == ["primary"] * 3 + ["cache"]
    assert fake.stats.requests == 6
