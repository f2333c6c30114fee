"""A provider's remaining counts (``x-ratelimit-remaining-*``, Anthropic's
``anthropic-ratelimit-*-remaining``) are read by the headers' one strict parser: ASCII
digits, no ``_``, finite and >= 0. A bare ``float()`` took ``0_0`` and Arabic-Indic digits
as numbers, so a garbage ``0_0`` taught the limiter "none left" and paused the route until
its reset, refusing calls the provider would have taken."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk._core.limits import learned, provider_counters
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, USER, run_closing

MakeGuard = Callable[..., Guard]
GARBAGE = ["0_0", "1_000", "\u0660", "\u0661\u0662", "\uff10", "nan", "inf", "-1", "1e400", ""]


@pytest.mark.parametrize("value", GARBAGE)
@pytest.mark.parametrize(
    "header", ["x-ratelimit-remaining-requests", "anthropic-ratelimit-tokens-remaining"]
)
def test_a_garbage_count_is_ignored_not_learned(header: str, value: str) -> None:
    headers = {header: value, "x-ratelimit-reset-requests": "90s"}
    assert provider_counters(headers) == {}
    assert learned(headers) is None


def test_counts_in_plain_digits_are_read() -> None:
    headers = {"X-RateLimit-Remaining-Requests": "12", "anthropic-ratelimit-tokens-remaining": "0"}
    assert provider_counters(headers) == {"remaining_requests": 12.0, "remaining_tokens": 0.0}


@pytest.mark.parametrize("mode", MODES)
def test_a_garbage_zero_does_not_pause_the_route(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    fake.script(
        Fault(
            headers={"x-ratelimit-remaining-requests": "0_0", "x-ratelimit-reset-requests": "90s"}
        )
    )
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=100)}, breaker=None)
    for _ in range(2):
        if mode == "sync":
            assert guard.chat(USER).text
        else:
            assert run_closing(guard, lambda: guard.achat(USER)).text
    assert fake.stats.requests == 2  # the second call was not refused for 90 s
