"""Sync calls' async filters share one event loop a process: a client a filter keeps (an
``httpx.AsyncClient`` made once, at module level) serves every sync call, a forked
child gets a loop of its own, a loop that a filter's blocking code holds is given up,
Ctrl-C while a sync call waits cancels its filter and reports a cancelled call, and a sync
call made by a filter on the loop runs its own async filters."""

from __future__ import annotations

import linecache
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from llmguard_sdk import (
    CallEvent,
    ChatRequest,
    ChatResponse,
    Guard,
    GuardrailRejectedError,
    ProviderTimeoutError,
)
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_async_filters import (
    BOUND_S,
    _assert_charged_once,
    checked,
    never_done,
    refuse_output,
)
from .test_call_parity import PRICES, call_in_shape
from .test_fork_after_build import _run
from .test_telemetry import Exported, call_span, exporting

otel = pytest.fixture(exporting, name="otel")

MakeGuard = Callable[..., Guard]


def test_a_kept_async_client_serves_consecutive_sync_calls(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A moderation filter's one ``httpx.AsyncClient`` answers in every sync call (on a
    loop a call, the second call failed: ``Event loop is closed``, after the provider
    billed the answer)."""
    moderation = httpx.AsyncClient(timeout=10.0)
    statuses: list[int] = []

    async def moderate(response: ChatResponse) -> None:
        statuses.append((await moderation.get(fake.base_url + "/v1/models")).status_code)

    guard = make_guard(fake, output_filters=[moderate])
    texts = [guard.chat(USER, timeout=10.0).text for _ in range(3)]
    assert texts == ["Echo: hello there"] * 3
    assert len(statuses) == 3
    assert fake.stats.requests == 3


# A fresh interpreter: an async filter keeps one client; a call in the parent (its filter
# loop starts), then a forked child's call; prints the child's exit code.
FORKED = """
import os, sys
import httpx
from llmguard_sdk import Guard, OpenAICompatibleProvider

moderation = httpx.AsyncClient(timeout=10.0)
async def moderate(response):
    await moderation.get(sys.argv[1] + "/v1/models")
    return response.model_copy(update={"text": response.text + " [checked]"})

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None, output_filters=[moderate])
assert guard.chat([{"role": "user", "content": "hi"}], timeout=10).text.endswith("[checked]")
pid = os.fork()
if pid == 0:
    moderation = httpx.AsyncClient(timeout=10.0)  # (the child's own connections)
    answer = guard.chat([{"role": "user", "content": "hi"}], timeout=5)
    os._exit(0 if answer.text.endswith("[checked]") else 1)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))  # (bounded: its call's timeout)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_async_filters_on_a_loop_of_its_own(fake: FakeProvider) -> None:
    """The parent's filter loop thread did not come along: the child starts its own (else
    its filter's wait would never start, and the call time out)."""
    assert _run(FORKED, fake) == "0"


def test_a_filter_that_blocks_the_loop_stalls_no_call_past_its_deadline(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """An async filter that calls blocking code holds the shared loop: a call waiting on it
    meanwhile times out at its own deadline, and the loop is given up, so the next call's
    async filter runs on a fresh one (it timed out too, as long as the blocking code ran).
    The blocking filter's own call, within its deadline, still gets its answer: the old
    loop runs on until its waits end."""
    blocking, release = threading.Event(), threading.Event()

    async def holds_the_loop(response: ChatResponse) -> ChatResponse:
        blocking.set()
        release.wait(BOUND_S * 2)  # (blocking code in an async filter)
        await anyio.sleep(0.01)  # (its next step: after the loop was given up)
        return response.model_copy(update={"text": response.text + " [held]"})

    blocked = make_guard(fake, output_filters=[holds_the_loop])
    guard = make_guard(fake, output_filters=[checked])
    ended: list[object] = []

    def blocked_call() -> None:
        try:
            ended.append(blocked.chat(USER, timeout=BOUND_S * 3).text)
        except BaseException as exc:
            ended.append(exc)

    caller = threading.Thread(target=blocked_call)
    try:
        caller.start()
        assert blocking.wait(BOUND_S)
        with pytest.raises(ProviderTimeoutError, match="checked"):
            guard.chat(USER, timeout=0.5)  # waits behind the blocking filter: its deadline
        assert guard.chat(USER, timeout=BOUND_S / 2).text == "Echo: hello there [checked]"
    finally:
        release.set()
        caller.join(BOUND_S * 4)
    assert ended == ["Echo: hello there [held]"]


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread (Python's own handler)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def ctrl_c_once_waiting() -> None:
    """Press Ctrl-C for the main thread once it waits for this filter: blocked in the timed
    ``waiter.acquire(True, timeout)`` of ``Condition.wait`` (a signal handled a line
    earlier, where that wait holds no lock it restores, could leave the future's lock
    held). A signal that lands just before that acquire blocks is only handled once it
    returns (CPython checks for signals before it blocks, not while): pressed again while
    the main thread still waits in that same frame, a few times at most (one press handled
    leaves that frame: no second KeyboardInterrupt)."""
    main = threading.main_thread()
    assert main.ident is not None
    waiting = None
    for _ in range(int(BOUND_S * 1000)):
        waiting = _waiting_frame(main.ident)
        if waiting is not None:
            break
        time.sleep(0.001)
    for _ in range(PRESSES):
        signal.pthread_kill(main.ident, signal.SIGINT)
        for _ in range(250):  # (0.25 s to leave the wait)
            time.sleep(0.001)
            if waiting is None or _waiting_frame(main.ident) is not waiting:
                return


PRESSES = 40
"""Ctrl-C presses at most (one is enough unless it landed in the gap before the acquire)."""


def _waiting_frame(ident: int) -> FrameType | None:
    """The thread's frame if it waits in ``Condition.wait``'s timed acquire, else None."""
    frame = sys._current_frames().get(ident)
    if frame is None or frame.f_code.co_name != "wait":
        return None
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return frame if "waiter.acquire(True" in line else None


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
@pytest.mark.parametrize("stage", ["input", "output"])
@pytest.mark.parametrize("shape", ["chat", "stream"])
@pytest.mark.usefixtures("interruptible")
def test_ctrl_c_in_a_sync_calls_async_filter_cancels_it_and_reports_a_cancelled_call(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, stage: str, shape: str
) -> None:
    """KeyboardInterrupt while a sync call waits for an async filter on the filter loop:
    the filter's task is cancelled (it ran on, until the deadline) and the call is reported
    as cancelled, as an async call's cancel is (an input filter's: it was reported nowhere;
    an output filter's: its answer is charged as billed)."""
    cancelled = threading.Event()

    async def stuck(value: Any) -> None:
        try:
            await anyio.to_thread.run_sync(ctrl_c_once_waiting)
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    events: list[CallEvent] = []
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = make_guard(
        fake, budgets=budgets, hooks=[events.append], telemetry=otel.telemetry,
        **{f"{stage}_filters": [stuck]},
    )  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        call_in_shape(guard, shape, max_tokens=10, timeout=BOUND_S * 3)  # (a failure, no hang)
    assert cancelled.wait(BOUND_S)
    (event,) = events
    assert (event.outcome, event.error) == ("cancelled", None)
    attributes = call_span(otel).attributes or {}
    assert attributes["llmguard.outcome"] == "cancelled"
    assert fake.stats.requests == (stage == "output")
    if stage == "output":
        _assert_charged_once(guard)


def test_a_sync_call_made_by_an_async_filter_on_the_filter_loop_runs_its_own_filters(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A sync call made inside an async filter (on the filter loop's thread, which it holds)
    runs its own async filters on a loop of their own: their answers and their refusals
    reach it, a filter of its own past its deadline times it out, and a sync call made by
    one of those filters gets a loop of its own too (it waited on the shared loop, held by
    the first filter: a deadlock until its deadline, ProviderTimeoutError)."""
    inner = make_guard(fake, output_filters=[checked])

    async def calls_inner(response: ChatResponse) -> ChatResponse:
        text = f"{inner.chat(USER, timeout=BOUND_S).text} in {threading.current_thread().name}"
        return response.model_copy(update={"text": text})

    deeper = make_guard(fake, output_filters=[calls_inner])
    refusing = make_guard(fake, output_filters=[refuse_output])
    late = make_guard(fake, input_filters=[never_done])
    seen: list[tuple[str, str]] = []

    async def nested(request: ChatRequest) -> None:
        where = threading.current_thread().name
        seen.append((where, inner.chat(USER, timeout=BOUND_S).text))
        seen.append((where, deeper.chat(USER, timeout=BOUND_S).text))
        with pytest.raises(GuardrailRejectedError, match="not this answer"):
            refusing.chat(USER, timeout=BOUND_S)
        with pytest.raises(ProviderTimeoutError, match="never_done"):
            late.chat(USER, timeout=0.5)
        seen.append((where, "done"))

    outer = make_guard(fake, input_filters=[nested])
    assert outer.chat(USER, timeout=BOUND_S).text == "Echo: hello there"
    assert seen == [
        ("llmguard-filters", "Echo: hello there [checked]"),
        ("llmguard-filters", "Echo: hello there [checked] in llmguard-filter"),
        ("llmguard-filters", "done"),
    ]
