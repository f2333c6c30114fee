"""Retry-After in all its forms."""

from __future__ import annotations

import email.utils
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.errors import RateLimitedError
from llmguard_sdk.providers.headers import (
    parse_duration,
    rate_limit_headers,
    rate_limit_reset_seconds,
    retry_after_seconds,
    server_wait_hint,
)
from llmguard_sdk.testing import FakeProvider, Fault


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
    for value in ["soon", "-3", "nan", "inf", "", "1_0", "\u0661\u0662", "\uff11"]:
        assert retry_after_seconds({"Retry-After": value}) is None
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize(
    "value",
    [
        "Mon, 32 Jan 2020 00:00:00 GMT",
        "Mon, 30 Feb 2020 00:00:00 GMT",
    ],
)
def test_dates_out_of_range_give_none(value: str) -> None:
    assert retry_after_seconds({"Retry-After": value}) is None


def test_rate_limit_headers_are_collected() -> None:
    headers = {"X-RateLimit-Remaining-Requests": "4", "content-type": "x"}
    assert rate_limit_headers(headers) == {"x-ratelimit-remaining-requests": "4"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0.5s", 0.5),
        ("2.5", 2.5),
        ("150us", 0.00015),
        ("7m12.123s", 432.123),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "1x", "1s2", "-1s", "1 s", "ms", "inf", "nan"])
def test_bad_durations_give_none(text: str) -> None:
    assert parse_duration(text) is None


@given(st.text(max_size=80))
def test_every_parser_takes_any_string(text: str) -> None:
    for value in (
        parse_duration(text),
        retry_after_seconds({"retry-after": text}),
        retry_after_seconds({"retry-after-ms": text}),
        rate_limit_reset_seconds({"x-ratelimit-reset-tokens": text}),
        rate_limit_reset_seconds({"anthropic-ratelimit-tokens-reset": text}),
        server_wait_hint({"retry-after": text, "x-ratelimit-reset-requests": text}),
    ):
        assert value is None or (isinstance(value, float) and 0 <= value < math.inf)


def test_reset_of_the_exhausted_limit_is_the_hint() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "12",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    assert rate_limit_reset_seconds(headers) == 360.0
    headers["x-ratelimit-remaining-tokens"] = "40"
    assert rate_limit_reset_seconds(headers) is None
    assert rate_limit_reset_seconds({"x-ratelimit-reset-requests": "20ms"}) == 0.02


def test_anthropics_rfc_3339_resets_are_read_as_openais_durations() -> None:
    # Anthropic says when a limit resets (an RFC 3339 instant), not how long until then
    now = 1_800_000_000.0
    headers = {
        "anthropic-ratelimit-requests-remaining": "12",
        "anthropic-ratelimit-requests-reset": "2027-01-15T08:00:01Z",
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2027-01-15T08:06:00.5+00:00",
    }
    assert rate_limit_reset_seconds(headers, now=now) == 360.5
    assert server_wait_hint(headers, now=now) == 360.5
    headers["anthropic-ratelimit-tokens-remaining"] = "40"
    assert rate_limit_reset_seconds(headers, now=now) is None
    shifted = {"anthropic-ratelimit-input-tokens-reset": "2027-01-15T10:00:30+02:00"}
    assert rate_limit_reset_seconds(shifted, now=now) == 30.0
    past = {"anthropic-ratelimit-requests-reset": "2027-01-15T07:59:00Z"}
    assert rate_limit_reset_seconds(past, now=now) == 0.0
    for bad in ("soon", "2027-13-45T99:00:00Z", "2027-01-15T08:00:00", "9" * 400, "١٢"):
        assert rate_limit_reset_seconds({"anthropic-ratelimit-tokens-reset": bad}) is None


def test_retry_after_wins_over_rate_limit_resets() -> None:
    headers = {"retry-after": "3", "x-ratelimit-reset-requests": "9s"}
    assert server_wait_hint(headers) == 3.0
    assert server_wait_hint({"x-ratelimit-reset-requests": "9s"}) == 9.0


def test_every_http_date_form_is_read() -> None:
    # RFC 9110 5.6.7: a recipient accepts all three forms; asctime's has no zone (GMT)
    now = 1_800_000_000.0
    when = time.gmtime(now + 30)
    for form in ("%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"):
        assert retry_after_seconds({"Retry-After": time.strftime(form, when)}, now=now) == 30.0


def test_an_asctime_retry_after_from_a_server_reaches_the_error() -> None:
    when = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(time.time() + 120))
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    with FakeProvider() as fake:
        fake.always(Fault(status=429, retry_after=when))
        provider = OpenAICompatibleProvider(fake.base_url)
        with pytest.raises(RateLimitedError) as caught:
            provider.complete(request, model="m", deadline=time.monotonic() + 10)
        provider.close()
    assert caught.value.retry_after is not None
    assert 100 < caught.value.retry_after <= 120
