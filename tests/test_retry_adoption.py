"""The standalone retry as a tenacity user adopts it: openai's own methods decorated as they
are, the SDK's error types named in ``on=``, tests with waits off that do not depend on luck.
Real openai clients against a FakeProvider on loopback."""

from __future__ import annotations

import builtins
import functools
import importlib
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk.classify import classify_exception
from llmguard_sdk.errors import BadRequestError, ProviderUnavailableError, RateLimitedError
from llmguard_sdk.retry import (
    RetryDetails,
    RetryPolicy,
    is_retryable,
    retry,
    retry_context,
    waits_off,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER


@pytest.fixture
def no_waits() -> Iterator[None]:
    with waits_off():
        yield


def test_an_async_openai_method_decorated_as_it_is_is_retried(
    fake: FakeProvider, no_waits: None
) -> None:
    """``AsyncOpenAI().chat.completions.create`` is a plain function (a decorator of openai's
    wraps the async one) that returns a coroutine: the failure came when the caller awaited
    it, after the decorator had returned, and was never retried."""
    seen: list[RetryDetails] = []

    async def main() -> str:
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0
        ) as client:
            create = retry(client.chat.completions.create, hooks=[seen.append])
            completion = await create(model="fake-model", messages=USER)
            return completion.choices[0].message.content or ""

    fake.script(Fault(status=503))
    assert anyio.run(main) == "Echo: hello there"
    assert [type(d.cause) for d in seen] == [openai.InternalServerError]
    assert len(fake.requests) == 2


def async_wrapped_by_a_plain_decorator(
    fn: Callable[..., Awaitable[str]],
) -> Callable[..., Awaitable[str]]:
    @functools.wraps(fn)
    def plain(*args: Any, **kwargs: Any) -> Awaitable[str]:
        return fn(*args, **kwargs)

    return plain


def test_an_async_function_under_a_plain_decorator_is_retried(no_waits: None) -> None:
    calls: list[int] = []

    @retry(attempts=3)
    @async_wrapped_by_a_plain_decorator
    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ProviderUnavailableError("down")
        return "ok"

    assert anyio.run(flaky) == "ok"
    assert len(calls) == 3


def test_the_sdks_error_types_in_on_match_the_provider_sdks_errors(
    fake: FakeProvider, no_waits: None
) -> None:
    """``on=RateLimitedError`` retries openai's RateLimitError (which the SDK classifies as
    one), and only that: a 503 is not a rate limit."""
    seen: list[RetryDetails] = []
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:

        @retry(on=RateLimitedError, hooks=[seen.append])
        def ask() -> str:
            completion = client.chat.completions.create(model="fake-model", messages=USER)
            return completion.choices[0].message.content or ""

        fake.script(Fault(status=429, retry_after_ms=20))
        assert ask() == "Echo: hello there"
        assert [(type(d.cause), d.wait, d.hinted) for d in seen] == [
            (openai.RateLimitError, 0.02, True)
        ]
        fake.script(Fault(status=503))
        with pytest.raises(openai.InternalServerError):
            ask()
        assert len(seen) == 1


def test_a_named_type_that_is_no_sdk_error_matches_only_itself(no_waits: None) -> None:
    """``on=ConnectionError`` is the caller's own choice of type, not a classification."""
    calls: list[int] = []

    @retry(on=ConnectionError, attempts=3)
    def flaky() -> str:
        calls.append(1)
        raise ProviderUnavailableError("down")  # not a ConnectionError

    with pytest.raises(ProviderUnavailableError):
        flaky()
    assert len(calls) == 1


def test_with_waits_off_a_short_timeout_spends_every_attempt() -> None:
    """Waits that are not taken cannot overrun the timeout: with a 1 s timeout, retries whose
    backoff was longer than the time left were refused, so with full jitter the same test
    passed or failed by luck (here without jitter: 1, 2, 4 and 8 s were refused)."""
    calls: list[int] = []

    @retry(policy=RetryPolicy(attempts=6, timeout=1, jitter="none"))
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 6:
            raise ProviderUnavailableError("down")
        return "ok"

    with waits_off():
        assert flaky() == "ok"
    assert len(calls) == 6


def test_with_waits_off_a_server_hint_beyond_the_time_left_is_still_retried() -> None:
    calls: list[int] = []
    with waits_off():
        for attempt in retry_context(timeout=2):
            with attempt:
                calls.append(1)
                if len(calls) < 2:
                    raise RateLimitedError("slow down", retry_after=5.0)  # within the cap
    assert len(calls) == 2


def test_retry_above_staticmethod_is_retried_through_the_class_and_its_instances(
    fake: FakeProvider, no_waits: None
) -> None:
    """``@retry`` stacked above ``@staticmethod`` was accepted, but a call through an instance
    passed the instance as the first argument (TypeError)."""
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:

        class Assistant:
            @retry(attempts=3)
            @staticmethod
            def ask(question: str) -> str:
                messages = [{"role": "user", "content": question}]
                completion = client.chat.completions.create(
                    model="fake-model",
                    messages=messages,  # type: ignore[arg-type]
                )
                return completion.choices[0].message.content or ""

        fake.script(Fault(status=503))
        assert Assistant().ask("hello there") == "Echo: hello there"
        fake.script(Fault(status=503))
        assert Assistant.ask("hi") == "Echo: hi"
    assert len(fake.requests) == 4


def test_retry_above_an_async_staticmethod_is_retried_as_async(
    fake: FakeProvider, no_waits: None
) -> None:
    async def main() -> str:
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0
        ) as client:

            class Assistant:
                @retry
                @staticmethod
                async def ask() -> str:
                    completion = await client.chat.completions.create(
                        model="fake-model", messages=USER
                    )
                    return completion.choices[0].message.content or ""

            return await Assistant().ask()

    fake.script(Fault(status=503))
    assert anyio.run(main) == "Echo: hello there"
    assert len(fake.requests) == 2


def test_retry_above_classmethod_is_retried_with_its_class(no_waits: None) -> None:
    """``@retry`` above ``@classmethod`` was refused as no function; it wraps the
    classmethod's function now, which gets its class as ever."""

    class Counter:
        calls = 0

        @retry(attempts=3)
        @classmethod
        def flaky(cls, answer: str) -> str:
            cls.calls += 1
            if cls.calls < 3:
                raise ProviderUnavailableError("down")
            return answer

    assert Counter().flaky("ok") == "ok"
    assert Counter.calls == 3


def test_a_predicate_returning_a_match_or_a_status_code_retries_by_its_truthiness(
    fake: FakeProvider, no_waits: None
) -> None:
    """A regex match (truthy, no bool) raised ConfigurationError at the failure, hiding the
    503; a status code was taken for seconds to wait (503 s: beyond the cap, no retry)."""
    seen: list[RetryDetails] = []
    with openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:

        def ask() -> str:
            completion = client.chat.completions.create(model="fake-model", messages=USER)
            return completion.choices[0].message.content or ""

        by_text = retry(ask, on=lambda exc: re.search(r"Error code: 5\d\d", str(exc)))
        by_status = retry(ask, on=lambda exc: getattr(exc, "status_code", 0), hooks=[seen.append])
        fake.script(Fault(status=503))
        assert by_text() == "Echo: hello there"
        fake.script(Fault(status=503))
        assert by_status() == "Echo: hello there"
    assert len(fake.requests) == 4
    assert [(d.hinted, d.wait < 503) for d in seen] == [(False, True)]  # the backoff's wait


def test_a_predicate_returning_a_float_retries_after_that_wait(no_waits: None) -> None:
    seen: list[RetryDetails] = []
    calls: list[int] = []

    @retry(on=lambda exc: 0.5, hooks=[seen.append])
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise ValueError("once")
        return "ok"

    assert flaky() == "ok"
    assert [(d.wait, d.hinted) for d in seen] == [(0.5, True)]


class NoTruth:
    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array is ambiguous")


@pytest.mark.parametrize(
    ("predicate", "named"),
    [
        (lambda exc: exc.response.status_code >= 500, "AttributeError"),
        (lambda exc: NoTruth(), "ambiguous"),
    ],
)
def test_a_predicate_that_fails_never_hides_the_error_it_judged(
    no_waits: None, predicate: Callable[[BaseException], Any], named: str
) -> None:
    """The predicate's own error took the place of the provider's (a ProviderError has no
    ``response``): the provider's error propagates, not retried, with a note that says why."""
    calls: list[int] = []

    @retry(on=predicate, attempts=3)
    def flaky() -> str:
        calls.append(1)
        raise ProviderUnavailableError("down")

    with pytest.raises(ProviderUnavailableError, match="down") as raised:
        flaky()
    assert len(calls) == 1
    notes = getattr(raised.value, "__notes__", [])
    assert any("on=" in note and named in note for note in notes), notes


async def ask_twice_at_once(client: openai.AsyncOpenAI) -> list[str]:
    """Two requests in one task group: when both fail, it raises an ExceptionGroup of both
    (each is shielded, so the first failure does not cancel the other's request)."""
    answers: list[str] = []

    async def ask() -> None:
        with anyio.CancelScope(shield=True):
            completion = await client.chat.completions.create(model="fake-model", messages=USER)
        answers.append(completion.choices[0].message.content or "")

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        group.start_soon(ask)
    return answers


def test_a_task_groups_exception_group_of_retryable_failures_is_retried(
    fake: FakeProvider, no_waits: None
) -> None:
    """An ExceptionGroup whose members are all retryable is retried, after the longest wait
    its members asked for; it was not classified, so it was never retried by default."""
    seen: list[RetryDetails] = []

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0
        ) as client:
            return await retry(ask_twice_at_once, hooks=[seen.append])(client)

    fake.script(Fault(status=429, retry_after_ms=50), Fault(status=429, retry_after_ms=20))
    assert anyio.run(main) == ["Echo: hello there"] * 2
    assert [(d.wait, d.hinted) for d in seen] == [(0.05, True)]
    assert len(fake.requests) == 4


@pytest.mark.parametrize(
    ("status", "raised_by_openai"),
    [(400, openai.BadRequestError), (401, openai.AuthenticationError)],
)
def test_an_exception_group_with_a_member_not_worth_retrying_is_not_retried(
    fake: FakeProvider, no_waits: None, status: int, raised_by_openai: type[Exception]
) -> None:
    async def main() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0
        ) as client:
            return await retry(ask_twice_at_once)(client)

    fake.script(Fault(status=503), Fault(status=status))
    with pytest.raises(Exception, match="TaskGroup") as raised:  # an ExceptionGroup
        anyio.run(main)
    members = getattr(raised.value, "exceptions", ())
    assert {type(member) for member in members} == {openai.InternalServerError, raised_by_openai}
    assert len(fake.requests) == 2


def test_an_exception_group_is_classified_by_its_members() -> None:
    """Every member a provider failure: the group counts as its first member not worth
    retrying, else as the retryable member with the longest wait (nested groups too); a
    member that is no provider failure (a bug) leaves the group unclassified."""
    slow = RateLimitedError("slow down", retry_after=2.0)
    slower = RateLimitedError("slower", retry_after=5.0)
    down = ProviderUnavailableError("down")
    bad = BadRequestError("bad", status_code=400)
    group = exception_group([down, exception_group([slow, slower])])
    assert classify_exception(group) is slower
    assert is_retryable(group) == 5.0
    assert classify_exception(exception_group([down, bad, slow])) is bad
    assert classify_exception(exception_group([down, ValueError("a bug")])) is None
    assert is_retryable(exception_group([down, ValueError("a bug")])) is False
    refused = ProviderUnavailableError("refused", request_sent=False)
    both = classify_exception(exception_group([refused, down]))
    assert both is not None
    assert (str(both), both.request_sent) == ("refused", True)  # one of them was sent


def exception_group(members: list[Exception]) -> Exception:
    """An ExceptionGroup (the builtin, or the backport anyio uses on Python 3.10)."""
    kind: Any = (
        getattr(builtins, "ExceptionGroup", None)
        or importlib.import_module("exceptiongroup").ExceptionGroup
    )
    group: Exception = kind("failed", members)
    return group
