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

from ._closing import AsyncCloses, Closes, aclose_all, close_all
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
        route's connections and the store's. The routes are closed together (a local
        model's close may take seconds: the others do not wait for it), the wait bounded
        (30 s: a route still closing then is a :class:`TimeoutError`). Each is closed even
        when another fails; then the first failure is raised, the others noted on it (and
        logged).

        .. versionchanged:: 0.2.0 the routes are closed together, not one after another.
        """
        try:
            run(self._spend_flush())
        except Exception:
            logger.exception("replaying the spend journal at close failed")
        failures: list[tuple[str, Exception]] = []
        for closers in self._closers():
            failures += close_all([(what, close) for what, close, _aclose in closers])
        _raise_first(failures)

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (the route's async and sync connections; the routes
        closed together, in tasks of their own).

        .. versionchanged:: 0.2.0 the routes are closed together, not one after another.
        """
        try:
            await arun(self._spend_flush())
        except Exception:
            logger.exception("replaying the spend journal at close failed")
        failures: list[tuple[str, Exception]] = []
        for closers in self._closers():
            failures += await aclose_all([(what, aclose) for what, _close, aclose in closers])
        _raise_first(failures)

    def _closers(self) -> tuple[list[_Closer], list[_Closer], list[_Closer]]:
        """What the Guard closes, in order, each group's together: its background threads,
        its routes, its store; each as what it is (for the error notes), its close and its
        async close (background threads are joined off the event loop)."""
        stages = self._stages
        background: list[_Closer] = []
        for what, threads in (("breaker probes", stages.prober), ("releases", stages.releases)):
            if threads is not None:
                background.append((what, threads.close, partial(to_thread.run_sync, threads.close)))
        routes: list[_Closer] = [(f"route {r.name!r}", r.close, r.aclose) for r in stages.routes]
        return background, routes, [("store", self.store.close, self.store.aclose)]

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
