"""What the SDK's decorators (``@retry``, ``@breakers.protect``) share: whether a function is
async, the function under a ``@staticmethod`` or ``@classmethod``, and a clear refusal of
generators."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .errors import ConfigurationError

__all__ = ["is_async_callable", "may_return_awaitable", "refuse_generator", "unwrap_method"]


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine (whose failures come when it is awaited):
    an async function, or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    return (
        callable(fn)
        and not inspect.isroutine(fn)
        and inspect.iscoroutinefunction(type(fn).__call__)
    )


def may_return_awaitable(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a plain function (or method, or partial of one) that a decorator
    wrapped around an async function: openai's ``AsyncOpenAI().chat.completions.create``
    is one, and returns a coroutine."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not inspect.isroutine(target):
        return False
    try:
        return inspect.iscoroutinefunction(inspect.unwrap(target))
    except ValueError:  # a cycle of __wrapped__
        return False


def unwrap_method(fn: Any) -> tuple[Callable[..., Any], Callable[[Callable[..., Any]], Any]]:
    """The function a decorator wraps in place of ``fn``, and what makes its wrapper take
    ``fn``'s place: the function of a ``@staticmethod`` or ``@classmethod`` stacked below the
    decorator (its wrapper becomes a staticmethod or classmethod again, so a call through an
    instance passes no ``self``, and a classmethod's gets its class), else ``fn`` itself."""
    if isinstance(fn, (staticmethod, classmethod)):
        return fn.__func__, type(fn)
    return fn, _itself


def _itself(wrapper: Callable[..., Any]) -> Any:
    return wrapper


def refuse_generator(fn: Callable[..., Any], name: str, decorator: str, instead: str) -> None:
    """Refuse a generator function (:class:`ConfigurationError`): its work, and its failures,
    happen while it is iterated, after the call that ``decorator`` wraps has returned;
    ``instead`` says what to do."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"{decorator} cannot wrap the generator {name}: its failures happen while it is "
            f"iterated, after the call returned; {instead}"
        )
