"""Closing a :class:`~llmguard_sdk.Guard`: its spend journal replayed, its background
probes and releases stopped, every route's connections and the store's closed.

(Split from :mod:`llmguard_sdk.guard`, which builds the Guard and runs its calls.)
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial

from anyio import to_thread

from ._closing import AsyncCloses, Closes
from ._core.stages import Stages
from ._state.steps import Step, arun, done, run
from .store import Store

__all__ = ["Lifecycle"]

logger = logging.getLogger("llmguard_sdk")

_Closer = tuple[str, Callable[[], None], Callable[[], Awaitable[None]]]


class Lifecycle(Closes, AsyncCloses):
    """``close`` / ``aclose`` and ``with`` / ``async with`` (a part of
    :class:`~llmguard_sdk.Guard`)."""

    _stages: Stages
    store: Store

    def close(self) -> None:
        """Replay spend journaled while Redis was unreachable (one try), then close every
        route's connections and the store's. Each is closed even when one before it fails;
        then the first failure is raised, the others noted on it (and logged)."""
        try:
            run(self._spend_flush())
        except Exception:
            logger.exception("replaying the spend journal at close failed")
        failures: list[tuple[str, Exception]] = []
        for what, close, _aclose in self._closers():
            try:
                close()
            except Exception as exc:
                failures.append((what, exc))
        _raise_first(failures)

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (the route's async and sync connections)."""
        try:
            await arun(self._spend_flush())
        except Exception:
            logger.exception("replaying the spend journal at close failed")
        failures: list[tuple[str, Exception]] = []
        for what, _close, aclose in self._closers():
            try:
                await aclose()
            except Exception as exc:
                failures.append((what, exc))
        _raise_first(failures)

    def _closers(self) -> list[_Closer]:
        """What the Guard closes, in order: what it is (for the error notes), its close and
        its async close (background threads are joined off the event loop)."""
        stages = self._stages
        closers: list[_Closer] = []
        for what, threads in (("breaker probes", stages.prober), ("releases", stages.releases)):
            if threads is not None:
                closers.append((what, threads.close, partial(to_thread.run_sync, threads.close)))
        closers += [(f"route {r.name!r}", r.close, r.aclose) for r in stages.routes]
        closers.append(("store", self.store.close, self.store.aclose))
        return closers

    def _spend_flush(self) -> Step[bool]:
        spend = self._stages.spend
        if spend is None or not spend.active:
            return done(True)
        return spend.flush_steps()


def _raise_first(failures: list[tuple[str, Exception]]) -> None:
    """Raise the first failure of a close, the others noted on it (and logged)."""
    if not failures:
        return
    first = failures[0][1]
    for what, exc in failures[1:]:
        logger.error("closing the Guard's %s failed too", what, exc_info=exc)
        note = f"closing the Guard's {what} failed too: {exc!r}"
        if sys.version_info >= (3, 11):
            first.add_note(note)
        else:  # pragma: no cover - (the notes a traceback shows, as add_note keeps them)
            setattr(first, "__notes__", [*getattr(first, "__notes__", []), note])  # noqa: B010
    raise first
