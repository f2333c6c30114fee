"""One call through a route's breaker, sync or async: its permit asked (a refusal raised as
:class:`~llmguard_sdk.errors.CircuitOpenError`), its outcome recorded as the SDK classifies
it, and its permit given back whatever else happens (a caller's bug, a cancellation). What
:meth:`Breakers.protect <llmguard_sdk.breaker.Breakers.protect>`, ``call`` and ``acall`` run.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio

from .._decorating import is_async_callable, may_return_awaitable, refuse_generator, unwrap_method
from ..errors import CircuitOpenError, ConfigurationError
from .policy import Permit

if TYPE_CHECKING:
    from . import Breakers

__all__ = ["acall_through", "call_through", "check_callable", "protecting", "refusal"]

F = TypeVar("F", bound=Callable[..., Any])


def refusal(route: str, permit: Permit) -> CircuitOpenError:
    """The error of a call ``route``'s breaker refused: ``retry_after`` when an open breaker
    lets a probe through; none when that is unknown (isolated until reset; half-open with
    every probe out, which may end at any time)."""
    unknown = permit.retry_after == math.inf or permit.state == "half_open"
    return CircuitOpenError(
        route, permit.state, retry_after=None if unknown else permit.retry_after
    )


def call_through(
    breakers: Breakers, route: str, fn: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)`` through ``route``'s breaker (sync)."""
    permit = breakers.permit(route)
    if not permit.allowed:
        raise refusal(route, permit)
    started = time.monotonic()
    try:
        result = fn(*args, **kwargs)
    except Exception as error:
        breakers.record(route, error, seconds=time.monotonic() - started, probe=permit.probe)
        raise
    except BaseException:  # interrupted: no outcome
        breakers.release(route, permit.probe)
        raise
    if inspect.isawaitable(result):  # its outcome comes when awaited: not known here
        breakers.release(route, permit.probe)
        close = getattr(result, "close", None)
        if callable(close):
            close()
        raise _async_in_call(fn)
    breakers.record(route, None, seconds=time.monotonic() - started, probe=permit.probe)
    return result


async def acall_through(
    breakers: Breakers, route: str, fn: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """``await fn(*args, **kwargs)`` through ``route``'s breaker; the permit's bookkeeping is
    shielded from cancellation (a permit taken is always recorded or given back)."""
    with anyio.CancelScope(shield=True):
        permit = await breakers.apermit(route)
    if not permit.allowed:
        raise refusal(route, permit)
    started = time.monotonic()
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
    except Exception as error:
        with anyio.CancelScope(shield=True):
            seconds = time.monotonic() - started
            await breakers.arecord(route, error, seconds=seconds, probe=permit.probe)
        raise
    except BaseException:  # cancelled: no outcome
        await breakers.arelease(route, permit.probe)  # (shielded)
        raise
    with anyio.CancelScope(shield=True):
        seconds = time.monotonic() - started
        await breakers.arecord(route, None, seconds=seconds, probe=permit.probe)
    return result


def protecting(breakers: Breakers, route: str) -> Callable[[F], F]:
    """The decorator of :meth:`Breakers.protect <llmguard_sdk.breaker.Breakers.protect>`."""

    def decorate(method: F) -> F:
        fn, takes_its_place = unwrap_method(method)
        check_callable(fn, route)
        if is_async_callable(fn) or may_return_awaitable(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await acall_through(breakers, route, fn, args, kwargs)

            return cast(F, takes_its_place(async_wrapper))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return call_through(breakers, route, fn, args, kwargs)

        return cast(F, takes_its_place(wrapper))

    return decorate


def check_callable(fn: Callable[..., Any], route: str, *, waits: bool = True) -> None:
    """Refuse, with a :class:`ConfigurationError`, what cannot go through a breaker: no
    callable; a generator function (its failures come while it is read, after the breaker
    recorded the call); an async function where nothing awaits it (``waits=False``: the
    sync ``call``)."""
    if not callable(fn):
        raise ConfigurationError(f"breakers.protect({route!r}) takes a function, got {fn!r}")
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    refuse_generator(fn, name, f"breakers.protect({route!r})", "protect what reads it instead")
    if not waits and (is_async_callable(fn) or may_return_awaitable(fn)):
        raise _async_in_call(fn)


def _async_in_call(fn: object) -> ConfigurationError:
    return ConfigurationError(
        f"breakers.call cannot wait for {fn!r}: it is async; await breakers.acall(...) instead "
        "(or decorate it with @breakers.protect)"
    )
