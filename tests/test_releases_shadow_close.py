"""Closing a Guard with a shadow: the shadow's calls are never shown to anyone, so a close
abandons the one in flight (its socket shut down, its retries' waits cut short) and drops
those queued, instead of waiting for them: a shadow call that hung held ``Guard.close()``
(and ``aclose()``) for its whole timeout, 30 s by default."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.models import ChatRequest, ChatResponse, StreamChunk
from llmguard_sdk.providers._abort import Abort, abortable, sleep
from llmguard_sdk.releases import Release, ReleasePlan, ShadowPolicy
from llmguard_sdk.releases.shadow import Shadow
from llmguard_sdk.testing import FakeProvider, Fault

USER = [{"role": "user", "content": "hello"}]
BOUND_S = 10.0  # generous on a loaded machine, yet far below the shadow's 30 s timeout


@pytest.fixture
def pair() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    """The release's provider and the candidate's, which takes a minute to answer."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        b.always(Fault(latency=60.0))
        yield a, b


def _guard(a: FakeProvider, b: FakeProvider) -> Guard:
    route_a = OpenAICompatibleProvider(a.base_url, model="m-2025-01-01", name="a")
    route_b = OpenAICompatibleProvider(b.base_url, model="n-2025-01-01", name="b")
    current, candidate = Release("bot", "v1", route_a), Release("bot", "v2", route_b)
    shadow = ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=None)  # timeout: 30 s
    plan = ReleasePlan(current, candidate=candidate, shadow=shadow)
    return Guard(release=plan, environ={}, telemetry=False)


def _shadow(guard: Guard) -> Shadow:
    assert guard.releases is not None
    assert guard.releases.shadow is not None
    return guard.releases.shadow


def _wait_for_the_candidate(b: FakeProvider) -> None:
    """Until the shadow's first call is at the candidate (hanging there)."""
    deadline = time.monotonic() + 10.0
    while b.stats.requests < 1:
        assert time.monotonic() < deadline, "the shadow call never reached the candidate"
        time.sleep(0.01)


def _shadow_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "llmguard-shadow"]


def _check_abandoned(shadow: Shadow, b: FakeProvider, took: float) -> None:
    assert took < BOUND_S, f"close took {took:.1f} s"
    report = shadow.report()
    assert report["abandoned_at_close"] == 3  # the call in flight and the two queued
    assert (report["pairs"], report["candidate_errors"]) == (0, 0)
    assert b.stats.requests == 1  # the queued copies were never sent
    assert shadow.drain(0.0)  # nothing left queued
    assert _shadow_threads() == []  # the worker ended


def test_close_abandons_a_hanging_shadow_call(pair: tuple[FakeProvider, FakeProvider]) -> None:
    a, b = pair
    guard = _guard(a, b)
    try:
        for _ in range(3):
            assert guard.chat(USER).route == "a"  # the user's answer, at once
        _wait_for_the_candidate(b)
    finally:
        started = time.monotonic()
        guard.close()
        took = time.monotonic() - started
    _check_abandoned(_shadow(guard), b, took)


def test_aclose_abandons_a_hanging_shadow_call(pair: tuple[FakeProvider, FakeProvider]) -> None:
    a, b = pair
    guard = _guard(a, b)

    async def main() -> float:
        try:
            for _ in range(3):
                assert (await guard.achat(USER)).route == "a"
            await anyio.to_thread.run_sync(_wait_for_the_candidate, b)
        finally:
            started = time.monotonic()
            await guard.aclose()
        return time.monotonic() - started

    took = anyio.run(main)
    _check_abandoned(_shadow(guard), b, took)


def test_an_aborted_calls_backoff_ends_at_once() -> None:
    """A retry's backoff under an abort ends when the call is aborted: an abandoned shadow
    call waited out its backoff (up to 1.5 s over three attempts) before its next attempt."""
    abort = Abort()
    timer = threading.Timer(0.05, abort.abort)
    timer.start()
    started = time.monotonic()
    with abortable(abort):
        sleep(30.0)
    took = time.monotonic() - started
    timer.join()
    assert took < BOUND_S
    with abortable(abort):  # aborted already: no wait at all
        sleep(30.0)


def test_a_backoff_that_ended_leaves_nothing_for_a_later_abort_to_stop() -> None:
    """A backoff's wake-up is removed once it ends: an abort after many backoffs has nothing
    to stop (each one's was kept: the abort counted them as a wait it stops)."""
    abort = Abort()
    with abortable(abort):
        for _ in range(20):
            sleep(0.0)
    assert abort.abort() is False


class _Blocking:
    """A provider of the user's own (a vendor SDK's blocking call inside) that registers no
    way to stop it: it answers once released."""

    name = "own"
    model: str | None = "own-2025-01-01"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        self.entered.set()
        self.released.wait(30.0)
        return ChatResponse(text="late", model=model)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        raise NotImplementedError

    def stream(self, request: ChatRequest, **timing: Any) -> Generator[StreamChunk, None, None]:
        raise NotImplementedError

    def astream(self, request: ChatRequest, **timing: Any) -> AsyncGenerator[StreamChunk, None]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def test_a_shadow_call_that_cannot_be_stopped_is_left_to_its_timeout_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A close does not wait for a call it cannot stop (past a 1 s grace): it says so, and the
    call ends in the background (here: once its provider answers), its worker then closing
    the shadow's Guard."""
    own = _Blocking()
    with FakeProvider(name="a") as a:
        current = Release("bot", "v1", OpenAICompatibleProvider(a.base_url, model="m-2025-01-01"))
        shadow = ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=None)
        plan = ReleasePlan(current, candidate=Release("bot", "v2", own), shadow=shadow)
        guard = Guard(release=plan, environ={}, telemetry=False)
        try:
            guard.chat(USER)
            assert own.entered.wait(10.0)
        finally:
            started = time.monotonic()
            with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
                guard.close()
            took = time.monotonic() - started
            own.released.set()
    assert took < BOUND_S
    assert "did not stop within 1 s of the close" in caplog.text
    for thread in _shadow_threads():
        thread.join(10.0)  # it ends once answered
    assert _shadow_threads() == []
