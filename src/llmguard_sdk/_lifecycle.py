"""Closing a :class:`~llmguard_sdk.Guard`: its spend journal replayed, its background
probes and releases stopped, every route's connections and the store's closed.

(Split from :mod:`llmguard_sdk.guard`, which builds the Guard and runs its calls.)
"""

from __future__ import annotations

import logging

import anyio

from ._closing import AsyncCloses, Closes
from ._core.stages import Stages
from ._state.steps import Step, arun, done, run
from .store import Store

__all__ = ["Lifecycle"]

logger = logging.getLogger("llmguard_sdk")


class Lifecycle(Closes, AsyncCloses):
    """``close`` / ``aclose`` and ``with`` / ``async with`` (a part of
    :class:`~llmguard_sdk.Guard`)."""

    _stages: Stages
    store: Store

    def close(self) -> None:
        """Replay spend journaled while Redis was unreachable (one try), then close every
        route's connections and the store's."""
        try:
            run(self._spend_flush())
        except Exception:
            logger.exception("replaying the spend journal at close failed")
        if self._stages.prober is not None:
            self._stages.prober.close()
        if self._stages.releases is not None:
            self._stages.releases.close()
        for route in self._stages.routes:
            route.close()
        self.store.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (the route's async and sync connections)."""
        try:
            await arun(self._spend_flush())
        except Exception:
            logger.exception("replaying the spend journal at close failed")
        if self._stages.prober is not None:
            await anyio.to_thread.run_sync(self._stages.prober.close)
        if self._stages.releases is not None:
            await anyio.to_thread.run_sync(self._stages.releases.close)
        for route in self._stages.routes:
            await route.aclose()
        await self.store.aclose()

    def _spend_flush(self) -> Step[bool]:
        spend = self._stages.spend
        if spend is None or not spend.active:
            return done(True)
        return spend.flush_steps()
