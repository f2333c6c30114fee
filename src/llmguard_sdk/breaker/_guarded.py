"""One call through a route's breaker, sync or async: its permit asked (a refusal raised as
:class:`~llmguard_sdk.errors.CircuitOpenError`), its outcome recorded as the SDK classifies
it, and its permit given back whatever else happens (a caller's bug, a cancellation). What
:meth:`Breakers.protect <llmguard_sdk.breaker.Breakers.protect>`, ``call`` and ``acall`` run
(a generator function's calls: :mod:`._protecting`).
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from .._decorating import is_async_callable, may_return_awaitable, refuse_generator
from ..errors import CircuitOpenError, ConfigurationError
from .policy import Permit

if TYPE_CHECKING:
    from . import Breakers

__all__ = [
    "acall_through",
    "apermitted",
    "asettle",
    "call_through",
    "check_callable",
    "permitted",
    "refusal",
    "settle",
]


def refusal(route: str, permit: Permit) -> CircuitOpenError:
    """The error of a call ``route``'s breaker refused: ``retry_after`` when an open breaker
    lets a probe through; none when that is unknown (isolated until reset; half-open with
    every probe out, which may end at any time)."""
    unknown = permit.retry_after == math.inf or permit.state == "half_open"
    return CircuitOpenError(
        route, permit.state, retry_after=None if unknown else permit.retry_after
    )


def permitted(breakers: Breakers, route: str) -> Permit:
    """A permit of ``route``'s breaker; a refusal is raised (:func:`refusal`)."""
    permit = breakers.permit(route)
    if not permit.allowed:
        raise refusal(route, permit)
    return permit


async def apermitted(breakers: Breakers, route: str) -> Permit:
    """Async :func:`permitted`; the permit's bookkeeping shielded from cancellation (a
    permit taken is always recorded or given back)."""
    with anyio.CancelScope(shield=True):
        permit = await breakers.apermit(route)
    if not permit.allowed:
        raise refusal(route, permit)
    return permit


def settle(
    breakers: Breakers, route: str, permit: Permit, error: BaseException | None, seconds: float
) -> None:
    """Record how the call ``permit`` let through went (``error``: ``None``, or an
    ``Exception`` as :meth:`~llmguard_sdk.breaker.Breakers.record` classifies it); a call
    interrupted, cancelled or closed early (any other ``BaseException``) has no outcome: its
    permit is given back."""
    if error is None or isinstance(error, Exception):
        breakers.record(route, error, seconds=seconds, probe=permit.probe)
    else:
        breakers.release(route, permit.probe)


async def asettle(
    breakers: Breakers, route: str, permit: Permit, error: BaseException | None, seconds: float
) -> None:
    """Async :func:`settle`, shielded from cancellation."""
    with anyio.CancelScope(shield=True):
        if error is None or isinstance(error, Exception):
            await breakers.arecord(route, error, seconds=seconds, probe=permit.probe)
        else:
            await breakers.arelease(route, permit.probe)


def call_through(
    breakers: Breakers, route: str, fn: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)`` through ``route``'s breaker (sync)."""
    permit = permitted(breakers, route)
    started = time.monotonic()
    try:
        result = fn(*args, **kwargs)
    except BaseException as error:
        settle(breakers, route, permit, error, time.monotonic() - started)
        raise
    if inspect.isawaitable(result):  # its outcome comes when awaited: not known here
        breakers.release(route, permit.probe)
        close = getattr(result, "close", None)
        if callable(close):
            close()
        raise _async_in_call(fn)
    settle(breakers, route, permit, None, time.monotonic() - started)
    return result


async def acall_through(
    breakers: Breakers, route: str, fn: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """``await fn(*args, **kwargs)`` through ``route``'s breaker; the permit's bookkeeping is
    shielded from cancellation (a permit taken is always recorded or given back)."""
    permit = await apermitted(breakers, route)
    started = time.monotonic()
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
    except BaseException as error:
        await asettle(breakers, route, permit, error, time.monotonic() - started)
        raise
    await asettle(breakers, route, permit, None, time.monotonic() - started)
    return result


def check_callable(fn: Callable[..., Any], route: str, way: str, *, waits: bool = True) -> None:
    """Refuse, with a :class:`ConfigurationError`, what cannot go through a breaker the
    ``way`` (``"protect"``, ``"call"``, ``"acall"``) of :class:`Breakers`: no callable; to
    ``call`` or ``acall``, a generator function (a call returns it unread: its failures come
    while it is read, after the breaker recorded the call); an async function where nothing
    awaits it (``waits=False``: the sync ``call``)."""
    if not callable(fn):
        raise ConfigurationError(f"breakers.{way}({route!r}) takes a function, got {fn!r}")
    if way != "protect":
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        instead = "decorate it with @breakers.protect, which watches it while it is read"
        refuse_generator(fn, name, f"breakers.{way}({route!r})", instead)
    if not waits and (is_async_callable(fn) or may_return_awaitable(fn)):
        raise _async_in_call(fn)


def _async_in_call(fn: object) -> ConfigurationError:
    """The refusal of a sync call through a breaker (``breakers.call``, or ``@protect`` on a
    plain ``def``) whose function returned an awaitable: its outcome comes later."""
    return ConfigurationError(
        f"{fn!r} returned an awaitable, whose outcome a sync call through the breaker cannot "
        "wait for: await breakers.acall(...), or make it an async def (which "
        "@breakers.protect awaits)"
    )
