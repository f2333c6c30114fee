"""Modules imported on first use, so that ``import llmguard_sdk`` stays light.

``from ._lazy import np`` gives a stand-in for numpy that imports it at its first attribute
read (the semantic cache's first vector), after which it holds numpy's attributes as its own,
as fast as the module itself. Type checkers see numpy: the modules that use it import
``numpy.typing`` under ``TYPE_CHECKING`` only.
"""

from __future__ import annotations

import contextlib
import importlib
import logging  # noqa: F401  (imported before the at-fork hook below is registered: see there)
import os
import sys
import threading
import time
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from anyio import to_thread

__all__ = ["LazyModule", "aloaded", "import_event_loop_backends", "loading", "np", "track", "warm"]

loading: list[threading.Thread] = []
"""The background loads a Guard started as it was built (tokenizer encodings, genai-prices
data, numpy) that no async call has yet seen end: an async call's one check on its way in."""


class LazyModule(types.ModuleType):
    """Stands for the module ``name`` and imports it at the first attribute read."""

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__name__)
        own = {k: v for k, v in vars(module).items() if not k.startswith("__")}
        self.__dict__.update(own)  # later reads find them without this method
        return getattr(module, attr)


if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")


def warm(name: str) -> threading.Thread | None:
    """Start importing the module ``name`` in a daemon thread unless it is imported already;
    returns the thread (None: nothing to import, or no thread could start: the first use
    imports it then). A Guard with a semantic cache calls it for numpy as it is built (a
    tenth of a second, more on a busy machine): its first call no longer imports it inside
    its deadline (a use meanwhile waits for the import under way: Python's import lock)."""
    if name in sys.modules:
        return None
    thread = threading.Thread(
        target=importlib.import_module, args=(name,), name="llmguard-import", daemon=True
    )
    try:
        thread.start()
    except RuntimeError:  # "can't start new thread": only a head start is lost
        return None
    return thread


def track(threads: Iterable[threading.Thread | None]) -> None:
    """Add the loads ``threads`` (None: none started) to :data:`loading`, dropping those that
    have ended (a process that builds Guards and never calls async keeps no list of them)."""
    loading[:] = [thread for thread in loading if thread.is_alive()]
    loading.extend(thread for thread in threads if thread is not None)


async def aloaded(within: float) -> None:
    """Wait for the loads under way in :data:`loading` in a worker thread, not on the event
    loop: a first async call would otherwise block the loop on a load's lock (the tokenizer's,
    the price data's, the import lock) for as long as the load takes, and every other task of
    the process with it. ``within`` seconds at most (then the call goes on, waiting as a sync
    call would where it needs a load); a cancel ends the wait at once (the loads go on)."""
    under_way = [thread for thread in loading if thread.is_alive()]
    if under_way:
        await to_thread.run_sync(_join, under_way, within, abandon_on_cancel=True)
    for thread in [thread for thread in loading if not thread.is_alive()]:
        if thread in loading:  # (another call may have removed it meanwhile)
            loading.remove(thread)


def _join(threads: list[threading.Thread], within: float) -> None:
    deadline = time.monotonic() + within
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


_FORK_WAIT_S = 30.0  # the longest a fork waits for the loads under way


def _loads_done_before_fork() -> None:
    """Before this process forks, wait for the loads under way (30 s at most): a load holds
    locks (the price data's, the tokenizer's, a module's import lock) that a forked child
    would inherit held by a thread it does not have, and its first call would wait for
    them for good (a server that builds its Guard, then forks its workers at once)."""
    _join([thread for thread in loading if thread.is_alive()], _FORK_WAIT_S)


# Python runs the before-fork hooks in the reverse order of their registration, and logging's
# takes its module lock: registered after it (logging is imported above), this one waits for
# the loads first, while a load may still need that lock (a module it imports gets a logger).
# Registered before it, a fork waited 30 s, then forked with the load's locks held.
if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(before=_loads_done_before_fork)


def import_event_loop_backends() -> None:
    """Import anyio's backend for asyncio (and trio's where trio is imported) now, unless
    imported already. anyio imports it at its first use, which is a Guard's first async call:
    on the event loop's thread, and while the Guard's loads hold the import lock, a quarter
    of a second instead of some twenty milliseconds. A Guard imports it as it is built."""
    names = ["asyncio", "trio"] if "trio" in sys.modules else ["asyncio"]
    for name in names:
        if f"anyio._backends._{name}" not in sys.modules:
            with contextlib.suppress(ImportError):  # (another layout: imported at first use)
                importlib.import_module(f"anyio._backends._{name}")
