"""A Guard with a Redis store under trio: redis-py's async client runs on asyncio only, so
under another event loop each round trip goes to a worker thread (the sync client's); a
call, a stream and a cancelled call work and give back what they held."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_stream_dropped import PRICES, held  # (the same prices and holds)


@pytest.fixture
def guard(fake: FakeProvider, redis_url: str, redis_prefix: str) -> Iterator[Guard]:
    pytest.importorskip("trio")
    built = Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary"),
        environ={},
        store=RedisStore(redis_url, key_prefix=redis_prefix),
        budgets=Budgets([Budget(limit_usd=100.0)], prices=PRICES),
        rate_limits={"primary": RateLimit(concurrency=4, rpm=1000)},
    )
    yield built
    built.close()


def test_calls_streams_and_cancelled_calls_under_trio(guard: Guard, fake: FakeProvider) -> None:
    async def scenario() -> list[Any]:
        seen: list[Any] = [(await guard.achat(USER, max_tokens=10)).route]
        async with await guard.achat(USER, max_tokens=10, stream=True) as stream:
            seen.append(len([chunk async for chunk in stream]) > 1)
        seen.append(stream.response.route)
        fake.always(Fault(latency=2.0))
        with anyio.move_on_after(0.2) as scope:
            await guard.achat(USER, max_tokens=10)
        seen.append(scope.cancelled_caught)
        await guard.aclose()
        return seen

    assert anyio.run(scenario, backend="trio") == ["primary", True, "primary", True]
    assert held(guard) == (0, 0.0)
    spent = sum(row["spent_usd"] for row in guard.budget_status())
    assert spent > 0  # the two served calls settled through Redis
