"""A route silent for ``attempt_timeout`` is retried only while a retry as silent would still
leave the next route its own ``attempt_timeout``: a hung primary used to be retried until the
call's ``timeout`` was spent, so the backup was asked late or never (the README's
``timeout=30, attempt_timeout=10``, scaled to 3 and 1: the backup answered after 2.2-2.4 s,
or the call failed after 3 s without asking it)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from llmguard_sdk import AllRoutesFailedError, Guard, ProviderTimeoutError
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, USER, chat_in_mode
from .test_guard_retry import read_stream

MakeGuard = Callable[..., Guard]
RETRIES = RetryPolicy(attempts=3, base=0.01, cap=1.0)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_a_silent_route_hands_the_call_on_without_a_retry(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, stream: bool
) -> None:
    guard = make_guard(fake, fake2, timeout=3, attempt_timeout=1, retry=RETRIES)
    fake.always(Fault(hang=True))
    started = time.monotonic()
    response = read_stream(guard, mode, []) if stream else chat_in_mode(guard, mode)
    assert response.route == "backup"
    assert fake.stats.requests == 1  # asked once: the backup had the call after 1 s
    assert time.monotonic() - started < 2.5  # (1 s of silence, then the backup; a loaded CI)


@pytest.mark.parametrize("mode", MODES)
def test_a_silent_route_is_retried_while_the_next_keeps_its_time(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, timeout=10, attempt_timeout=0.5, retry=RETRIES)
    fake.script(Fault(hang=True))
    assert chat_in_mode(guard, mode).route == "primary"
    assert (fake.stats.requests, fake2.stats.requests) == (2, 0)


@pytest.mark.parametrize("mode", MODES)
def test_the_last_route_is_still_retried_after_silence(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, timeout=5, attempt_timeout=0.5, retry=RETRIES)
    fake.script(Fault(hang=True))
    assert chat_in_mode(guard, mode).route == "primary"
    assert fake.stats.requests == 2


def test_a_silent_route_moves_on_with_a_note_saying_why(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, timeout=1, attempt_timeout=0.4, retry=RETRIES)
    fake.always(Fault(hang=True))
    fake2.always(Fault(status=503))
    with pytest.raises(AllRoutesFailedError) as raised:
        guard.chat(USER)
    primary = raised.value.errors["primary"]
    assert isinstance(primary, ProviderTimeoutError)
    notes = getattr(primary, "__notes__", [])
    assert any("attempt_timeout" in note and "'backup'" in note for note in notes), notes


@pytest.mark.parametrize("stream", [False, True])
def test_an_attempt_cut_by_attempt_timeout_says_so(
    fake: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    guard = make_guard(fake, timeout=10, attempt_timeout=0.3, retry=None)
    fake.always(Fault(hang=True))
    with pytest.raises(ProviderTimeoutError) as raised:
        read_stream(guard, "sync", []) if stream else guard.chat(USER)
    notes = " | ".join(getattr(raised.value, "__notes__", []))
    assert "attempt_timeout=0.3 s passed" in notes, (str(raised.value), notes)
