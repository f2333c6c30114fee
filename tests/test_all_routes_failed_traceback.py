"""A failed chain's :class:`AllRoutesFailedError` reads usefully: each route's error with the
first line of its first note (why it was not retried, why the call moved on) in its message,
and the last route's error as its ``__cause__``, so a traceback shows that error, its notes
and its own frames. Before, the notes showed nowhere and the traceback stopped at the SDK."""

from __future__ import annotations

import traceback
from collections.abc import Callable

import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    Guard,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.retry._verdicts import note
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode

MakeGuard = Callable[..., Guard]
QUICK = RetryPolicy(attempts=2, base=0.01, cap=8.0)


@pytest.mark.parametrize("mode", MODES)
def test_the_message_names_each_route_s_note_and_the_last_error_is_the_cause(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, timeout=10, retry=QUICK, breaker=None)
    fake.always(Fault(status=503))
    fake2.always(Fault(status=429, retry_after=30))  # past the cap: not retried, noted so
    with pytest.raises(AllRoutesFailedError) as raised:
        chat_in_mode(guard, mode)
    error = raised.value
    primary, backup = error.errors["primary"], error.errors["backup"]
    assert isinstance(primary, ProviderUnavailableError)
    assert isinstance(backup, RateLimitedError)
    said = str(error)
    assert "primary: ProviderUnavailableError: fake error 503" in said
    assert "[gave up after 2 attempts" in said, said  # primary's note, first line
    assert "RetryPolicy.cap=8" in said, said  # backup's
    assert error.__cause__ is backup  # the last route's error: its traceback is shown
    shown = "".join(traceback.format_exception(error))
    assert "The above exception was the direct cause" in shown
    assert "fake error 429" in shown
    assert "RetryPolicy.cap=8" in shown  # the cause's notes, under its traceback


def test_errors_without_notes_read_as_before() -> None:
    first = ProviderUnavailableError("down", route="a", status_code=503)
    last = RateLimitedError("slow down", route="b", status_code=429)
    error = AllRoutesFailedError({"a": first, "b": last})
    assert str(error) == (
        "all routes failed (a: ProviderUnavailableError: down (HTTP 503) [route=a]; "
        "b: RateLimitedError: slow down (HTTP 429) [route=b])"
    )
    assert error.__cause__ is last
    assert error.errors == {"a": first, "b": last}  # its attributes mean what they meant
    assert AllRoutesFailedError({}).__cause__ is None


def test_only_a_note_s_first_line_goes_in_the_message() -> None:
    failed = ProviderUnavailableError("down", route="a")
    note(failed, "not retried: the breaker opened\nsecond line, long details")
    note(failed, "another note")
    error = AllRoutesFailedError({"a": failed})
    assert str(error) == (
        "all routes failed (a: ProviderUnavailableError: down [route=a] "
        "[not retried: the breaker opened])"
    )
