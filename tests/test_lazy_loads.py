"""The loads a Guard starts as it is built (:data:`llmguard_sdk._lazy.loading`): a first async
call waits for them off the event loop, but no longer than its timeout (a wait is bounded),
and the list keeps only loads under way (a process that builds Guards and never calls async
kept every ended thread)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from llmguard_sdk import _lazy


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """A load that lasts until the test opens the gate (opened at the end in any case)."""
    opened = threading.Event()
    saved = list(_lazy.loading)
    yield opened
    opened.set()
    _lazy.loading[:] = saved


def _load(gate: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=gate.wait, args=(30,), daemon=True)
    thread.start()
    return thread


def test_the_wait_for_a_load_is_bounded_by_the_calls_time(gate: threading.Event) -> None:
    _lazy.track([_load(gate)])
    started = time.monotonic()
    anyio.run(_lazy.aloaded, 0.2)
    assert time.monotonic() - started < 10  # the load goes on for 30 s: not waited out
    assert any(thread.is_alive() for thread in _lazy.loading)  # still under way: kept


def test_ended_loads_are_dropped_as_new_ones_are_tracked(gate: threading.Event) -> None:
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    _lazy.track([ended, None])
    _lazy.track([_load(gate)])
    assert ended not in _lazy.loading
    assert all(thread.is_alive() for thread in _lazy.loading)
