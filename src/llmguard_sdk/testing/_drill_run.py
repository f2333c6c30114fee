"""The outage drill's machinery: its settings, what it records, the tap on the primary and the
traffic loop."""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from .._core.probes import is_probe
from ..breaker import BreakerPolicy
from ..context import CallEvent
from ..guard import Guard
from ..models import ChatRequest, ChatResponse, StreamChunk
from ..providers.base import StreamCall, _Streams
from ..providers.openai_compat import OpenAICompatibleProvider
from ..retry import RetryPolicy
from ._provider import FakeProvider

OPEN_SECONDS = 1.0
MAX_OPEN_SECONDS = 2.0
ATTEMPT_TIMEOUT = 0.4
CALL_TIMEOUT = 5.0
BACKUP_LATENCY = 0.01
MAX_TOKENS = 16
RETRY = RetryPolicy(attempts=2, base=0.02, cap=0.5)
BREAKER = BreakerPolicy(
    window=20,
    minimum_calls=5,
    failure_rate=0.5,
    open_seconds=OPEN_SECONDS,
    max_open_seconds=MAX_OPEN_SECONDS,
    half_open_permits=1,
)
PHASES = ("before", "refused", "503", "hang", "after")
ROUTE_ORDER = ("primary", "backup", "local", "degraded", "failed")


# -- what one drill records ---------------------------------------------------------------------


@dataclass
class _Call:
    start: float
    end: float = 0.0
    route: str = "failed"
    error: str | None = None
    event: CallEvent | None = None


@dataclass(frozen=True)
class _Attempt:
    start: float
    end: float
    error: str | None
    sent: bool
    background: bool = False  # a background probe of the open breaker, not a user's call


_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "llmguard_drill_call", default=None
)


def _on_event(event: CallEvent) -> None:
    """Guard hook: hooks run inside the calling task, so the task's own record is current."""
    call = _CURRENT.get()
    if call is not None:
        call.event = event


class _Tap(_Streams):
    """Passes every call to ``inner`` unchanged and logs each attempt (start, end, error)."""

    def __init__(self, inner: OpenAICompatibleProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.context_window = inner.context_window
        self.attempts: list[_Attempt] = []

    def _log(self, start: float, error: BaseException | None, request: ChatRequest) -> None:
        kind = None if error is None else type(error).__name__
        sent = bool(getattr(error, "request_sent", True))
        self.attempts.append(_Attempt(start, time.monotonic(), kind, sent, is_probe(request)))

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        start, error = time.monotonic(), None
        try:
            return self.inner.complete(request, model=model, deadline=deadline)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._log(start, error, request)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        start, error = time.monotonic(), None
        try:
            return await self.inner.acomplete(request, model=model, deadline=deadline)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._log(start, error, request)

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        return self.inner.stream(
            call.request, model=call.model, deadline=call.deadline, idle_timeout=call.idle_timeout
        )

    def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        return self.inner.astream(
            call.request, model=call.model, deadline=call.deadline, idle_timeout=call.idle_timeout
        )

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class _Run:
    guard: Guard
    primary: FakeProvider
    tap: _Tap
    rate: float
    plan: list[tuple[str, float, Callable[[], None]]]
    total: float
    breaker: BreakerPolicy = BREAKER
    t0: float = 0.0
    calls: list[_Call] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    switching: dict[str, float] = field(default_factory=dict)

    async def traffic(self) -> None:
        """Launch the calls on schedule, half an interval off the phase changes."""
        count = round(self.total * self.rate)
        self.t0 = time.monotonic()
        self.marks["before"] = self.t0
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.switch_phases)
            for i in range(count):
                delay = self.t0 + (i + 0.5) / self.rate - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                tasks.start_soon(self.one, i)
        await self.guard.aclose()

    async def switch_phases(self) -> None:
        for name, at, action in self.plan:
            delay = self.t0 + at - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            begun = time.monotonic()
            await anyio.to_thread.run_sync(action)
            self.marks[name] = time.monotonic()  # the phase holds from here on
            self.switching[name] = self.marks[name] - begun

    async def one(self, i: int) -> None:
        call = _Call(time.monotonic())
        self.calls.append(call)
        _CURRENT.set(call)
        try:
            response = await self.guard.achat(
                [{"role": "user", "content": f"drill request {i}: say hello"}],
                max_tokens=MAX_TOKENS,
                temperature=0,
                tenant="drill",
                feature="drill",
            )
            call.route = response.route or "unknown"
        except Exception as error:  # any failure is a finding, never a crash of the drill
            call.error = type(error).__name__
        finally:
            call.end = time.monotonic()
