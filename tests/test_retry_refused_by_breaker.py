"""``@retry(budget=...)`` stacked over ``@breakers.protect`` (README, Circuit breakers): a
retry the retry budget granted, then the breaker refused (``CircuitOpenError``, opened by
the call's own failure), was never sent: it goes back to the budget, sync and async, as the
Guard's own retries give one back. It stayed spent, so an outage drained the budget with
retries that added no load. Real openai clients against a FakeProvider on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis

from llmguard_sdk import CircuitOpenError, ProviderUnavailableError
from llmguard_sdk.breaker import BreakerPolicy, Breakers, MemoryBreakerBackend
from llmguard_sdk.retry import (
    MemoryRetryBudget,
    RedisRetryBudget,
    RetryBudget,
    RetryBudgetPolicy,
    retry,
    retry_context,
    waits_off,
)
from llmguard_sdk.store import RedisStore, hash_id
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

OPENS_AT_ONCE = BreakerPolicy(minimum_calls=1, window=1, probe_every=None)
# decay negligible over a test: the counts read as whole numbers
ROOMY = RetryBudgetPolicy(ratio=0.1, min_per_second=1.0, window=1e6)


@pytest.fixture(autouse=True)
def _no_waits() -> Iterator[None]:
    with waits_off():
        yield


def _ask(client: Any) -> Any:
    return client.chat.completions.create(model="m", messages=USER)


def _retried_loop(client: openai.OpenAI, breakers: Breakers, **options: Any) -> None:
    """A ``retry_context`` loop around a call to ``client`` through ``breakers``."""
    for attempt in retry_context(attempts=3, **options):
        with attempt:
            breakers.call("openai", _ask, client)


async def _refused_async_retry(
    fake: FakeProvider, budget: RetryBudget, breakers: Breakers, *, name: str
) -> None:
    """An async ``@retry(budget=budget, name=name)`` over ``@breakers.protect`` around a call
    to ``fake``, which answers 503: the 503 opens the breaker, which refuses the retry."""
    fake.always(Fault(status=503))
    async with openai.AsyncOpenAI(
        base_url=fake.base_url, api_key="sk-test", max_retries=0
    ) as client:

        @retry(attempts=3, budget=budget, name=name)
        @breakers.protect("openai")
        async def ask() -> Any:
            return await _ask(client)

        with pytest.raises(CircuitOpenError):
            await ask()


def test_a_retry_the_breaker_refused_goes_back(fake: FakeProvider) -> None:
    budget, breakers = MemoryRetryBudget(ROOMY), Breakers(MemoryBreakerBackend(OPENS_AT_ONCE))
    fake.always(Fault(status=503))
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:

        @retry(attempts=3, budget=budget, name="ask")
        @breakers.protect("openai")
        def ask() -> Any:
            return _ask(client)

        with pytest.raises(CircuitOpenError):
            ask()
    assert fake.stats.requests == 1  # the retry was refused by the breaker the 503 opened
    assert budget.state("ask").retries == pytest.approx(0.0, abs=1e-6)


@pytest.mark.anyio
async def test_an_async_retry_the_breaker_refused_goes_back(fake: FakeProvider) -> None:
    budget, breakers = MemoryRetryBudget(ROOMY), Breakers(MemoryBreakerBackend(OPENS_AT_ONCE))
    await _refused_async_retry(fake, budget, breakers, name="ask")
    assert fake.stats.requests == 1
    assert budget.state("ask").retries == pytest.approx(0.0, abs=1e-6)


def test_a_refused_retry_that_is_retried_reuses_its_grant(fake: FakeProvider) -> None:
    """``on=`` that retries the refusal too: the refused retry's grant is used by the next
    one (not spent twice); a failure sent before it keeps its own."""
    budget, breakers = MemoryRetryBudget(ROOMY), Breakers(MemoryBreakerBackend(OPENS_AT_ONCE))
    fake.always(Fault(status=503))
    on = (CircuitOpenError, ProviderUnavailableError, openai.InternalServerError)
    with (
        openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client,
        pytest.raises(CircuitOpenError),
    ):
        _retried_loop(client, breakers, budget=budget, name="loop", on=on)
    assert fake.stats.requests == 1  # both retries were refused
    assert budget.state("loop").retries == pytest.approx(0.0, abs=1e-6)


def test_a_refused_retry_goes_back_to_a_fleets_budget(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    budget = RedisRetryBudget(store, ROOMY)
    breakers = Breakers(MemoryBreakerBackend(OPENS_AT_ONCE))
    fake.always(Fault(status=503))
    with (
        openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client,
        pytest.raises(CircuitOpenError),
    ):
        _retried_loop(client, breakers, budget=budget, name="fleet")
    store.close()
    assert fake.stats.requests == 1
    with redis.Redis.from_url(redis_url) as raw:
        requests, retries = raw.hmget(store.key("rb", hash_id("fleet")), "q", "r")
    assert float(requests) == pytest.approx(1.0, abs=1e-6)
    assert float(retries) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.anyio
async def test_an_async_refused_retry_goes_back_to_a_fleets_budget(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    budget = RedisRetryBudget(store, ROOMY)
    breakers = Breakers(MemoryBreakerBackend(OPENS_AT_ONCE))
    await _refused_async_retry(fake, budget, breakers, name="afleet")
    await store.aclose()
    assert fake.stats.requests == 1
    with redis.Redis.from_url(redis_url) as raw:
        requests, retries = raw.hmget(store.key("rb", hash_id("afleet")), "q", "r")
    assert float(requests) == pytest.approx(1.0, abs=1e-6)
    assert float(retries) == pytest.approx(0.0, abs=1e-6)
