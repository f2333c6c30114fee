"""Retry-After in all its forms."""

from __future__ import annotations

import email.utils

from hypothesis import given
from hypothesis import strategies as st

from llmguard_sdk.providers.headers import rate_limit_headers, retry_after_seconds


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_seconds(value: float) -> None:
    assert retry_after_seconds({"Retry-After": repr(value)}) == value


def test_milliseconds_win_over_seconds() -> None:
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25


def test_http_date() -> None:
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"Retry-After": date}, now=now) == 30.0
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_seconds({"Retry-After": past}, now=now) == 0.0


def test_garbage_and_missing_give_none() -> None:
    for value in ["soon", "-3", "nan", "inf", ""]:
        assert retry_after_seconds({"Retry-After": value}) is None
    assert retry_after_seconds({}) is None


def test_rate_limit_headers_are_collected() -> None:
    headers = {"X-RateLimit-Remaining-Requests": "4", "content-type": "x"}
    assert rate_limit_headers(headers) == {"x-ratelimit-remaining-requests": "4"}
