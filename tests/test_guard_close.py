"""A Guard closes its routes together: one slow to close (a local llama.cpp model may take up
to 10 s) no longer holds up the others, sync or async; each wait is bounded."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk._closing import aclose_all, close_all

URL = "http://127.0.0.1:9/v1"
TOGETHER = 10.0  # the most a route's close waits for the others to be closing too


class _Meeting:
    """Where the closes of ``routes`` routes wait for each other, ``TOGETHER`` s at most,
    and the log of when each close started and ended."""

    def __init__(self, routes: int) -> None:
        self.routes, self.arrived = routes, 0
        self.log: list[tuple[str, str, float]] = []
        self.barrier = threading.Barrier(routes)
        self.all_here: anyio.Event | None = None

    def overlapped(self) -> bool:
        """Whether every close started before any ended (the closes overlapped)."""
        starts = [at for kind, _, at in self.log if kind == "start"]
        ends = [at for kind, _, at in self.log if kind == "end"]
        return len(starts) == len(ends) == self.routes and max(starts) <= min(ends)


class _SlowToClose(OpenAICompatibleProvider):
    """A real route whose close is slow: it waits (bounded) until every route of its Guard
    is closing. Closed one after another, the first waits in vain and fails; closed
    together, every start comes before every end."""

    def __init__(self, name: str, meeting: _Meeting) -> None:
        super().__init__(URL, model="m", name=name)
        self.meeting = meeting

    def close(self) -> None:
        self.meeting.log.append(("start", self.name, time.monotonic()))
        self.meeting.barrier.wait(TOGETHER)
        super().close()
        self.meeting.log.append(("end", self.name, time.monotonic()))

    async def aclose(self) -> None:
        meeting = self.meeting
        meeting.log.append(("start", self.name, time.monotonic()))
        all_here = meeting.all_here = meeting.all_here or anyio.Event()
        meeting.arrived += 1
        if meeting.arrived == meeting.routes:
            all_here.set()
        with anyio.fail_after(TOGETHER):
            await all_here.wait()
        await super().aclose()
        meeting.log.append(("end", self.name, time.monotonic()))


def test_close_closes_the_routes_together() -> None:
    """close() closed route after route: the total was the sum of their closes."""
    meeting = _Meeting(2)
    routes = [_SlowToClose("local", meeting), _SlowToClose("remote", meeting)]
    Guard(routes, environ={}, telemetry=False).close()
    assert meeting.overlapped()


def test_aclose_closes_the_routes_together() -> None:
    meeting = _Meeting(2)
    routes = [_SlowToClose("local", meeting), _SlowToClose("remote", meeting)]
    anyio.run(Guard(routes, environ={}, telemetry=False).aclose)
    assert meeting.overlapped()


def test_a_close_that_outlasts_the_wait_is_reported_not_waited_for() -> None:
    """Every wait is bounded: a close still running when the wait ends is a TimeoutError
    naming it, the other closes' outcomes as they were."""
    release = threading.Event()
    closed: list[str] = []

    def stuck() -> None:
        release.wait(10)

    failures = close_all([("route 'stuck'", stuck), ("route 'quick'", lambda: None)], wait=0.05)
    release.set()
    assert [(what, type(error)) for what, error in failures] == [("route 'stuck'", TimeoutError)]
    assert "route 'stuck'" in str(failures[0][1])

    async def main() -> list[tuple[str, Exception]]:
        async def astuck() -> None:
            await anyio.sleep(10)

        async def aquick() -> None:
            closed.append("quick")

        return await aclose_all([("route 'stuck'", astuck), ("route 'quick'", aquick)], 0.05)

    afailures = anyio.run(main)
    assert [(what, type(error)) for what, error in afailures] == [("route 'stuck'", TimeoutError)]
    assert closed == ["quick"]


@pytest.mark.parametrize("closers", [0, 1])
def test_no_thread_is_started_for_one_close_or_none(closers: int) -> None:
    ran_in: list[threading.Thread] = []
    failures = close_all([("route", lambda: ran_in.append(threading.current_thread()))] * closers)
    assert failures == []
    assert ran_in == [threading.current_thread()] * closers
