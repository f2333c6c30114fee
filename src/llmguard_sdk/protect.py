"""``@guard.protect``: put an existing LLM-calling function behind the Guard without rewriting it.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import anyio

from .context import CallEvent, Hook, current_scope, emit
from .errors import (
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from .models import Usage
from .providers.wire import error_from_status, usage_from_payload

__all__ = ["classify_exception", "protect_function", "usage_from_result"]

F = TypeVar("F", bound=Callable[..., Any])


def usage_from_result(result: object) -> Usage | None:
    """The token usage in an LLM call's result: openai-python objects or plain dicts."""
    usage = result.get("usage") if isinstance(result, Mapping) else getattr(result, "usage", None)
    if usage is not None and not isinstance(usage, Mapping):
        dump = getattr(usage, "model_dump", None)
        usage = dump() if callable(dump) else getattr(usage, "__dict__", None)
    return usage_from_payload(usage)[0]


def classify_exception(exc: BaseException, *, route: str = "") -> ProviderError | None:
    """The SDK's view of an exception raised by a provider SDK (openai, httpx ...).

    Returns the matching :class:`~llmguard_sdk.errors.ProviderError` (itself when it already
    is one), or ``None`` when the exception is not a provider failure (a bug in the caller's
    code, say). Works by duck typing, so no provider SDK needs to be installed.
    """
    if isinstance(exc, ProviderError):
        return exc
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        response = getattr(exc, "response", None)
        headers = dict(getattr(response, "headers", None) or {})
        body = getattr(response, "text", None)
        error = error_from_status(
            status, headers, body if isinstance(body, str) else str(exc), route=route
        )
        error.__cause__ = exc
        return error
    name = type(exc).__name__.lower()
    if isinstance(exc, TimeoutError) or "timeout" in name:
        return ProviderTimeoutError(str(exc) or name, route=route)
    if isinstance(exc, ConnectionError) or "connection" in name or "network" in name:
        return ProviderUnavailableError(str(exc) or name, route=route)
    if "decod" in name or "json" in name:
        return MalformedResponseError(str(exc) or name, route=route)
    return None


def protect_function(
    fn: F,
    *,
    hooks: Sequence[Hook],
    route: str,
    scope_keywords: tuple[str | None, str | None, str | None],
    timeout: float,
) -> F:
    """Wrap ``fn`` (sync or async); see :meth:`llmguard_sdk.Guard.protect`."""

    def report(started: float, result: object = None, error: BaseException | None = None) -> None:
        classified = classify_exception(error, route=route) if error is not None else None
        emit(
            hooks,
            CallEvent(
                kind="protect",
                outcome="ok" if error is None else "error",
                scope=current_scope().merged(*scope_keywords),
                model=_model_of(result),
                route=route if error is None else None,
                attempts=1,
                latency_s=time.monotonic() - started,
                usage=usage_from_result(result) if error is None else None,
                error=classified or error,
                route_errors=((route, type(classified or error).__name__),) if error else (),
            ),
        )

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
            try:
                with scope:
                    result = await fn(*args, **kwargs)
            except BaseException as exc:
                report(started, error=exc)
                raise
            if scope.cancelled_caught:
                error = ProviderTimeoutError(
                    f"protected call took longer than {timeout} s", route=route
                )
                report(started, error=error)
                raise error
            report(started, result)
            return result

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            report(started, error=exc)
            raise
        report(started, result)
        return result

    return cast(F, wrapper)


def _model_of(result: object) -> str | None:
    model = result.get("model") if isinstance(result, Mapping) else getattr(result, "model", None)
    return model if isinstance(model, str) else None
