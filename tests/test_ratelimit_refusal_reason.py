"""A rate-limit refusal says why and for whom: ``RateLimitExceededError.reason`` (``rate``,
``never``, ``concurrency``, ``queue``) and ``tenant``. It carried only the route and
``retry_after``, so code could not tell a call too large for the limit from a busy one, or
which tenant was refused, without parsing the message."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

from llmguard_sdk import Guard, RateLimitExceededError
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider

from .conftest import USER


def _refusal(guard: Guard, max_tokens: int) -> RateLimitExceededError:
    with pytest.raises(RateLimitExceededError) as caught:
        guard.chat(USER, tenant="acme", max_tokens=max_tokens)
    return caught.value


def test_a_busy_limit_says_rate_and_the_tenant(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)})
    guard.chat(USER, tenant="acme", max_tokens=8)
    refused = _refusal(guard, max_tokens=8)
    assert (refused.reason, refused.tenant, refused.key) == ("rate", "acme", "primary")
    assert refused.retry_after is not None
    assert refused.retry_after > 0
    copied = pickle.loads(pickle.dumps(refused))
    assert (copied.reason, copied.tenant) == ("rate", "acme")


def test_a_call_larger_than_the_limit_says_never(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    guard = make_guard(
        fake, rate_limits={"primary": RateLimit(tpm=10_000, reserve_output_tokens=100)}
    )
    refused = _refusal(guard, max_tokens=20_000)
    assert (refused.reason, refused.tenant, refused.retry_after) == ("never", "acme", None)
    assert fake.stats.requests == 0


def test_a_full_concurrency_cap_says_concurrency(
    fake: FakeProvider, make_guard: Callable[..., Guard]
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(concurrency=1)})
    held = guard.chat(USER, stream=True, tenant="acme", max_tokens=8)
    try:
        next(iter(held))  # a stream under way holds the one slot
        refused = _refusal(guard, max_tokens=8)
    finally:
        held.close()
    assert (refused.reason, refused.tenant) == ("concurrency", "acme")
