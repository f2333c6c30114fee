"""The decorator of :meth:`Breakers.protect <llmguard_sdk.breaker.Breakers.protect>`: each call
of a function, sync or async, through its route's breaker (:mod:`._guarded`); a generator
function's calls watched while they are read, as ``@retry`` watches them
(:mod:`llmguard_sdk._generators`): the permit asked when the first item is, the outcome
recorded when the generator ends (closed early by its consumer: no outcome, the permit
given back)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._decorating import is_async_callable, may_return_awaitable, unwrap_method
from .._generators import Step, watched_async_generator, watched_generator
from ._guarded import (
    acall_through,
    apermitted,
    asettle,
    call_through,
    check_callable,
    permitted,
    settle,
)

if TYPE_CHECKING:
    from . import Breakers
    from .policy import Permit

__all__ = ["protecting"]

F = TypeVar("F", bound=Callable[..., Any])


def protecting(breakers: Breakers, route: str) -> Callable[[F], F]:
    """The decorator of :meth:`Breakers.protect <llmguard_sdk.breaker.Breakers.protect>`."""

    def decorate(method: F) -> F:
        fn, takes_its_place = unwrap_method(method)
        check_callable(fn, route, "protect")
        if inspect.isasyncgenfunction(fn):
            watch = functools.partial(_AsyncWatch, breakers, route)
            return cast(F, takes_its_place(watched_async_generator(fn, watch)))
        if inspect.isgeneratorfunction(fn):
            return cast(F, takes_its_place(watched_generator(fn, lambda: _Watch(breakers, route))))
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


class _Stream:
    """One call of a protected generator function: its permit, taken before the function
    runs, and its time: to the first item (or to its end, without one), as the Guard's
    streams count it for ``slow_call_seconds``."""

    def __init__(self, breakers: Breakers, route: str) -> None:
        self.breakers, self.route = breakers, route
        self.permit: Permit | None = None  # none taken yet (or refused)
        self.started = 0.0
        self.seconds: float | None = None

    def first_came(self) -> None:
        self.seconds = time.monotonic() - self.started

    def elapsed(self) -> float:
        return time.monotonic() - self.started if self.seconds is None else self.seconds


class _Watch(_Stream):
    """Its permit asked before the generator function runs, its outcome recorded when the
    generator ends (:func:`~._guarded.settle`)."""

    def start(self, first: Callable[[], Step]) -> Step:
        self.permit, self.started = permitted(self.breakers, self.route), time.monotonic()
        step = first()
        self.first_came()
        return step

    def step(self, following: Callable[[], Step]) -> Step:
        return following()

    def end(self, error: BaseException | None) -> None:
        if self.permit is not None:
            settle(self.breakers, self.route, self.permit, error, self.elapsed())


class _AsyncWatch(_Stream):
    """The async twin of :class:`_Watch` (its bookkeeping shielded from cancellation)."""

    async def start(self, first: Callable[[], Awaitable[Step]]) -> Step:
        self.permit = await apermitted(self.breakers, self.route)
        self.started = time.monotonic()
        step = await first()
        self.first_came()
        return step

    async def step(self, following: Callable[[], Awaitable[Step]]) -> Step:
        return await following()

    async def end(self, error: BaseException | None) -> None:
        if self.permit is not None:
            await asettle(self.breakers, self.route, self.permit, error, self.elapsed())
