"""A hedged call whose loser the race's abort does not stop (a local model in its prompt
pass; here a wait that ignores it) answers with the winner, not after the loser: the race's
win waited for every stopped leg that had registered an abort until the call's deadline. A
loser that registered nothing, busy with its own work as the race ended, sends no request
through the SDK's provider after that; one waiting for a free connection of its pool ends
with the race, charged nothing. An async call cancelled as its race halts its losers (a
non-streaming winner in hand) leaves nothing held."""

from __future__ import annotations

import contextlib
import threading
import time

import anyio
import anyio.to_thread
import pytest

from llmguard_sdk import (
    ChatRequest,
    ChatResponse,
    Guard,
    OpenAICompatibleProvider,
    ProviderError,
    ProviderUnavailableError,
)
from llmguard_sdk._core import drive
from llmguard_sdk.providers._abort import when_aborted
from llmguard_sdk.testing import FakeProvider, Fault

from .test_budget_unserved import BUDGETS, _spent
from .test_fake_provider import wait_until
from .test_hedge_spend_late import _Late

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
RELEASE_AFTER_S = 5.0  # the loser is let go by a timer then, if the call has not returned


class _Stuck(_Late):
    """A route that registers an abort doing nothing, then waits until it is let go (its
    streams, the SDK's provider's: ``_Late``'s)."""

    def __init__(self, server: FakeProvider) -> None:
        super().__init__(server)
        self.release = threading.Event()

    def _wait(self) -> ChatResponse:
        when_aborted(lambda _: None, None)  # (an abort that does not reach the wait)
        self.release.wait(30)
        raise RuntimeError("let go")

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        return self._wait()

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        return await anyio.to_thread.run_sync(self._wait, abandon_on_cancel=True)

    def close(self) -> None:
        self.release.set()
        super().close()

    async def aclose(self) -> None:
        self.release.set()
        await super().aclose()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hedged_call_does_not_wait_for_a_loser_its_abort_does_not_stop(
    fake: FakeProvider, fake2: FakeProvider, mode: str
) -> None:
    stuck = _Stuck(fake)
    backup = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name=fake2.name)
    guard = Guard([stuck, backup], hedge_after=0.05, timeout=20, retry=None, environ={})
    timer = threading.Timer(RELEASE_AFTER_S, stuck.release.set)
    timer.start()
    try:
        if mode == "sync":
            answer = guard.chat([{"role": "user", "content": "hi"}])
        else:
            answer = anyio.run(lambda: guard.achat([{"role": "user", "content": "hi"}]))
        released_by_then = stuck.release.is_set()
    finally:
        timer.cancel()
        stuck.release.set()
        guard.close()
    assert answer.route == fake2.name
    assert not released_by_then  # answered while the loser was still stuck


class _Busy(_Late):
    """A route of the user's own that registers nothing with the race's abort: its own work
    (a wait only the test ends) first, then a call to the SDK's provider; what that call
    ended with is kept."""

    def __init__(self, server: FakeProvider) -> None:
        super().__init__(server)
        self.go = threading.Event()
        self.ended = threading.Event()
        self.outcome: list[object] = []

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        try:
            self.go.wait(30)
            answer = self.inner.complete(request, model=model, deadline=deadline)
            self.outcome.append(answer)
            return answer
        except BaseException as exc:
            self.outcome.append(exc)
            raise
        finally:
            self.ended.set()


def test_a_loser_that_registered_nothing_sends_no_request_after_the_race(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """The loser's provider call, made after the race ended, is refused before anything is
    sent (it connected, and only then did the abort shut its socket)."""
    busy = _Busy(fake)
    backup = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name=fake2.name)
    guard = Guard([busy, backup], hedge_after=0.05, timeout=20, retry=None, environ={})
    try:
        answer = guard.chat([{"role": "user", "content": "hi"}])
        busy.go.set()
        assert busy.ended.wait(10)
    finally:
        busy.go.set()
        guard.close()
    assert answer.route == fake2.name
    assert [type(outcome) for outcome in busy.outcome] == [ProviderUnavailableError]
    assert (fake.stats.connections, fake.stats.requests) == (0, 0)


def test_a_loser_waiting_for_a_free_connection_ends_with_the_race(
    fake: FakeProvider, fake2: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loser waiting for a connection of its full pool (registered with nothing: waiting
    until its deadline, its reservation held meanwhile, then charged its estimate) is woken
    by the race's end: it ends within the halt's grace, having sent nothing, charged
    nothing."""
    # a grace no loaded machine misses: what is checked is that the woken loser ends then,
    # not at its deadline (20 s), and is charged nothing
    monkeypatch.setattr(drive, "_HALT_GRACE_S", 5.0)
    primary = OpenAICompatibleProvider(
        fake.base_url, model=fake.model, name=fake.name, max_connections=1
    )
    backup = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name=fake2.name)
    guard = Guard(
        [primary, backup], budgets=BUDGETS, hedge_after=0.05, timeout=20, retry=None, environ={}
    )
    fake.script(Fault(hang=True))  # the pool's one connection: taken by a call that hangs
    hanging = threading.Thread(target=_call_quietly, args=(primary,), daemon=True)
    hanging.start()
    try:
        assert wait_until(lambda: fake.stats.requests == 1, 10)
        answer = guard.chat([{"role": "user", "content": "hi"}])
        spent = _spent(guard)  # (nothing held: the loser's reservation was given back)
    finally:
        guard.close()
    assert answer.route == fake2.name
    usage = answer.usage
    assert usage is not None
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6  # (its prices)
    assert (answer.cost_usd, spent) == pytest.approx((backup_usd, backup_usd))  # not the loser's
    assert fake.stats.requests == 1  # the hanging call's


def _call_quietly(provider: OpenAICompatibleProvider) -> None:
    with contextlib.suppress(ProviderError):
        provider.complete(REQUEST, model="m", deadline=time.monotonic() + 20)


class _Lingering(_Late):
    """An async route that waits until cancelled, then (shielded) until let go: the race
    that cancelled it, halting its losers, waits for its end meanwhile."""

    def __init__(self, server: FakeProvider) -> None:
        super().__init__(server)
        self.halted = anyio.Event()
        self.release = anyio.Event()

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        try:
            await anyio.sleep(30)
        finally:
            self.halted.set()
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await self.release.wait()
        raise AssertionError("not halted")


def test_an_async_call_cancelled_as_its_race_halts_its_losers_leaves_nothing_held(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """The caller's cancel lands while the race, its (non-streaming) winner's answer in hand,
    waits for the loser it halted: the winner's and the loser's reservations are settled."""

    async def main() -> None:
        lingering = _Lingering(fake)
        backup = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name=fake2.name)
        guard = Guard(
            [lingering, backup], budgets=BUDGETS, hedge_after=0.05, timeout=20, retry=None,
            environ={},
        )  # fmt: skip
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(guard.achat, [{"role": "user", "content": "hi"}])
                await lingering.halted.wait()
                tasks.cancel_scope.cancel()  # (the race waits in its halt for the loser)
                lingering.release.set()
            assert fake2.stats.succeeded == 1  # the winner had answered
            assert fake.stats.requests == 0
            _spent(guard)  # nothing held
        finally:
            lingering.release.set()
            await guard.aclose()

    anyio.run(main)
