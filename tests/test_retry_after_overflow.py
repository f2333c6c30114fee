"""A ``Retry-After`` (or ``retry-after-ms``) past a float's range (``1e400``, an integer of
400 digits) is a wait longer than any deadline, as a huge finite one (``1e300``) is: the call
goes to the next route at once (or gives up). It read as no wait at all (None), so the
route was retried on backoff, against the server's word."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.providers.headers import retry_after_seconds, server_wait_hint
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode

MakeGuard = Callable[..., Guard]
RETRIES = RetryPolicy(attempts=3, base=0.01, cap=0.05)
HUGE = ["1e300", "1e400", "9" * 400, "1.5e99999"]


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
@pytest.mark.parametrize("value", HUGE)
def test_a_wait_past_floats_range_is_a_very_long_wait(header: str, value: str) -> None:
    seconds = retry_after_seconds({header: value})
    assert seconds is not None
    assert seconds >= 1e96  # longer than any deadline, still a finite float
    assert seconds < float("inf")
    assert server_wait_hint({header: value}) == seconds


@pytest.mark.parametrize("value", ["inf", "nan", "-1e400", "1e400x", "Infinity"])
def test_words_for_infinity_are_still_garbage(value: str) -> None:
    assert retry_after_seconds({"retry-after": value}) is None
    assert retry_after_seconds({"retry-after-ms": value}) is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
@pytest.mark.parametrize("value", HUGE)
def test_the_call_moves_on_instead_of_retrying(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    mode: str,
    header: str,
    value: str,
) -> None:
    guard = make_guard(fake, fake2, breaker=None, retry=RETRIES, timeout=5)
    fake.always(Fault(status=503, headers={header: value}))
    answer = chat_in_mode(guard, mode)
    assert answer.route == "backup"
    assert fake.stats.requests == 1  # not retried on backoff: the server asked for longer
