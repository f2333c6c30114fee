"""``@retry`` over a generator function, sync or async, as ``@guard.protect`` wraps one: an
attempt that fails before its first item is retried; once an item went to the consumer, a
failure propagates unretried (a retry would hand the consumer the same items again), noted
and told to the give-up hooks as ``"stream-delivered"`` (:meth:`Attempt.deliver`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ._api import Retrying

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
        return _async_generator(fn, loop)
    return _generator(fn, loop)


def _step(items: Iterator[Any]) -> tuple[bool, Any]:
    """``(False, item)`` for the next item of ``items``; ``(True, value)`` at its end
    (``value``: what the generator returned)."""
    try:
        return False, next(items)
    except StopIteration as stop:
        return True, stop.value


async def _astep(items: AsyncIterator[Any]) -> tuple[bool, Any]:
    """The async twin of :func:`_step` (an async generator returns nothing)."""
    try:
        return False, await items.__anext__()
    except StopAsyncIteration:
        return True, None


def _generator(fn: Callable[..., Iterator[Any]], loop: Callable[[], Retrying]) -> Any:
    """A generator function that retries ``fn`` with a fresh ``loop()`` per call, up to its
    first item; the generator ``fn`` made is closed when the consumer stops early."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        items: Iterator[Any] | None = None
        try:
            for attempt in loop():
                with attempt:
                    items = fn(*args, **kwargs)
                    done, value = _step(items)
            while not done:
                yield attempt.deliver(value)
                with attempt:  # delivered: judged, noted, never retried
                    done, value = _step(items)  # type: ignore[arg-type]
            return value
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    return wrapper


def _async_generator(fn: Callable[..., AsyncIterator[Any]], loop: Callable[[], Retrying]) -> Any:
    """The async twin of :func:`_generator` (the loop's waits are async)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        items: AsyncIterator[Any] | None = None
        try:
            async for attempt in loop():
                with attempt:
                    items = fn(*args, **kwargs)
                    done, value = await _astep(items)
            while not done:
                yield attempt.deliver(value)
                with attempt:  # delivered: judged, noted, never retried
                    done, value = await _astep(items)  # type: ignore[arg-type]
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()

    return wrapper
