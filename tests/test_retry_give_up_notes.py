"""An error the retries gave up on says why, in a note (PEP 678): a server's Retry-After
longer than the time left (or than ``RetryPolicy.cap``) fails at once, naming the wait it
asked for; attempts and the retry budget running out say so too. Before, the error said only
``fake error 429 (HTTP 429)``, its traceback no word of the Retry-After it did not wait."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from llmguard_sdk import Guard, ProviderUnavailableError, RateLimitedError
from llmguard_sdk.retry import MemoryRetryBudget, RetryBudgetPolicy, RetryPolicy, retry
from llmguard_sdk.retry.policy import Decision, why_not
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode

MakeGuard = Callable[..., Guard]
QUICK = RetryPolicy(attempts=3, base=0.01, cap=8.0)


def notes_of(error: BaseException) -> str:
    return " | ".join(getattr(error, "__notes__", []))


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_after_past_the_deadline_fails_at_once_naming_it(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, timeout=3, retry=QUICK)
    fake.script(Fault(status=429, retry_after=6))  # within the cap (8 s), past the timeout
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as raised:
        chat_in_mode(guard, mode)
    assert time.monotonic() - started < 1.0  # no sleep before the failure
    said = notes_of(raised.value)
    assert all(word in said for word in ("Retry-After", "6 s", "left of the timeout")), said


def test_a_retry_after_past_the_cap_names_the_cap(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, timeout=60, retry=QUICK)
    fake.script(Fault(status=429, retry_after=30))
    with pytest.raises(RateLimitedError) as raised:
        guard.chat([{"role": "user", "content": "hi"}])
    said = notes_of(raised.value)
    assert all(word in said for word in ("30 s", "RetryPolicy.cap=8")), said


def test_attempts_running_out_say_how_many(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, timeout=10, retry=QUICK)
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError) as raised:
        guard.chat([{"role": "user", "content": "hi"}])
    assert "after 3 attempts" in notes_of(raised.value)


def test_a_spent_retry_budget_says_so(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(
        fake, timeout=10, retry=QUICK, retry_budget=RetryBudgetPolicy(ratio=0, min_per_second=0)
    )
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError) as raised:
        guard.chat([{"role": "user", "content": "hi"}])
    assert fake.stats.requests == 1
    assert "retry budget" in notes_of(raised.value)


def test_standalone_retry_names_the_retry_after_it_did_not_wait() -> None:
    calls = 0

    @retry(attempts=3, timeout=2)
    def ask() -> None:
        nonlocal calls
        calls += 1
        raise RateLimitedError("slow down", status_code=429, retry_after=5)

    started = time.monotonic()
    with pytest.raises(RateLimitedError) as raised:
        ask()
    assert calls == 1
    assert time.monotonic() - started < 0.5
    said = notes_of(raised.value)
    assert all(word in said for word in ("Retry-After", "5 s", "left of the timeout")), said


def test_standalone_retry_budget_says_so() -> None:
    budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=0, min_per_second=0))

    @retry(attempts=3, budget=budget)
    def ask() -> None:
        raise ProviderUnavailableError("down", status_code=503)

    with pytest.raises(ProviderUnavailableError) as raised:
        ask()
    assert "retry budget" in notes_of(raised.value)


def test_a_spent_timeout_says_no_time_is_left_not_a_backoff_wait() -> None:
    """With no time left of the timeout, the note says so (it spoke of a backoff wait that
    would leave no time "in the 0.00 s left")."""
    spent = why_not(Decision(False, 0.4, "deadline"), QUICK, attempt=1, remaining=-0.2)
    assert spent == "not retried: no time is left of the timeout"
    short = why_not(Decision(False, 0.4, "deadline"), QUICK, attempt=1, remaining=0.3)
    assert "backoff wait of 0.40 s" in short
    assert "0.30 s left" in short
