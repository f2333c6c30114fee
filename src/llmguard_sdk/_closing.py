"""``with`` and ``async with`` for objects that close: one definition for all of them; and
closing several things together, each wait bounded (:func:`close_all`, :func:`aclose_all`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio
from typing_extensions import Self

__all__ = ["CLOSE_WAIT", "AsyncCloses", "Closes", "aclose_all", "close_all"]

CLOSE_WAIT = 30.0
"""Seconds :func:`close_all` and :func:`aclose_all` wait for closes at most (a local model's
close waits up to 10 s for its worker)."""

_PENDING = TimeoutError()  # a close that had not ended when the wait did


class Closes:
    """``with obj:`` calls ``obj.close()`` at the end of the block."""

    def close(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncCloses:
    """``async with obj:`` awaits ``obj.aclose()`` at the end of the block."""

    async def aclose(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def close_all(
    closers: Sequence[tuple[str, Callable[[], None]]], wait: float = CLOSE_WAIT
) -> list[tuple[str, Exception]]:
    """Call every ``(what, close)`` of ``closers`` at once, each in a thread of its own (one
    alone in this thread), and wait for them ``wait`` seconds at most: the time of the
    slowest, not the sum. Returns ``(what, error)`` for each that failed, in their order; a
    close still running when the wait ends is a :class:`TimeoutError` (it goes on in its
    daemon thread). An interruption that is no ``Exception`` is raised."""
    if len(closers) <= 1:
        return [failure for what, close in closers if (failure := _outcome(what, close))]
    outcomes: list[BaseException | None] = [_PENDING] * len(closers)

    def run(index: int, close: Callable[[], None]) -> None:
        try:
            close()
        except BaseException as exc:  # (handed to the caller's thread)
            outcomes[index] = exc
        else:
            outcomes[index] = None

    threads = [
        threading.Thread(target=run, args=(index, close), name="llmguard-close", daemon=True)
        for index, (_what, close) in enumerate(closers)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + wait
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return _failures(closers, outcomes, f"{wait} s; it goes on in the background")


async def aclose_all(
    closers: Sequence[tuple[str, Callable[[], Awaitable[None]]]], wait: float = CLOSE_WAIT
) -> list[tuple[str, Exception]]:
    """Async :func:`close_all`: every ``(what, aclose)`` awaited at once, in tasks of their
    own, ``wait`` seconds at most (a close still running then is cancelled and reported as
    a :class:`TimeoutError`)."""
    outcomes: list[BaseException | None] = [_PENDING] * len(closers)

    async def run(index: int, aclose: Callable[[], Awaitable[None]]) -> None:
        try:
            await aclose()
        except Exception as exc:
            outcomes[index] = exc
        else:
            outcomes[index] = None

    with anyio.move_on_after(wait):
        async with anyio.create_task_group() as tasks:
            for index, (_what, aclose) in enumerate(closers):
                tasks.start_soon(run, index, aclose)
    return _failures(closers, outcomes, f"{wait} s; it was cancelled")


def _outcome(what: str, close: Callable[[], None]) -> tuple[str, Exception] | None:
    try:
        close()
    except Exception as exc:
        return what, exc
    return None


def _failures(
    closers: Sequence[tuple[str, object]], outcomes: list[BaseException | None], late: str
) -> list[tuple[str, Exception]]:
    """The failures of ``closers`` by their ``outcomes``; one still pending took longer
    than ``late`` says."""
    failures: list[tuple[str, Exception]] = []
    for (what, _close), outcome in zip(closers, outcomes, strict=True):
        if outcome is _PENDING:
            outcome = TimeoutError(f"closing {what} took longer than {late}")
        if outcome is None:
            continue
        if not isinstance(outcome, Exception):
            raise outcome  # (an interruption of a close: not a failure to note)
        failures.append((what, outcome))
    return failures
