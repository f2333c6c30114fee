"""Retrying on a result (tenacity's ``retry_if_result``), give-up hooks and the statistics
their details carry, for ``@retry`` (sync and async) and ``retry_context``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import (
    CallEvent,
    ConfigurationError,
    Guard,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.context import RetryDetails
from llmguard_sdk.errors import RejectedResultError
from llmguard_sdk.retry import (
    MemoryRetryBudget,
    RetryBudgetPolicy,
    RetryPolicy,
    retry,
    retry_context,
    waits_off,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER


@pytest.fixture(autouse=True)
def _no_waits() -> Iterator[None]:
    with waits_off():
        yield


class Answers:
    """Returns the given answers one per call (the last one from then on); an exception
    among them is raised."""

    def __init__(self, *answers: object) -> None:
        self.answers, self.calls = answers, 0

    def __call__(self) -> object:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def acall(self) -> object:
        return self()


def test_a_result_the_predicate_rejects_is_retried_until_one_passes() -> None:
    """``on_result=`` did not exist: a job still "pending" came back at once; now the call is
    made again until the predicate says no, and each retry reaches the hooks with a
    RejectedResultError carrying the result as its cause."""
    seen: list[RetryDetails] = []
    job = Answers("pending", "pending", "done")
    wrapped = retry(job, on_result=lambda r: r == "pending", attempts=5, hooks=[seen.append])
    assert wrapped() == "done"
    assert job.calls == 3
    assert [d.attempt for d in seen] == [1, 2]
    assert all(isinstance(d.cause, RejectedResultError) for d in seen)
    assert [d.cause.result for d in seen if isinstance(d.cause, RejectedResultError)] == [
        "pending",
        "pending",
    ]


def test_a_float_from_the_result_predicate_is_the_wait() -> None:
    seen: list[RetryDetails] = []
    job = Answers(None, 7)
    assert retry(job, on_result=lambda r: 0.25 if r is None else False, hooks=[seen.append])() == 7
    assert [(d.wait, d.hinted) for d in seen] == [(0.25, True)]


def test_running_out_on_a_result_raises_a_typed_error_with_the_last_result() -> None:
    """As tenacity's RetryError: the caller never gets a result it asked to retry as if it
    were good; the error carries it, the attempts made and why the retries stopped."""
    job = Answers("pending")
    with pytest.raises(RejectedResultError, match="pending") as info:
        retry(job, on_result=lambda r: r == "pending", attempts=3)()
    assert job.calls == 3
    assert (info.value.result, info.value.attempts, info.value.reason) == (
        "pending",
        3,
        "attempts-exhausted",
    )


def test_results_are_judged_in_async_functions_and_retry_context() -> None:
    job = Answers("pending", "done")

    @retry(on_result=lambda r: r == "pending")
    async def poll() -> object:
        return await job.acall()

    assert anyio.run(poll) == "done"
    assert job.calls == 2

    other = Answers(0, 0, 3)
    for attempt in retry_context(on_result=lambda n: n == 0, attempts=3):
        with attempt:
            count = other()
        attempt.set_result(count)  # (after the block, or inside it: before the next attempt)
    assert (count, other.calls) == (3, 3)

    async def main() -> object:
        third = Answers(0, 5)
        async for attempt in retry_context(on_result=lambda n: n == 0):
            with attempt:
                attempt.set_result(value := third())
        return value, third.calls

    assert anyio.run(main) == (5, 2)


def test_retry_context_raises_the_typed_error_from_its_loop() -> None:
    def loop() -> None:
        for attempt in retry_context(on_result=bool, attempts=2):
            with attempt:
                attempt.set_result([1])

    with pytest.raises(RejectedResultError) as info:
        loop()
    assert info.value.attempts == 2


def test_an_exception_still_follows_on_while_results_follow_on_result() -> None:
    calls = Answers(ProviderUnavailableError("down"), "pending", "done")
    assert retry(calls, on_result=lambda r: r == "pending", attempts=3)() == "done"
    assert calls.calls == 3


def test_a_result_predicate_that_raises_propagates_its_error() -> None:
    """A bug in the caller's predicate is not hidden: neither retried nor turned into a
    result; it says which result it was judging."""
    job = Answers({"state": "done"})
    with pytest.raises(KeyError) as info:
        retry(job, on_result=lambda r: r["status"] == "pending")()
    assert job.calls == 1
    assert any("on_result=" in note for note in getattr(info.value, "__notes__", []))


def test_a_result_predicate_that_is_not_one_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="on_result= must be a callable"):
        retry(Answers(), on_result="pending")  # type: ignore[call-overload]

    async def judge(result: object) -> bool:
        return False

    with pytest.raises(ConfigurationError, match="never awaited"):
        retry_context(on_result=judge)


def test_an_openai_answer_without_usage_is_asked_again(fake: FakeProvider) -> None:
    """A real use: a server that sometimes leaves ``usage`` out; the caller needs it."""
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    fake.script(Fault(omit_usage=True))

    @retry(on_result=lambda answer: answer.usage is None)
    def ask() -> Any:
        return client.chat.completions.create(model="m", messages=USER)

    assert ask().usage is not None
    assert fake.stats.requests == 2
    client.close()


def test_the_give_up_hook_is_called_once_with_the_call_statistics() -> None:
    """No hook said that the retries gave up; now ``give_up_hooks`` get one frozen
    RetryDetails: the attempts made, the time waited in all, why they stopped."""
    retried: list[RetryDetails] = []
    gave_up: list[RetryDetails] = []
    calls = 0

    def down() -> None:
        nonlocal calls
        calls += 1
        raise RateLimitedError("slow down", retry_after=0.5)

    with pytest.raises(RateLimitedError):
        retry(down, attempts=3, hooks=[retried.append], give_up_hooks=[gave_up.append])()
    assert calls == 3
    assert [d.waited for d in retried] == [0.0, 0.5]  # the waits before each retry's
    [last] = gave_up
    assert (last.attempt, last.wait, last.waited, last.reason) == (
        3,
        0.0,
        1.0,
        "attempts-exhausted",
    )
    assert isinstance(last.cause, RateLimitedError)
    with pytest.raises(AttributeError):
        last.attempt = 4  # type: ignore[misc]  # frozen, as the retry hooks' details


def test_the_give_up_hook_hears_of_results_and_budgets_but_not_of_what_is_never_retried() -> None:
    gave_up: list[RetryDetails] = []
    with pytest.raises(RejectedResultError):
        retry(Answers(None), on_result=lambda r: r is None, give_up_hooks=[gave_up.append])()
    assert [(d.reason, type(d.cause)) for d in gave_up] == [
        ("attempts-exhausted", RejectedResultError)
    ]

    gave_up.clear()
    with pytest.raises(KeyError):  # not retryable: nothing was given up
        retry(Answers({}), on_result=lambda r: r["x"], give_up_hooks=[gave_up.append])()
    with pytest.raises(ValueError, match="invalid literal"):
        retry(lambda: int("x"), give_up_hooks=[gave_up.append])()
    assert gave_up == []

    empty = MemoryRetryBudget(RetryBudgetPolicy(ratio=0.0, min_per_second=0.0, window=1e5))

    def down() -> None:
        raise ProviderUnavailableError("down")

    with pytest.raises(ProviderUnavailableError):
        retry(down, budget=empty, give_up_hooks=[gave_up.append])()
    assert [(d.reason, d.attempt) for d in gave_up] == [("budget-exhausted", 1)]

    async def main() -> None:
        async for attempt in retry_context(
            on_result=lambda r: r is None, attempts=2, give_up_hooks=[gave_up.append]
        ):
            with attempt:
                attempt.set_result(None)

    gave_up.clear()
    with pytest.raises(RejectedResultError):
        anyio.run(main)
    assert [(d.reason, d.attempt) for d in gave_up] == [("attempts-exhausted", 2)]


def test_give_up_hooks_are_checked_as_the_retry_hooks() -> None:
    with pytest.raises(ConfigurationError, match="give_up_hooks= must all be callables"):
        retry(Answers(), give_up_hooks=["print"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="give_up_hooks= must be a sequence"):
        retry_context(give_up_hooks=print)  # type: ignore[arg-type]


def test_the_guards_retries_say_what_the_call_waited_before_them(
    fake: FakeProvider, make_guard: Any
) -> None:
    """The Guard's RetryDetails carry the same statistic: the waits before each retry."""
    events: list[CallEvent] = []
    guard: Guard = make_guard(fake, retry=RetryPolicy(attempts=3), hooks=[events.append])
    fake.script(Fault(status=503, retry_after=0.25), Fault(status=503, retry_after_ms=500))
    assert guard.chat(USER).attempts == 3
    assert [(r.wait, r.waited) for r in events[-1].retries] == [(0.25, 0.0), (0.5, 0.25)]
