"""``@guard.protect``: put an existing LLM-calling function behind the Guard without rewriting it.

The function is retried with the Guard's retry policy and budget (when the SDK classifies its
exception as retryable), bounded by a timeout, and reported to the Guard's hooks with the
usage read from its result. Retries stacked on retries multiply (LiteLLM's router times the
provider SDK's own retries gave 6 attempts instead of 3), so the decorator warns when the
function uses an openai client that retries on its own.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import math
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import CodeType
from typing import Any, TypeVar, cast

import anyio

from ._decorating import is_async_callable, may_return_awaitable, unwrap_method
from ._protect_managers import AsyncWatchedManager, WatchedManager, manager_kind
from ._protect_streams import AsyncWatchedStream, End, StreamTally, WatchedStream, stream_kind
from .classify import classify_exception, usage_from_result
from .context import CallEvent, Hook, RetryDetails, current_scope, emit
from .errors import ConfigurationError, ProviderTimeoutError, RetryMultiplicationWarning
from .models import Usage
from .retry._api import Retrying
from .retry.budget import RetryBudget
from .retry.policy import RetryPolicy
from .telemetry._attributes import exception_type
from .telemetry._sdk_names import ProviderNames

__all__ = ["protect_function"]

F = TypeVar("F", bound=Callable[..., Any])
_NO_RETRY = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class _Protected:
    """What a protected function's wrapper needs: its retries, timeout and report."""

    hooks: Sequence[Hook]
    route: str
    scope_keywords: tuple[str | None, str | None, str | None]
    timeout: float
    policy: RetryPolicy  # its timeout is the protect timeout
    budget: RetryBudget | None
    provider: ProviderNames = field(default_factory=lambda: ProviderNames(()))

    def attempts(self, retries: list[RetryDetails]) -> Retrying:
        """The retry loop of one call; each retry is noted in ``retries``."""
        return Retrying(
            policy=self.policy,
            hooks=[retries.append],
            name=self.route,
            budget=self.budget,
            budget_key=self.route,
        )

    def report(
        self,
        started: float,
        retries: list[RetryDetails],
        result: object = None,
        error: BaseException | None = None,
        tally: StreamTally | None = None,
    ) -> None:
        """Emit the call's :class:`~llmguard_sdk.CallEvent` to the hooks; an interrupted or
        cancelled call (a ``BaseException`` that is not an ``Exception``) is reported
        ``"cancelled"`` without an error, as :meth:`~llmguard_sdk.Guard.chat` reports it. A
        stream's usage and model are its ``tally``'s (``result``: what names its SDK); a
        stream cancelled (closed or dropped early) reports what it used so far."""
        route = self.route
        cancelled = error is not None and not isinstance(error, Exception)
        usage = None
        if cancelled:
            error = None
            usage = tally.used_so_far(result) if tally is not None else None
        elif error is None:
            usage = _usage_of(result, tally)
        classified = classify_exception(error, route=route) if error is not None else None
        if error is not None:
            _warn_if_sdk_retried(error)
        emit(
            self.hooks,
            CallEvent(
                kind="protect",
                outcome="error" if error is not None else "cancelled" if cancelled else "ok",
                scope=current_scope().merged(*self.scope_keywords),
                model=tally.model if tally is not None else _model_of(result),
                route=route if error is None else None,  # (cancelled too, as a chat's)
                attempts=len(retries) + 1,
                latency_s=time.monotonic() - started,
                usage=usage,
                error=classified or error,
                route_errors=((route, exception_type(classified or error)),) if error else (),
                retries=tuple(retries),
                provider=self.provider.of(result, error),
            ),
        )

    def timed_out(self) -> ProviderTimeoutError:
        """The error of an async call whose timeout was spent."""
        return ProviderTimeoutError(
            f"protected call took longer than {self.timeout} s", route=self.route
        )


class _Call:
    """One call of a protected function, sync or async, plain or streamed: when it started
    and its retries. A failure (or a cancellation) that leaves its ``with`` block is reported
    on its way out; :meth:`end` reports a call that returned. Everything but the call itself
    (and its ``await``) is here, written once for the wrappers below."""

    __slots__ = ("protected", "retries", "started", "tally")

    def __init__(self, protected: _Protected, started: float | None = None) -> None:
        self.protected = protected
        self.started = time.monotonic() if started is None else started
        self.retries: list[RetryDetails] = []
        self.tally = StreamTally()  # a generator's usage and model, from its items

    def attempts(self) -> Retrying:
        """The retry loop of the call (of a stream: up to its first item)."""
        return self.protected.attempts(self.retries)

    def __enter__(self) -> _Call:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _traceback: object) -> None:
        if exc is not None:  # GeneratorExit too: the caller closed a stream (cancelled)
            tally = None if isinstance(exc, Exception) else self.tally  # (what it used so far)
            self.protected.report(self.started, self.retries, error=exc, tally=tally)

    def see(self, item: Any) -> Any:
        """Note a generator's ``item`` on its way to the caller (its usage, its model)."""
        self.tally.see(item)
        return item

    def end_generator(self) -> None:
        """Report the generator that ended, with the usage its items told."""
        self.protected.report(self.started, self.retries, self.tally.witness, tally=self.tally)

    def end(self, result: Any, again: Callable[[], Any]) -> Any:
        """Report the call that returned ``result``; a provider SDK's stream (or stream
        manager) is returned watched, and reported when it ends (:mod:`._protect_streams`,
        :mod:`._protect_managers`). ``again`` calls the function again: a stream manager
        whose request fails as it is entered is retried with a new one."""
        kind = stream_kind(result)
        protected = self.protected
        if kind == "sync":
            return WatchedStream(result, self.end_of(result))
        if kind == "async":
            first = self.started + protected.timeout  # (each item's wait: AsyncWatchedStream)
            ended = self.end_of(result)
            return AsyncWatchedStream(result, ended, first, protected.timeout, protected.timed_out)
        managed = manager_kind(result)
        if managed == "sync":
            return WatchedManager(result, self.end_of, self.attempts, again)
        if managed == "async":

            async def remade() -> Any:  # (an async function's manager: awaited)
                made = again()
                return await made if inspect.isawaitable(made) else made

            timeout, timed_out = protected.timeout, protected.timed_out
            return AsyncWatchedManager(
                result, self.end_of, self.attempts, remade, timeout, timed_out
            )
        protected.report(self.started, self.retries, result)
        return result

    def end_of(self, result: object) -> End:
        """The end of the call whose stream is ``result`` (what names its SDK, the request
        it sent), reported with the tally of its items."""

        def ended(tally: StreamTally, error: BaseException | None) -> None:
            self.protected.report(self.started, self.retries, result, error, tally)

        return ended


def protect_function(
    fn: F,
    *,
    hooks: Sequence[Hook],
    route: str,
    scope_keywords: tuple[str | None, str | None, str | None],
    timeout: float,
    retry: RetryPolicy | None = None,
    budget: RetryBudget | None = None,
) -> F:
    """Wrap ``fn`` (sync or async); see :meth:`llmguard_sdk.Guard.protect`. A ``timeout``
    that is not a positive, finite number of seconds, or an ``fn`` that is no function (a
    feature's name given positionally), is a :class:`ConfigurationError`."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ConfigurationError(f"protect timeout must be a number of seconds, not {timeout!r}")
    if not 0 < timeout < math.inf:
        raise ConfigurationError(f"protect timeout must be positive and finite, not {timeout!r}")
    function, place = unwrap_method(fn)  # (a @staticmethod or @classmethod below the decorator)
    if not callable(function):  # @guard.protect("summaries"): wrapped, then called at once
        raise ConfigurationError(
            f"guard.protect takes the function it decorates, then its options as keywords "
            f"(@guard.protect(feature={function!r:.60}), @guard.protect(route=...)), "
            f"got {function!r:.60}"
        )
    policy = retry or _NO_RETRY
    if policy.attempts > 1:
        _warn_if_client_retries(function)
    reachable: list[object] = []
    with contextlib.suppress(ValueError):  # a cycle of __wrapped__: told by what it returns
        reachable = _objects_reachable_from(function, heeding_with_options=False)
    provider = ProviderNames(reachable)
    policy = replace(policy, timeout=timeout)  # once, not at every call
    protected = _Protected(hooks, route, scope_keywords, timeout, policy, budget, provider)
    if inspect.isasyncgenfunction(function):
        return cast(F, place(_protect_async_generator(function, protected)))
    if inspect.isgeneratorfunction(function):
        return cast(F, place(_protect_generator(function, protected)))

    if is_async_callable(function):

        @functools.wraps(function)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await _call_async(function, protected, args, kwargs)

        return cast(F, place(async_wrapper))
    if may_return_awaitable(function):
        return cast(F, place(_protect_either(function, protected)))

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _Call(protected) as call:
            for attempt in call.attempts():
                with attempt:
                    result = function(*args, **kwargs)
        if inspect.isawaitable(result):  # a def returning a coroutine: the awaited call counts
            return _call_async(function, protected, args, kwargs, result, call.started)
        return call.end(result, functools.partial(function, *args, **kwargs))

    return cast(F, place(wrapper))


async def _call_async(
    fn: Callable[..., Any],
    protected: _Protected,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    first: Awaitable[Any] | None = None,
    started: float | None = None,
) -> Any:
    """One protected call of an async ``fn``: its attempts (the first one ``first`` when the
    call was already made), bounded by the timeout, reported."""
    with _Call(protected, started) as call:
        with anyio.CancelScope(deadline=anyio.current_time() + protected.timeout) as scope:
            async for attempt in call.attempts():
                with attempt:
                    pending = first if first is not None else fn(*args, **kwargs)
                    first = None  # a retry calls fn again
                    result = await pending
        if scope.cancelled_caught:
            raise protected.timed_out()
    return call.end(result, functools.partial(fn, *args, **kwargs))


def _protect_either(fn: Callable[..., Any], protected: _Protected) -> Any:
    """A function that wraps an async one: what its first call returns says which it is. An
    awaitable makes the call async (awaited, retried and bounded as an async function's, the
    wrapper returning a coroutine); anything else is a sync answer, reported as it is."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _Call(protected) as call:
            first = fn(*args, **kwargs)
        if inspect.isawaitable(first):
            return _call_async(fn, protected, args, kwargs, first, call.started)
        return call.end(first, functools.partial(fn, *args, **kwargs))

    return wrapper


_END: Any = object()  # a generator's end, in place of its first item


def _protect_generator(fn: Callable[..., Iterator[Any]], protected: _Protected) -> Any:
    """A generator function guarded while it is iterated: a failure before the first item is
    retried (after it, the caller has had part of the stream, and the failure propagates);
    the call is reported when the generator ends, fails or is closed, with the usage its
    items carried (:class:`~._protect_streams.StreamTally`: any provider's stream shape)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        call = _Call(protected)
        items: Iterator[Any] = iter(())
        try:
            with call:
                for attempt in call.attempts():
                    with attempt:
                        items = fn(*args, **kwargs)
                        item = next(items, _END)
                while item is not _END:
                    yield call.see(item)
                    item = next(items, _END)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        call.end_generator()

    return wrapper


def _protect_async_generator(fn: Callable[..., AsyncIterator[Any]], protected: _Protected) -> Any:
    """The async twin of :func:`_protect_generator`, bounded by the timeout: the whole
    iteration, from the call to the last item (the caller's own time between items counts),
    ends with :class:`ProviderTimeoutError` once it is spent."""

    async def step(items: AsyncIterator[Any], deadline: float) -> Any:
        with anyio.CancelScope(deadline=deadline):
            return await anext(items, _END)
        # a scope lets the block end without its return only when its deadline cancelled it
        raise protected.timed_out()

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        call = _Call(protected)
        deadline = anyio.current_time() + protected.timeout
        items: AsyncIterator[Any] | None = None
        try:
            with call:
                async for attempt in call.attempts():
                    with attempt:
                        items = fn(*args, **kwargs)
                        item = await step(items, deadline)
                while item is not _END:
                    yield call.see(item)
                    item = await step(items, deadline)  # type: ignore[arg-type]
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
        call.end_generator()

    return wrapper


def _warn_if_client_retries(fn: Callable[..., Any]) -> None:
    """Warn when ``fn`` reaches an openai client whose own retries are on."""
    for client in _objects_reachable_from(fn):
        retries = getattr(client, "max_retries", None)
        if type(client).__module__.startswith("openai") and isinstance(retries, int) and retries:
            warnings.warn(
                f"{getattr(fn, '__qualname__', fn)!s} uses an openai client with "
                f"max_retries={retries}; with "
                "guard.protect retrying too, attempts multiply. Create the client with "
                "max_retries=0 (or use client.with_options(max_retries=0)).",
                RetryMultiplicationWarning,
                stacklevel=4,
            )
            return


def _objects_reachable_from(
    fn: Callable[..., Any], *, heeding_with_options: bool = True
) -> list[object]:
    """What ``fn`` can reach by name: closure cells, globals it loads (nested code too),
    defaults, and the attributes of the object a bound method or partial is bound to.

    A function that calls ``with_options`` sets its client's options inline: nothing is
    reported for it (``client.with_options(max_retries=0)`` is the advice we give), unless
    ``heeding_with_options`` is false (the clients it reaches name its provider).
    """
    found: list[object] = []
    pending: list[Any] = [fn]
    while pending:
        target = pending.pop()
        if isinstance(target, functools.partial):
            pending.append(target.func)
            found.extend([*target.args, *target.keywords.values()])
            continue
        bound_to = getattr(target, "__self__", None)
        if bound_to is not None and not isinstance(bound_to, type(functools)):
            found.extend(vars(bound_to).values() if hasattr(bound_to, "__dict__") else ())
            target = getattr(target, "__func__", target)
        target = inspect.unwrap(target)
        code = getattr(target, "__code__", None)
        if code is None:
            continue
        codes = _nested_codes(code)
        if heeding_with_options and any("with_options" in c.co_names for c in codes):
            return []
        namespace = getattr(target, "__globals__", {})
        for nested in codes:
            for instruction in dis.get_instructions(nested):
                if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                    name = instruction.argval
                    if name in namespace:
                        found.append(namespace[name])
        for cell in getattr(target, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                found.append(cell.cell_contents)
        found.extend(getattr(target, "__defaults__", None) or ())
    return found


def _nested_codes(code: CodeType) -> list[CodeType]:
    """``code`` and every code object defined inside it (lambdas, inner functions)."""
    codes, pending = [], [code]
    while pending:
        current = pending.pop()
        codes.append(current)
        pending.extend(c for c in current.co_consts if isinstance(c, CodeType))
    return codes


_warned_sdk_retries = False


def _warn_if_sdk_retried(error: BaseException) -> None:
    """Warn once when an openai error says the client had retried the request itself."""
    global _warned_sdk_retries
    response = getattr(error, "response", None)
    request = getattr(response, "request", None)
    headers = getattr(request, "headers", None)
    count = headers.get("x-stainless-retry-count") if headers is not None else None
    if _warned_sdk_retries or count in (None, "0"):
        return
    _warned_sdk_retries = True
    warnings.warn(
        f"the provider SDK retried this request itself ({count} retries) inside "
        "guard.protect: attempts multiply. Turn the client's retries off (max_retries=0).",
        RetryMultiplicationWarning,
        stacklevel=4,
    )


def _usage_of(result: object, tally: StreamTally | None) -> Usage | None:
    return tally.usage() if tally is not None else usage_from_result(result)


def _model_of(result: object) -> str | None:
    model = result.get("model") if isinstance(result, Mapping) else getattr(result, "model", None)
    return model if isinstance(model, str) else None
