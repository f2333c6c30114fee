"""A hedged call whose loser the race's abort does not stop (a local model in its prompt
pass; here a wait that ignores it) answers with the winner, not after the loser: the race's
win waited for every stopped leg that had registered an abort until the call's deadline."""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread
import pytest

from llmguard_sdk import ChatRequest, ChatResponse, Guard, OpenAICompatibleProvider
from llmguard_sdk.providers._abort import when_aborted
from llmguard_sdk.testing import FakeProvider

from .test_hedge_spend_late import _Late

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
