"""A call refused before its first attempt (an invalid request or option, an input
guardrail's refusal, a request over ``max_input_tokens``; a drop-in client's or the transport
seam's own checks of what it was given), reported as every failed call is: a failed operation
to the telemetry, a :class:`~llmguard_sdk.CallEvent` to the hooks.

Nothing here runs for a call that is accepted."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Literal

from ..context import CallEvent, Scope, current_scope, emit
from .stages import Stages

__all__ = ["Refusal", "refusals"]

logger = logging.getLogger("llmguard_sdk")


class Refusal:
    """What a refused call reports, filled in as the checks learn it: the model it asked for
    (``asked``: the model, or its request, a ChatRequest or a mapping, naming one), its
    ``scope`` (None: the enclosing :func:`~llmguard_sdk.scoped` block's), its ``stream=``
    (reported as a ``"stream"`` when True, else a ``"chat"``), its ``time.monotonic()`` and
    ``time.time_ns()`` start. It is the context manager of its checks (:func:`refusals`):
    one small object a call, no generator."""

    __slots__ = ("asked", "reported", "scope", "stages", "started", "stream")

    def __init__(
        self, stages: Stages, asked: object = None, stream: object = False, reported: bool = True
    ) -> None:
        self.stages, self.asked, self.stream, self.reported = stages, asked, stream, reported
        self.scope: Scope | None = None
        self.started = time.monotonic(), time.time_ns()

    def __enter__(self) -> Refusal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None or isinstance(error, GeneratorExit) or not self.reported:
            return  # (accepted, or its checks closed unfinished: nothing to report)
        stages = self.stages
        if stages.telemetry is not None or stages.hooks:
            kind: Literal["chat", "stream"] = "stream" if self.stream is True else "chat"
            # (not an Exception: cancelled in an async input filter, reported as cancelled)
            _report(stages, kind, error if isinstance(error, Exception) else None, self)


def refusals(
    stages: Stages, *, asked: object = None, stream: object = False, reported: bool = True
) -> Refusal:
    """Checks of a call before its first attempt (``with refusals(...) as refusal:``): an
    exception raised inside is reported as a refused call (when ``reported`` and the Guard
    has telemetry or hooks, which cannot break the call: the caller gets the exception
    whatever happens here), then propagates. Only the checks go inside, never the Guard's
    call itself, which reports its own end."""
    return Refusal(stages, asked, stream, reported)


def _report(
    stages: Stages, kind: Literal["chat", "stream"], error: Exception | None, refusal: Refusal
) -> None:
    """Report a call refused before its first attempt (``error`` None: cancelled while its
    input filters ran) to the telemetry and the hooks."""
    asked, started = refusal.asked, refusal.started
    model = asked.get("model") if isinstance(asked, Mapping) else getattr(asked, "model", asked)
    model = model if isinstance(model, str) else None
    scope = refusal.scope if refusal.scope is not None else current_scope()
    telemetry = stages.telemetry
    if telemetry is not None:
        try:
            telemetry.refused(
                kind,
                error,
                scope=scope,
                model=model,
                routes=stages.routes,
                started=started[0],
                started_ns=started[1],
            )
        except Exception:
            logger.exception("llmguard telemetry failed")
    if stages.hooks:
        emit(stages.hooks, _event(kind, error, scope, model, time.monotonic() - started[0]))


def _event(
    kind: Literal["chat", "stream"],
    error: Exception | None,
    scope: Scope,
    model: str | None,
    latency_s: float,
) -> CallEvent:
    """The :class:`CallEvent` of a refused call: a failed one, as a call that no route
    answered is, with no attempt, no usage and no cost (no request went out); ``error``
    None: a cancelled one."""
    return CallEvent(
        kind=kind,
        outcome="error" if error is not None else "cancelled",
        scope=scope,
        model=model,
        route=None,
        attempts=0,
        latency_s=latency_s,
        error=error,
    )
