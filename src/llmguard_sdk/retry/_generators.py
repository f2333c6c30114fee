"""``@retry`` over a generator function, sync or async, as ``@guard.protect`` wraps one: an
attempt that fails before its first item is retried; once an item went to the consumer, a
failure propagates unretried (a retry would hand the consumer the same items again), noted
and told to the give-up hooks as ``"stream-delivered"`` (:meth:`Attempt.deliver`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._generators import Step, watched_async_generator, watched_generator
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ._api import Attempt, Retrying

__all__ = ["retry_generator"]


def retry_generator(
    fn: Callable[..., Any], name: str, loop: Callable[[], Retrying], on_result: object
) -> Any:
    """``@retry``'s wrapper of ``fn`` (named ``name``) when it is a generator function, sync
    or async, each call retried by a fresh ``loop()``; ``None`` for any other function. An
    ``on_result`` predicate is refused: a generator's items are the consumer's once yielded,
    no result of it can be asked for again."""
    if not (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)):
        return None
    if on_result is not None:
        raise ConfigurationError(
            f"retry on_result= judges what a function returns; {name} is a generator, whose "
            "items are the consumer's once yielded: leave on_result out"
        )
    if inspect.isasyncgenfunction(fn):
        return watched_async_generator(fn, lambda: _AsyncWatch(loop))
    return watched_generator(fn, lambda: _Watch(loop))


class _Watch:
    """One call's retries: the attempts of a fresh loop up to the first item; after it, each
    failure is judged by the last attempt as delivered (noted, never retried)."""

    def __init__(self, loop: Callable[[], Retrying]) -> None:
        self.loop = loop
        self.attempt: Attempt  # the last one, once start returned

    def start(self, first: Callable[[], Step]) -> Step:
        for attempt in self.loop():
            with attempt:
                step = first()
        self.attempt = attempt
        return step

    def step(self, following: Callable[[], Step]) -> Step:
        attempt = self.attempt
        attempt.delivered = True  # an item went to the consumer: judged, noted, never retried
        with attempt:
            step = following()
        return step

    def end(self, error: BaseException | None) -> None:
        """Nothing: each attempt judged its own failure."""


class _AsyncWatch:
    """The async twin of :class:`_Watch` (the loop's waits are async)."""

    def __init__(self, loop: Callable[[], Retrying]) -> None:
        self.loop = loop
        self.attempt: Attempt

    async def start(self, first: Callable[[], Awaitable[Step]]) -> Step:
        async for attempt in self.loop():
            with attempt:
                step = await first()
        self.attempt = attempt
        return step

    async def step(self, following: Callable[[], Awaitable[Step]]) -> Step:
        attempt = self.attempt
        attempt.delivered = True  # an item went to the consumer: judged, noted, never retried
        with attempt:
            step = await following()
        return step

    async def end(self, error: BaseException | None) -> None:
        """Nothing: each attempt judged its own failure."""
