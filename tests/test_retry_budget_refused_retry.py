"""A retry the retry budget granted but the route then refused (its breaker opened on the
call's own failure, its rate limit had no room) was never sent: it goes back to the budget.
It stayed spent, so an outage drained the budget (a fleet's, in Redis) with retries that
added no load, and the retries the budget exists to allow were refused afterwards."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
import redis

from llmguard_sdk import (
    BreakerPolicy,
    Guard,
    OpenAICompatibleProvider,
    ProviderUnavailableError,
    RateLimit,
)
from llmguard_sdk.retry import RetryBudgetPolicy, RetryPolicy
from llmguard_sdk.retry.budget import MemoryRetryBudget
from llmguard_sdk.store import RedisStore, hash_id
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode

MakeGuard = Callable[..., Guard]
OPENS_AT_ONCE = BreakerPolicy(minimum_calls=1, window=1, probe_every=None)
RETRIES = RetryPolicy(attempts=3, base=0.01, cap=0.05)
# decay negligible over a test: the counts read as whole numbers
ROOMY = RetryBudgetPolicy(ratio=0.1, min_per_second=1.0, window=1e6)


def _retries_spent(guard: Guard, route: str) -> float:
    budget = guard._stages.retry_budget
    assert isinstance(budget, MemoryRetryBudget)
    return budget.state(route).retries


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_the_breaker_refused_goes_back_to_the_budget(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, breaker=OPENS_AT_ONCE, retry=RETRIES, retry_budget=ROOMY, timeout=5)
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        chat_in_mode(guard, mode)
    assert fake.stats.requests == 1  # the retry was refused by the breaker the 503 opened
    assert _retries_spent(guard, "primary") == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_the_rate_limit_refused_goes_back_to_the_budget(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(
        fake,
        breaker=None,
        retry=RETRIES,
        retry_budget=ROOMY,
        rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)},
        timeout=5,
    )
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        chat_in_mode(guard, mode)
    assert fake.stats.requests == 1  # the retry found no room in the rate limit
    assert _retries_spent(guard, "primary") == pytest.approx(0.0, abs=1e-6)


@pytest.mark.anyio
async def test_a_retry_cancelled_in_its_wait_goes_back_to_the_budget(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A call cancelled while it waits before a retry (``asyncio.wait_for``, a task group's
    cancel) never makes that retry: the budget gets it back (``@retry`` gave it back)."""
    patient = RetryPolicy(attempts=3, base=0.01, cap=600.0)
    guard = make_guard(fake, breaker=None, retry=patient, retry_budget=ROOMY, timeout=900)
    fake.always(Fault(status=503, retry_after=300))  # the retry waits 300 s
    with anyio.move_on_after(3) as waited:  # (bounds the test: it never waits out the 300 s)
        await guard.achat([{"role": "user", "content": "hi"}])
    assert waited.cancelled_caught
    assert fake.stats.requests == 1  # cancelled in the wait before the retry
    assert _retries_spent(guard, "primary") == pytest.approx(0.0, abs=1e-6)


def test_a_refused_retry_goes_back_to_a_fleets_budget(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="m", name="primary"),
        store=redis_url,
        key_prefix=redis_prefix,
        breaker=OPENS_AT_ONCE,
        retry=RETRIES,
        retry_budget=ROOMY,
        environ={},
    )
    fake.always(Fault(status=503))
    with guard, pytest.raises(ProviderUnavailableError):
        guard.chat([{"role": "user", "content": "hi"}])
    assert fake.stats.requests == 1  # the retry was refused by the breaker the 503 opened
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    key = store.key("rb", hash_id("primary"))
    with redis.Redis.from_url(redis_url) as raw:
        requests, retries = raw.hmget(key, "q", "r")
    store.close()
    assert float(requests) == pytest.approx(1.0, abs=1e-6)
    assert float(retries) == pytest.approx(0.0, abs=1e-6)
