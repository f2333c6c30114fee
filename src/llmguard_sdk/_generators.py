"""What the SDK's decorators share to wrap a generator function, sync or async: a wrapper that
calls it, hands its items on one at a time, keeps its return value and closes it however the
consumer stops. A :class:`Watch` (:class:`AsyncWatch`) says what a decorator does around one
call: ``@retry`` its attempts up to the first item, ``@breakers.protect`` the breaker's permit
and outcome."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Protocol

import anyio

from ._nested_generators import close_thrown_again, owned_by_caller

__all__ = ["AsyncWatch", "Step", "Watch", "watched_async_generator", "watched_generator"]

Step = tuple[bool, Any]
"""``(False, item)``: the generator's next item; ``(True, value)``: its end (``value``: what
it returned)."""


class Watch(Protocol):
    """What a decorator does around one call of the generator function it wraps (a fresh
    watch per call)."""

    def start(self, first: Callable[[], Step]) -> Step:
        """Run ``first`` (which calls the function and takes its first item), as often as
        the decorator allows; raise to end the call before anything is yielded."""

    def step(self, following: Callable[[], Step]) -> Step:
        """Run ``following`` (the next item, after one went to the consumer)."""

    def end(self, error: BaseException | None) -> None:
        """The call ended: exhausted (``None``), failed (:meth:`start`'s own error too), or
        stopped by its consumer (a ``GeneratorExit``)."""


class AsyncWatch(Protocol):
    """The async twin of :class:`Watch`."""

    async def start(self, first: Callable[[], Awaitable[Step]]) -> Step:
        """As :meth:`Watch.start`."""

    async def step(self, following: Callable[[], Awaitable[Step]]) -> Step:
        """As :meth:`Watch.step`."""

    async def end(self, error: BaseException | None) -> None:
        """As :meth:`Watch.end`."""


def _resume(items: Iterator[Any], sent: Any, thrown: BaseException | None) -> Step:
    """The next step after the consumer's ``send(sent)`` or ``throw(thrown)``, passed on to
    ``items`` as ``yield from`` does (an iterator without ``throw`` gets it raised here, one
    without ``send`` only ``None``: its ``next``)."""
    try:
        if thrown is not None:
            throw = getattr(items, "throw", None)
            if throw is None:
                raise thrown
            return False, throw(thrown)
        return False, next(items) if sent is None else items.send(sent)  # type: ignore[attr-defined]
    except StopIteration as stop:
        return True, stop.value


async def _aresume(items: AsyncIterator[Any], sent: Any, thrown: BaseException | None) -> Step:
    """The async twin of :func:`_resume` (``asend``, ``athrow``)."""
    try:
        if thrown is not None:
            athrow = getattr(items, "athrow", None)
            if athrow is None:
                raise thrown
            return False, await athrow(thrown)
        if sent is None:
            return False, await items.__anext__()
        return False, await items.asend(sent)  # type: ignore[attr-defined]
    except StopAsyncIteration:
        return True, None


def watched_generator(fn: Callable[..., Iterator[Any]], watch: Callable[[], Watch]) -> Any:
    """A generator function that runs ``fn`` under a fresh ``watch()`` per call; the
    generator ``fn`` made is closed when the consumer stops early, and gets what the consumer
    sends or throws in (``send``, ``throw``), as with ``yield from``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        watcher = watch()
        items: Iterator[Any] | None = None

        def first() -> Step:
            nonlocal items
            items = fn(*args, **kwargs)
            return _resume(items, None, None)

        try:
            done, value = watcher.start(first)
            assert items is not None  # (start returns once first has made them)
            while not done:
                sent, thrown = None, None
                try:
                    sent = yield value
                except GeneratorExit:
                    raise
                except BaseException as error:  # the consumer's throw(): passed on
                    thrown = error
                done, value = watcher.step(functools.partial(_resume, items, sent, thrown))
        except BaseException as error:
            watcher.end(error)
            raise
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        watcher.end(None)
        return value

    return wrapper


def watched_async_generator(
    fn: Callable[..., AsyncIterator[Any]], watch: Callable[[], AsyncWatch]
) -> Any:
    """The async twin of :func:`watched_generator` (``asend``, ``athrow``)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        watcher = watch()
        items: AsyncIterator[Any] | None = None

        async def first() -> Step:
            nonlocal items
            items = fn(*args, **kwargs)
            # (closed by this wrapper alone: the loop finalizes the wrapper, not the items)
            return await owned_by_caller(_aresume(items, None, None))

        try:
            done, value = await watcher.start(first)
            assert items is not None  # (start returns once first has made them)
            while not done:
                sent, thrown = None, None
                try:
                    sent = yield value
                except GeneratorExit:
                    raise
                except BaseException as error:  # the consumer's athrow(): passed on
                    if isinstance(error, anyio.get_cancelled_exc_class()):
                        await close_thrown_again()  # (or the loop's cancelled close: see there)
                    thrown = error
                done, value = await watcher.step(functools.partial(_aresume, items, sent, thrown))
        except BaseException as error:
            await watcher.end(error)
            raise
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
        await watcher.end(None)

    return wrapper
