"""A provider's 429 with ``Retry-After`` on a rate-limited route: the Guard waits the hint and
its retry goes out, as it does on a route without limits (the limiter used to pause the route
for the hint and then keep the refused call's request and tokens on it, so the retry found no
room a hair after the pause and the call failed with the 429)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

LIMITS = {
    "rpm": RateLimit(rpm=100),
    "tpm": RateLimit(tpm=100_000),
    "both": RateLimit(rpm=10_000, tpm=100_000, input_tpm=50_000, output_tpm=50_000),
}


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
@pytest.mark.parametrize("kind", sorted(LIMITS))
def test_a_retry_after_a_429_goes_out_when_the_hint_has_passed(
    fake: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_url: str,
    redis_prefix: str,
    shared: bool,
    kind: str,
) -> None:
    store = {"store": redis_url, "key_prefix": redis_prefix} if shared else {}
    guard = make_guard(fake, rate_limits={"primary": LIMITS[kind]}, **store)
    fake.script(Fault(status=429, retry_after=0.3))
    started = time.monotonic()
    response = guard.chat(USER)
    assert response.route == "primary"
    assert fake.stats.requests == 2  # the 429, then the retry
    assert time.monotonic() - started >= 0.3  # not before the hint


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_a_stream_s_retry_after_a_429_goes_out_when_the_hint_has_passed(
    fake: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_url: str,
    redis_prefix: str,
    shared: bool,
) -> None:
    store = {"store": redis_url, "key_prefix": redis_prefix} if shared else {}
    guard = make_guard(fake, rate_limits={"primary": LIMITS["both"]}, **store)
    fake.script(Fault(status=429, retry_after=0.3))
    with guard.chat(USER, stream=True) as chunks:
        assert "".join(chunk.text for chunk in chunks)
    assert chunks.response.route == "primary"
    assert fake.stats.requests == 2
