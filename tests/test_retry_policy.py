"""Backoff maths and retry decisions: pure functions, checked by properties."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmguard_sdk import ConfigurationError
from llmguard_sdk.retry import RetryPolicy, backoff, decide

bases = st.floats(min_value=0.001, max_value=10.0)
caps = st.floats(min_value=0.001, max_value=120.0)
retries = st.integers(min_value=0, max_value=2000)
seeds = st.integers(min_value=0, max_value=2**32)


@given(retries, bases, caps, seeds)
def test_full_jitter_lies_between_zero_and_the_exponential_ceiling(
    retry: int, base: float, cap: float, seed: int
) -> None:
    wait = backoff("full", retry, base=base, cap=cap, rng=random.Random(seed))
    assert 0.0 <= wait <= min(cap, base * 2.0 ** min(retry, 1000))


@given(retries, bases, caps, seeds)
def test_equal_jitter_keeps_at_least_half_the_ceiling(
    retry: int, base: float, cap: float, seed: int
) -> None:
    ceiling = min(cap, base * 2.0 ** min(retry, 1000))
    wait = backoff("equal", retry, base=base, cap=cap, rng=random.Random(seed))
    assert ceiling / 2 <= wait <= ceiling


@given(retries, bases, caps, st.floats(min_value=0.0, max_value=1000.0), seeds)
def test_decorrelated_jitter_stays_within_base_cap_and_three_times_previous(
    retry: int, base: float, cap: float, previous: float, seed: int
) -> None:
    wait = backoff(
        "decorrelated", retry, base=base, cap=cap, previous=previous, rng=random.Random(seed)
    )
    assert 0.0 <= wait <= cap
    if base <= cap:
        assert wait >= min(base, cap)
        assert wait <= max(base, 3 * (previous or base))


@given(retries, bases, caps)
def test_no_jitter_is_plain_capped_exponential(retry: int, base: float, cap: float) -> None:
    assert backoff("none", retry, base=base, cap=cap) == min(cap, base * 2.0 ** min(retry, 1000))


def test_full_jitter_spreads_clients_out() -> None:
    rng = random.Random(7)
    waits = [backoff("full", 3, base=0.5, cap=8, rng=rng) for _ in range(1000)]
    assert min(waits) < 0.5
    assert max(waits) > 3.5  # the whole [0, 4] range is used, not a narrow band


def test_policy_defaults_are_bounded() -> None:
    policy = RetryPolicy()
    assert policy.attempts == 3
    assert policy.timeout == 60.0
    assert policy.jitter == "full"
    assert policy.idempotent


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": 0},
        {"base": 0},
        {"cap": -1},
        {"timeout": float("inf")},
        {"jitter": "wild"},
        {"base": 2, "cap": 1},
        # not an HTTP header name: every guarded call failed (ValueError for "", a
        # RequestValidationError blaming the request for the others)
        {"idempotency_header": ""},
        {"idempotency_header": "Idempotency Key"},
        {"idempotency_header": "X-Key\n"},
        {"idempotency_header": "Ключ"},
        {"idempotency_header": 42},
        {"attempts": True},  # bool is an int: one attempt, retries silently off
        {"base": True},
        {"timeout": True},
    ],
)
def test_bad_policies_are_configuration_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


POLICY = RetryPolicy(attempts=3, base=0.5, cap=8.0)


def test_decisions() -> None:
    def go(**kw: object) -> tuple[bool, str]:
        args: dict[str, object] = {"attempt": 1, "retryable": True, "hint": None, "remaining": 30.0}
        args.update(kw)
        decision = decide(POLICY, **args)  # type: ignore[arg-type]
        return decision.retry, decision.reason

    assert go() == (True, "retry")
    assert go(retryable=False) == (False, "not-retryable")
    assert go(attempt=3) == (False, "attempts-exhausted")
    assert go(hint=2.0) == (True, "retry")
    assert go(hint=9.0) == (False, "hint-beyond-cap")
    assert go(hint=5.0, remaining=4.0) == (False, "deadline")
    assert go(idempotent=False) == (False, "not-idempotent")
    assert go(idempotent=False, request_sent=False) == (True, "retry")


def test_a_hint_within_the_cap_replaces_the_computed_wait() -> None:
    decision = decide(POLICY, attempt=1, retryable=True, hint=1.25, remaining=30.0)
    assert decision.wait == 1.25
    assert decision.hinted


@given(st.floats(min_value=0.0, max_value=20.0), seeds)
def test_a_wait_never_ends_past_the_deadline(remaining: float, seed: int) -> None:
    decision = decide(
        POLICY, attempt=2, retryable=True, hint=None, remaining=remaining, rng=random.Random(seed)
    )
    if decision.retry:
        assert decision.wait < remaining


@pytest.mark.parametrize("hint", [None, 0.1])
def test_a_time_left_that_is_no_number_leaves_no_time_for_a_retry(hint: float | None) -> None:
    """``remaining=nan`` compared False against every wait, so the retry was taken."""
    decision = decide(RetryPolicy(), attempt=1, retryable=True, hint=hint, remaining=float("nan"))
    assert (decision.retry, decision.reason) == (False, "deadline")
