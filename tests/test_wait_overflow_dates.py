"""A ``Retry-After`` HTTP-date whose year is past 9999 (a year past C's long too), and an
``x-ratelimit-reset-*`` written as a number past a float's range (``1e999``), are waits
longer than any deadline, as ``Fri, 31 Dec 9999 ...`` and ``Retry-After: 1e400`` are: the call
goes to the next route at once. They read as no wait said (None), so the route was retried on
backoff against the server's word. A date with an impossible day or time stays garbage."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.providers.headers import (
    parse_duration,
    rate_limit_reset_seconds,
    retry_after_seconds,
    server_wait_hint,
)
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode

MakeGuard = Callable[..., Guard]
RETRIES = RetryPolicy(attempts=3, base=0.01, cap=0.05)
FAR_DATES = [
    "Mon, 01 Jan 10000 00:00:00 GMT",
    "Sun Jan  1 00:00:00 10000",  # asctime's form
    "1 Jan 99999999999999999999 00:00 GMT",  # a year past C's long: OverflowError
]
LAST_DAY = retry_after_seconds({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"})


@pytest.mark.parametrize("value", FAR_DATES)
def test_a_date_past_year_9999_is_a_longer_wait_than_its_last_day(value: str) -> None:
    seconds = retry_after_seconds({"retry-after": value})
    assert seconds is not None  # (was None)
    assert LAST_DAY is not None
    assert LAST_DAY < seconds < float("inf")


@pytest.mark.parametrize(
    "value",
    [
        "Mon, 32 Jan 2020 00:00:00 GMT",
        "Mon, 31 Feb 10000 00:00:00 GMT",
        "Mon, 01 Jan 10000 25:00:00 GMT",
        "Mon, 01 Foo 10000 00:00:00 GMT",
    ],
)
def test_a_date_with_an_impossible_day_or_time_is_still_garbage(value: str) -> None:
    assert retry_after_seconds({"retry-after": value}) is None


@pytest.mark.parametrize("value", ["1e999", "9" * 400])
def test_a_reset_past_floats_range_is_a_very_long_wait(value: str) -> None:
    seconds = parse_duration(value)
    assert seconds is not None  # (was None)
    assert 1e96 <= seconds < float("inf")
    assert rate_limit_reset_seconds({"x-ratelimit-reset-tokens": value}) == seconds
    assert server_wait_hint({"x-ratelimit-reset-requests": value}) == seconds


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "headers",
    [{"retry-after": FAR_DATES[0]}, {"x-ratelimit-reset-requests": "1e999"}],
)
def test_the_call_moves_on_instead_of_retrying(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    mode: str,
    headers: dict[str, str],
) -> None:
    guard = make_guard(fake, fake2, breaker=None, retry=RETRIES, timeout=5)
    fake.always(Fault(status=503, headers=headers))
    answer = chat_in_mode(guard, mode)
    assert answer.route == "backup"
    assert fake.stats.requests == 1  # (was 3: retried on backoff)
