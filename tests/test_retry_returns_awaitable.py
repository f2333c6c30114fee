"""``@retry`` on a plain ``def`` that returns a coroutine (``return
async_client.chat.completions.create(...)``, no ``async def``): the wrapper returns a
coroutine, and the awaited call is retried as an async function's is, its retry budget asked
as for one call. Before, the coroutine came back unretried, silently: a 503 reached the
caller at its ``await``."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletion

from llmguard_sdk.errors import RejectedResultError
from llmguard_sdk.retry import MemoryRetryBudget, RetryBudgetPolicy, RetryDetails, retry
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER


@pytest.fixture
def client(fake: FakeProvider) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sk-x", base_url=fake.base_url, max_retries=0)


def test_a_returned_coroutine_is_retried_when_awaited(
    fake: FakeProvider, client: openai.AsyncOpenAI
) -> None:
    waits: list[RetryDetails] = []

    @retry(attempts=3, hooks=[waits.append])
    def ask() -> Coroutine[Any, Any, ChatCompletion]:
        return client.chat.completions.create(model="m", messages=USER)

    fake.script(Fault(status=503))

    async def main() -> ChatCompletion:
        return await ask()

    answer = anyio.run(main)
    assert answer.choices[0].message.content
    assert fake.stats.requests == 2  # was 1: the 503 came out of the await
    assert [w.attempt for w in waits] == [1]


def test_its_retries_stop_as_an_async_function_s_do(
    fake: FakeProvider, client: openai.AsyncOpenAI
) -> None:
    @retry(attempts=2)
    def ask() -> Coroutine[Any, Any, ChatCompletion]:
        return client.chat.completions.create(model="m", messages=USER)

    fake.always(Fault(status=503))

    async def main() -> ChatCompletion:
        return await ask()

    with pytest.raises(openai.InternalServerError) as raised:
        anyio.run(main)
    assert fake.stats.requests == 2
    assert "after 2 attempts" in " | ".join(getattr(raised.value, "__notes__", []))


def test_the_budget_counts_the_call_once(fake: FakeProvider, client: openai.AsyncOpenAI) -> None:
    # one call leaves room for one retry (1.5 per call, no floor); counted twice, for three
    budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=1.5, min_per_second=0))

    @retry(attempts=5, budget=budget)
    def ask() -> Coroutine[Any, Any, ChatCompletion]:
        return client.chat.completions.create(model="m", messages=USER)

    fake.always(Fault(status=503))

    async def main() -> ChatCompletion:
        return await ask()

    with pytest.raises(openai.InternalServerError):
        anyio.run(main)
    assert fake.stats.requests == 2


def test_on_result_judges_the_awaited_result(
    fake: FakeProvider, client: openai.AsyncOpenAI
) -> None:
    seen: list[object] = []

    def empty(answer: object) -> bool:
        seen.append(answer)
        return True

    @retry(attempts=2, on_result=empty)
    def ask() -> Coroutine[Any, Any, ChatCompletion]:
        return client.chat.completions.create(model="m", messages=USER)

    async def main() -> ChatCompletion:
        return await ask()

    with pytest.raises(RejectedResultError):
        anyio.run(main)
    assert fake.stats.requests == 2
    assert all(isinstance(answer, ChatCompletion) for answer in seen)  # never the coroutine
