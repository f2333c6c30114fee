"""Stopping a blocking provider call from another thread.

A sync hedge race runs each leg in a thread of its own, under an :class:`Abort`
(:func:`abortable`). What such a call waits on registers how to stop waiting
(:func:`when_aborted`): the deadline watchdog shuts down the socket it reads, the local model
abandons its generation, a retry's backoff (:func:`sleep`) ends. When the race ends, the
loser's :meth:`Abort.abort` runs those at once (and any registered later), so the loser ends
now instead of reading an answer nobody will use until its deadline, and gives back its
rate-limit slot and reservation. A shadow's call runs under one too: a Guard's close
abandons it. A call that registered nothing (a route of the user's own, busy with its own
work as the race ends) is not stopped, but what it sends through the SDK's provider after
that is refused (:func:`aborted`): it sends no request nobody will use. One waiting for a
free connection of its pool wakes (it waited until its deadline).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "ABANDONED",
    "NOTHING_TO_FORGET",
    "Abort",
    "aborted",
    "abortable",
    "sleep",
    "when_aborted",
]

ABANDONED = "the call was abandoned (a hedge race's loser, or a closed Guard's shadow): not sent"
"""The error's words where an aborted call's request is refused before it is sent."""

logger = logging.getLogger("llmguard_sdk")


class Abort:
    """A blocking call's way to be stopped from another thread (see the module docs)."""

    __slots__ = ("_callbacks", "_lock", "aborted")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []  # (a few a call)
        self.aborted = False

    def on_abort(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when :meth:`abort` is called (at once if it was)."""
        with self._lock:
            if not self.aborted:
                self._callbacks.append(callback)
                return
        _run(callback)

    def forget(self, callback: Callable[[], object]) -> None:
        """Remove ``callback`` (the wait it stops has ended): a later :meth:`abort` neither
        runs it nor counts it as a call it stops."""
        with self._lock, contextlib.suppress(ValueError):  # (run already, or never registered)
            self._callbacks.remove(callback)

    def abort(self) -> bool:
        """Stop the call: run every callback registered, and any registered from now on.
        Whether any had been (the call waited on something that stops it: it ends now)."""
        with self._lock:
            self.aborted = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run(callback)
        return bool(callbacks)


def _run(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:
        logger.exception("stopping a hedge race's loser failed")


_CURRENT: contextvars.ContextVar[Abort | None] = contextvars.ContextVar(
    "llmguard_abort", default=None
)


@contextlib.contextmanager
def abortable(abort: Abort) -> Iterator[None]:
    """Run the block's blocking calls under ``abort`` (this thread's, or this context's)."""
    token = _CURRENT.set(abort)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def NOTHING_TO_FORGET() -> None:  # (a constant: the watchdog compares what it is given to it)
    """What :func:`when_aborted` returns when the call runs under no abort: nothing to
    remove."""


def when_aborted(callback: Callable[[Any], object], argument: Any) -> Callable[[], None]:
    """Register ``callback(argument)`` with the :class:`Abort` the current call runs under,
    if any (nothing is built when none: this is on every call's path). Returns how to remove
    it once the wait it stops has ended (else a later abort counts it, and the race's halt
    waits its grace for a call it cannot stop)."""
    abort = _CURRENT.get()
    if abort is None:
        return NOTHING_TO_FORGET
    registered = functools.partial(callback, argument)
    abort.on_abort(registered)
    return functools.partial(abort.forget, registered)


def aborted() -> bool:
    """Whether the call this runs in was aborted (the SDK's provider then sends nothing)."""
    abort = _CURRENT.get()
    return abort is not None and abort.aborted


def sleep(seconds: float) -> None:
    """``time.sleep(seconds)``, cut short when the call it is part of is aborted (a retry's
    backoff: an abandoned call starts no further attempt after a wait)."""
    abort = _CURRENT.get()
    if abort is None:
        time.sleep(seconds)
        return
    woken = threading.Event()
    wake = woken.set
    abort.on_abort(wake)
    try:
        woken.wait(seconds)
    finally:
        abort.forget(wake)  # (a later abort: nothing of this backoff to stop)
