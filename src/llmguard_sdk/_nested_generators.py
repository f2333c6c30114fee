"""Async generators nested in an SDK stream are closed by their owner alone.

A stream's async generator (the Guard's, a decorator's) iterates others: the driver's, the
provider's, the HTTP body's. Each closes the one it iterates in its ``finally``. But the
event loop also finalizes every async generator it saw start: when a stream dropped in a
reference cycle is collected, the loop closes *each* generator of the chain in a task of its
own, and the owners' ``finally`` blocks close the same ones: every nested generator's task
then fails with "aclose(): asynchronous generator is already running", logged by asyncio as
"Task exception was never retrieved" (three to four errors a dropped stream). The loop's
shutdown (``shutdown_asyncgens``) closes them all at once too.

:func:`owned_by_caller` awaits one step of an outer generator with the interpreter's async
generator hooks (:func:`sys.set_asyncgen_hooks`) replaced while the step runs: a generator
first iterated inside it is neither registered with the loop nor finalized by it (its
finalizer does nothing, so the collector leaves it to the owner that holds it: when the owner
is closed, it closes it). The hooks are per thread and restored before each suspension, so
other tasks of the loop never run under them.

:func:`close_thrown_again` is for the one generator the loop does finalize (the stream's): see
its docs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncGenerator, Awaitable, Generator
from typing import Any, TypeVar

import anyio.lowlevel

__all__ = ["close_thrown_again", "owned_by_caller"]

T = TypeVar("T")


def _left_to_owner(generator: AsyncGenerator[Any, Any]) -> None:
    """The finalizer of a nested generator: its owner closes it (see the module docs)."""


def owned_by_caller(step: Awaitable[T]) -> Awaitable[T]:
    """``step`` (e.g. ``outer.__anext__()``), awaited so that the async generators first
    iterated while it runs are left to their owners to close (see the module docs)."""
    return _Stepped(step)


class _Stepped(Awaitable[T]):
    __slots__ = ("_step",)

    def __init__(self, step: Awaitable[T]) -> None:
        self._step = step

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self._step.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            hooks = sys.get_asyncgen_hooks()
            sys.set_asyncgen_hooks(firstiter=None, finalizer=_left_to_owner)
            try:
                yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
            except StopIteration as stop:
                result: T = stop.value
                return result
            finally:
                sys.set_asyncgen_hooks(*hooks)
            sent, thrown = None, None
            try:
                sent = yield yielded
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # a cancellation thrown in: passed on to the step
                thrown = exc


async def close_thrown_again() -> None:
    """Take the second ``GeneratorExit`` that CPython before 3.13 throws into an async
    generator whose ``aclose()`` was cancelled before it began; call it first thing when an
    exception other than ``GeneratorExit`` reaches the generator where it waits for its
    reader (nothing but such a close puts one there).

    The loop closes a dropped generator in a task of its own, and ``asyncio.run()``'s shutdown
    cancels the tasks it finds, that one too when it has not run yet: the cancellation is then
    thrown in where the generator waits, and (the ``aclose()`` awaitable left in its initial
    state) a ``GeneratorExit`` again at the generator's first suspension. Met deep in its
    cleanup, that one unwound the generators it closes half-way, their cancel scopes left
    entered ("Attempted to exit a cancel scope that isn't the current tasks's current cancel
    scope"). Suspended here first, the generator takes it here, and its cleanup then runs
    whole. (On CPython 3.13 and later this is one checkpoint, nothing thrown.)"""
    with contextlib.suppress(GeneratorExit):
        await anyio.lowlevel.checkpoint()
