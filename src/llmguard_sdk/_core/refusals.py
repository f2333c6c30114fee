"""A call refused before its first attempt (an invalid request or option, an input
guardrail's refusal, a request over ``max_input_tokens``), reported as every failed call is:
a failed operation to the telemetry, a :class:`~llmguard_sdk.CallEvent` to the hooks.

Nothing here runs for a call that is accepted."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Literal

from ..context import CallEvent, Scope, current_scope, emit
from .stages import Stages

__all__ = ["report_refused"]

logger = logging.getLogger("llmguard_sdk")


def report_refused(
    stages: Stages,
    kind: Literal["chat", "stream"],
    error: Exception,
    scope: Scope | None,
    asked: object,
    started: tuple[float, int],
) -> None:
    """Report a call refused before its first attempt to the telemetry and the hooks (which
    cannot break the call: the caller gets ``error`` whatever happens here); ``scope``: the
    call's (None: it was refused, the enclosing :func:`~llmguard_sdk.scoped` block's);
    ``asked``: the model it asked for, or its request (a ChatRequest, a mapping) naming one;
    ``started``: its ``time.monotonic()`` and ``time.time_ns()`` start."""
    model = asked.get("model") if isinstance(asked, Mapping) else getattr(asked, "model", asked)
    model = model if isinstance(model, str) else None
    scope = scope if scope is not None else current_scope()
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
    error: Exception,
    scope: Scope,
    model: str | None,
    latency_s: float,
) -> CallEvent:
    """The :class:`CallEvent` of a refused call: a failed one, as a call that no route
    answered is, with no attempt, no usage and no cost (no request went out)."""
    return CallEvent(
        kind=kind,
        outcome="error",
        scope=scope,
        model=model,
        route=None,
        attempts=0,
        latency_s=latency_s,
        error=error,
    )
