"""The standalone retry decorator and context, sync and async, with hooks and a test switch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import ConfigurationError, Guard, ProviderUnavailableError, RateLimitedError
from llmguard_sdk.context import RetryDetails
from llmguard_sdk.retry import (
    MemoryRetryBudget,
    RetryBudgetPolicy,
    RetryPolicy,
    is_retryable,
    is_testing,
    retry,
    retry_context,
    set_testing,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, require_module


@pytest.fixture
def no_waits() -> Iterator[None]:
    set_testing(True)
    yield
    set_testing(False)


class Flaky:
    """Fails ``failures`` times with ``error``, then returns 'ok'."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_decorator_retries_until_success_and_reports_each_retry(no_waits: None) -> None:
    seen: list[RetryDetails] = []
    flaky = Flaky(2, ProviderUnavailableError("down"))
    wrapped = retry(flaky, attempts=3, hooks=[seen.append])
    assert wrapped() == "ok"
    assert flaky.calls == 3
    assert [d.attempt for d in seen] == [1, 2]
    assert all(isinstance(d.cause, ProviderUnavailableError) for d in seen)
    assert seen[0].name.endswith("Flaky")


def test_the_last_failure_propagates_unchanged(no_waits: None) -> None:
    flaky = Flaky(5, ProviderUnavailableError("down"))
    with pytest.raises(ProviderUnavailableError, match="down"):
        retry(flaky, attempts=3)()
    assert flaky.calls == 3


def test_errors_not_worth_retrying_are_raised_at_once(no_waits: None) -> None:
    flaky = Flaky(1, KeyError("bug"))
    with pytest.raises(KeyError):
        retry(flaky)()
    assert flaky.calls == 1


def test_on_accepts_types_and_predicates_that_return_a_wait(no_waits: None) -> None:
    flaky = Flaky(1, ValueError("x"))
    assert retry(flaky, on=ValueError)() == "ok"
    seen: list[RetryDetails] = []
    hinted = Flaky(1, ValueError("x"))
    assert retry(hinted, on=lambda exc: 0.25, hooks=[seen.append])() == "ok"
    assert seen[0].wait == 0.25
    assert seen[0].hinted


def test_retry_after_of_a_rate_limit_is_the_wait(no_waits: None) -> None:
    seen: list[RetryDetails] = []
    flaky = Flaky(1, RateLimitedError("slow down", retry_after=1.5))
    assert retry(flaky, hooks=[seen.append])() == "ok"
    assert seen[0].wait == 1.5


def test_waits_really_happen_outside_testing_mode() -> None:
    assert not is_testing()
    flaky = Flaky(1, RateLimitedError("slow down", retry_after=0.2))
    started = time.monotonic()
    assert retry(flaky)() == "ok"
    assert time.monotonic() - started >= 0.2


def test_testing_mode_can_cap_attempts() -> None:
    set_testing(True, attempts=1)
    try:
        flaky = Flaky(1, ProviderUnavailableError("down"))
        with pytest.raises(ProviderUnavailableError):
            retry(flaky, attempts=5)()
        assert flaky.calls == 1
    finally:
        set_testing(False)


def test_total_timeout_bounds_the_retries() -> None:
    seen: list[RetryDetails] = []
    flaky = Flaky(100, RateLimitedError("slow", retry_after=1.0))
    with pytest.raises(RateLimitedError):
        retry(flaky, attempts=50, timeout=2.9, hooks=[seen.append])()
    # Calls at about 0, 1 and 2 s; a third wait would end past the 2.9 s timeout whatever the
    # machine's load (sleeps only run long), and the second retry is let through unless the
    # first call and wait ran 0.9 s late.
    assert flaky.calls == 3
    assert all(d.elapsed + d.wait < 2.9 for d in seen)


def test_context_manager_sync_and_async(no_waits: None) -> None:
    flaky = Flaky(2, ProviderUnavailableError("down"))
    for attempt in retry_context(attempts=3):
        with attempt:
            result = flaky()
    assert result == "ok"
    assert flaky.calls == 3

    async def run() -> int:
        async_flaky = Flaky(1, ProviderUnavailableError("down"))
        async for attempt in retry_context(attempts=3):
            with attempt:
                async_flaky()
        return async_flaky.calls

    assert anyio.run(run) == 2


def test_async_decorator(no_waits: None) -> None:
    flaky = Flaky(1, ProviderUnavailableError("down"))

    @retry(attempts=2)
    async def call() -> str:
        return flaky()

    assert anyio.run(call) == "ok"


def test_a_budget_stops_a_retry_storm(no_waits: None) -> None:
    budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=0.1, min_per_second=0.0, window=1e5))
    calls = 0

    @retry(attempts=5, budget=budget)
    def dead() -> None:
        nonlocal calls
        calls += 1
        raise ProviderUnavailableError("dead")

    for _ in range(100):
        with pytest.raises(ProviderUnavailableError):
            dead()
    assert calls <= 100 + 10  # without the budget: 500


def test_is_retryable_understands_openai_errors(fake: FakeProvider, no_waits: None) -> None:
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    fake.script(Fault(status=503), Fault(status=429, retry_after=3), Fault(status=400))
    verdicts: list[Any] = []
    for _ in range(3):
        try:
            client.chat.completions.create(model="m", messages=USER)
        except openai.APIError as exc:
            verdicts.append(is_retryable(exc))
    assert verdicts == [True, 3.0, False]

    @retry(policy=RetryPolicy(attempts=3))
    def ask() -> Any:
        return client.chat.completions.create(model="m", messages=USER)

    fake.script(Fault(status=502), Fault(reset=True))
    assert ask().choices[0].message.content == "Echo: hello there"
    client.close()


def test_a_misspelt_option_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="atempts"):
        retry(atempts=3)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="timeot"):
        retry_context(timeot=1.0)  # type: ignore[call-arg]
    assert sum(1 for _ in retry_context(attempts=2, name="ok")) == 1  # a first try that passes


def test_is_retryable_understands_errors_carrying_the_response(
    fake: FakeProvider, no_waits: None
) -> None:
    """requests' HTTPError (raise_for_status) carries the status on ``.response``, as httpx's
    does: a 503 or 429 is retried, a 400 is not (none was: not a provider failure)."""
    requests = require_module("requests", "requests (tiktoken's dependency) is not installed")
    url = f"{fake.base_url}/chat/completions"
    fake.script(Fault(status=503), Fault(status=429, retry_after=3), Fault(status=400))
    verdicts: list[Any] = []
    for _ in range(3):
        try:
            requests.post(url, json={"model": "m", "messages": USER}, timeout=10).raise_for_status()
        except requests.HTTPError as exc:
            verdicts.append(is_retryable(exc))
    assert verdicts == [True, 3.0, False]

    @retry(attempts=3)
    def ask() -> Any:
        answer = requests.post(url, json={"model": "m", "messages": USER}, timeout=10)
        answer.raise_for_status()
        return answer.json()

    fake.script(Fault(status=502), Fault(status=503))
    assert ask()["choices"][0]["message"]["content"] == "Echo: hello there"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"on_result": "x"}, "on_result"),
        ({"attempts": -1}, "attempts"),
        ({"on": "ValueError"}, "on="),
        ({"hooks": [5]}, "hooks"),
        ({"name": 3}, "name"),
    ],
)
def test_retry_checks_its_options_before_it_decorates(options: dict[str, Any], named: str) -> None:
    """``retry(on_result="x")`` returned a decorator, and the error came only when it was
    applied (far from the line that was wrong)."""
    with pytest.raises(ConfigurationError, match=named):
        retry(**options)


@pytest.mark.parametrize("bad", ["ValueError", None, 5, int, (ValueError, "x")])
def test_an_on_that_is_no_exception_type_or_callable_is_a_configuration_error(bad: Any) -> None:
    # it was found out at the first failure: a TypeError ("'str' object is not callable")
    # raised in place of the function's own error
    with pytest.raises(ConfigurationError, match="on="):
        retry(on=bad)(lambda: None)
    with pytest.raises(ConfigurationError, match="on="):
        retry_context(on=bad)


async def _async_verdict(exc: BaseException) -> bool:
    return True


async def _async_hook(details: RetryDetails) -> None:
    raise AssertionError("never awaited")


@pytest.mark.parametrize(("name", "bad"), [("on", _async_verdict), ("hooks", [_async_hook])])
def test_an_async_on_or_hook_is_a_configuration_error(name: str, bad: Any) -> None:
    # on= and hooks are called, never awaited: an async hook never ran (a RuntimeWarning, a
    # coroutine dropped) and an async on= failed only at the first failure of the function
    with pytest.raises(ConfigurationError, match=f"{name}.*async"):
        retry(**{name: bad})(lambda: None)
    with pytest.raises(ConfigurationError, match=f"{name}.*async"):
        retry_context(**{name: bad})


@pytest.mark.parametrize("bad", [[5], print, "hook"])
def test_hooks_that_are_not_callables_are_a_configuration_error(bad: Any) -> None:
    # [5] raised TypeError at the first retry, in place of the function's own error; a bare
    # callable (not in a list) a TypeError of its own; a string was iterated letter by letter
    with pytest.raises(ConfigurationError, match="hooks"):
        retry(hooks=bad)(lambda: None)
    with pytest.raises(ConfigurationError, match="hooks"):
        retry_context(hooks=bad)


def test_a_decode_error_of_the_callers_own_code_is_no_malformed_answer(
    fake: FakeProvider, no_waits: None
) -> None:
    """A JSONDecodeError or UnicodeDecodeError raised by the caller's own parsing (a hook, a
    filter, its settings) is a bug to raise at once, not a provider's malformed answer; the
    same error raised while an HTTP client parses the provider's answer still is one."""
    import json

    import httpx

    from llmguard_sdk import MalformedResponseError, classify_exception

    for mine in (lambda: json.loads("{not json"), lambda: b"\xff\xfe".decode("utf-8")):
        with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)) as mine_raised:
            mine()
        assert classify_exception(mine_raised.value) is None
        assert is_retryable(mine_raised.value) is False
    fake.script(Fault(malformed_json=True))
    with pytest.raises(json.JSONDecodeError) as parsed:
        httpx.post(
            f"{fake.base_url}/chat/completions", json={"model": "m", "messages": USER}
        ).json()
    assert isinstance(classify_exception(parsed.value), MalformedResponseError)
    calls = 0

    @retry(attempts=3)
    def parse_my_settings() -> Any:
        nonlocal calls
        calls += 1
        return json.loads("{not json")

    with pytest.raises(json.JSONDecodeError):
        parse_my_settings()
    assert calls == 1  # raised at once, not retried as a malformed answer


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        ("policy", {"attempts": 3}),
        ("policy", RetryBudgetPolicy()),
        ("budget", RetryBudgetPolicy()),  # the policy, not a budget built from it
        ("budget", "redis"),
        ("name", 5),  # the budget's key: Redis hashes it (AttributeError at the first failure)
    ],
)
def test_a_policy_or_budget_of_the_wrong_kind_is_a_configuration_error(
    option: str, bad: Any
) -> None:
    # found out at the first failure, after the call went out: an AttributeError ('dict'
    # object has no attribute 'timeout') raised in place of the function's own error
    with pytest.raises(ConfigurationError, match=option):
        retry(**{option: bad})(lambda: None)
    with pytest.raises(ConfigurationError, match=option):
        retry_context(**{option: bad})


@pytest.mark.parametrize(
    ("option", "bad"),
    [("retry", {"attempts": 3}), ("retry", RetryBudgetPolicy()), ("retry_budget", RetryPolicy())],
)
def test_a_guard_retry_policy_of_the_wrong_kind_is_a_configuration_error(
    option: str, bad: Any
) -> None:
    with pytest.raises(ConfigurationError, match=option):
        Guard(**{option: bad}, environ={})
    with pytest.raises(ConfigurationError, match="RetryBudgetPolicy"):
        MemoryRetryBudget(RetryPolicy())  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [3, "fetch", None])
def test_a_positional_option_is_a_configuration_error(bad: Any) -> None:
    """``@retry(3)`` (attempts given positionally) was taken as the function to wrap: the
    decorated function was called as ``3(fn)`` and raised TypeError at decoration time;
    ``retry(3)`` alone returned a wrapper that raised at each call."""
    if bad is None:
        assert callable(retry(None))  # retry() with no function: the decorator
        return
    with pytest.raises(ConfigurationError, match="keyword"):
        retry(bad)
