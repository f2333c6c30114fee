"""A fault injector in front of one route, in the client: the configuration drill's primary.

While :attr:`Outage.phase` names a fault, every attempt fails as a dead provider's would,
without touching the network: ``refused`` (connection refused, the request never sent),
``503`` (the provider answers 503), ``hang`` (no answer until the attempt's deadline, then a
timeout). Any other phase passes the call to the real route.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import AsyncGenerator, Generator
from typing import Any

import anyio

from ..errors import (
    ConfigurationError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..models import ChatRequest, ChatResponse, StreamChunk
from ..providers.base import Provider, StreamCall, _Streams

__all__ = ["OUTAGE_PHASES", "Outage", "check_drill_times"]

OUTAGE_PHASES = ("refused", "503", "hang")


MAX_DRILL_CALLS = 100_000
"""The most calls a drill sends (its rate times its length): each is a task and a record
held to the end (some 30 kB: 100,000 calls took 3 GB)."""


def check_drill_times(*, rate: float, before: float, outage: float, after: float) -> None:
    """Raise :class:`ConfigurationError` naming the first of a drill's ``rate`` and phase
    durations that is not a positive, finite number (``rate and every phase duration must be
    positive`` left the reader to find which), or saying how many calls they ask for when that
    is more than :data:`MAX_DRILL_CALLS` (``rate=1e9``: calls launched without end until
    memory ran out, the drill silent)."""
    times = {"rate": rate, "before": before, "outage": outage, "after": after}
    for name, value in times.items():
        if not 0 < value < math.inf:  # (inf: an OverflowError, or a drill that never ends)
            raise ConfigurationError(f"{name} must be positive and finite, got {value!r}")
    calls = rate * (before + 3 * outage + after)  # (rounded, as the drills count them)
    if calls >= MAX_DRILL_CALLS + 0.5:  # (1e300 x 1e10: inf, which round() refuses)
        raise ConfigurationError(
            f"a drill of {calls:,.0f} calls (rate x (before + 3 x outage + after)) is more than "
            f"{MAX_DRILL_CALLS:,}: lower the rate or the phases"
        )


class Outage(_Streams):
    """Wraps ``inner`` (same name, model and capabilities) and fails it during a fault
    phase; counts the attempts it receives per phase."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.phase = "before"
        self.attempts: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:  # context_window, is_local, count_tokens ...
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"Outage({self.inner!r}, phase={self.phase!r})"

    def _fault(self, deadline: float) -> tuple[ProviderError | None, float]:
        """This attempt's error (None: pass it on) and how long it hangs first."""
        phase = self.phase
        self.attempts[phase] += 1
        if phase == "refused":
            error: ProviderError = ProviderUnavailableError(
                "connection refused (drill: the primary is down)",
                route=self.name,
                request_sent=False,
            )
            return error, 0.0
        if phase == "503":
            return ProviderUnavailableError(
                "service unavailable (drill)", route=self.name, status_code=503
            ), 0.0
        if phase == "hang":
            wait = max(0.0, deadline - time.monotonic())
            return ProviderTimeoutError("no answer (drill: hung)", route=self.name), wait
        return None, 0.0

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        error, wait = self._fault(deadline)
        if error is None:
            return self.inner.complete(request, model=model, deadline=deadline)
        time.sleep(wait)
        raise error

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        error, wait = self._fault(deadline)
        if error is None:
            return await self.inner.acomplete(request, model=model, deadline=deadline)
        await anyio.sleep(wait)
        raise error

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        error, wait = self._fault(_stream_deadline(call))
        if error is not None:
            time.sleep(wait)
            raise error
        yield from self.inner.stream(
            call.request, model=call.model, deadline=call.deadline, idle_timeout=call.idle_timeout
        )

    async def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        error, wait = self._fault(_stream_deadline(call))
        if error is not None:
            await anyio.sleep(wait)
            raise error
        async for chunk in self.inner.astream(
            call.request, model=call.model, deadline=call.deadline, idle_timeout=call.idle_timeout
        ):
            yield chunk

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _stream_deadline(call: StreamCall) -> float:
    """When a hung stream gives up: its deadline, or its first silence allowed."""
    if call.idle_timeout is None:
        return call.deadline
    return min(call.deadline, time.monotonic() + call.idle_timeout)
