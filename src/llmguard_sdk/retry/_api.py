"""Retrying any function, sync or async, with the SDK's policy: a decorator and a context.

::

    from llmguard_sdk.retry import retry, retry_context

    @retry(attempts=4, timeout=20)
    def fetch():                      # or: async def fetch(): ...
        return client.chat.completions.create(...)

    for attempt in retry_context(on=httpx.TransportError):
        with attempt:
            do_something()

    @retry(on_result=lambda job: job.state == "pending")   # retry on a result too
    def poll(): ...

By default an exception is retried when the SDK classifies it as a retryable provider failure
(429, 5xx, timeouts, connection errors, from this SDK, openai-python, httpx or anything shaped
like them), and a server's ``Retry-After`` is honoured. :func:`set_testing` turns waits off.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypedDict, TypeVar, cast, overload

import anyio
from typing_extensions import Unpack

from .._decorating import is_async_callable, may_return_awaitable, unwrap_method
from .._keywords import check_keywords
from ..classify import classify_exception
from ..context import RetryDetails
from ..errors import ConfigurationError, ProviderError, RefusedError, RejectedResultError
from ._generators import retry_generator
from ._refunds import agive_back, give_back
from ._testing import testing_attempts, testing_remaining, testing_wait
from ._verdicts import (
    NO_RESULT,
    RetryOn,
    check_result_predicate,
    is_exception_types,
    is_retryable,
    judge,
    judge_result,
    note,
    note_why_not,
)
from .budget import RetryBudget
from .policy import Decision, RetryPolicy, decide

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


RetryHook = Callable[[RetryDetails], None]
"""A callable receiving :class:`RetryDetails`."""


class RetryOptions(TypedDict, total=False):
    """How :func:`retry`, :func:`retry_context` and :class:`Retrying` retry; every key is
    optional.

    - ``on``: an exception type, a tuple of types, or a predicate ``exc -> bool | float``.
      Default: :func:`is_retryable`. The SDK's own error types also match the exceptions it
      classifies as them: ``on=RateLimitedError`` retries openai's ``RateLimitError`` too. A
      predicate's ``float`` retries after that many seconds (a wait hint, as
      :func:`is_retryable` returns); anything else it returns counts by its truthiness: a
      truthy value (``True``, a regex match, a status code such as ``503``: an ``int`` is no
      wait) retries with the backoff (or the server's hint), a falsy one does not. A
      predicate that raises retries nothing: the error it judged propagates, with a note
      (PEP 678) naming the predicate's error.
    - ``policy``: a :class:`RetryPolicy` (full jitter, 3 attempts, 60 s by default).
    - ``attempts``, ``timeout``: shortcuts that override the policy's.
    - ``on_result``: a predicate ``result -> bool | float`` asking for another attempt after
      one that returned ``result`` (tenacity's ``retry_if_result``), read as ``on``'s
      predicate: a ``float`` retries after that many seconds, anything else by its
      truthiness. When the retries run out on a result,
      :class:`~llmguard_sdk.errors.RejectedResultError` is raised (as tenacity's
      ``RetryError``), carrying the last ``result``: a result asked to be retried is never
      returned as if it were good. A predicate that raises propagates its error (with a
      note), neither retried nor returned. :func:`retry` judges what the function returns;
      a :func:`retry_context` loop what ``attempt.set_result(value)`` gives it, inside the
      block or after it.
    - ``hooks``: callables receiving :class:`RetryDetails` before each wait.
    - ``give_up_hooks``: callables receiving :class:`RetryDetails` once, when the retries
      stop on a failure (or a result) they would retry: attempts run out, the deadline, the
      budget, a stream that delivered (``reason`` says which); ``attempt``, ``elapsed`` and
      ``waited`` are the call's statistics. Not called for what is never retried (an error
      ``on`` does not match). Nothing is done for them while none is given.
    - ``name``: the name in :class:`RetryDetails` and the budget's key (``@retry``: the
      function's qualified name). Without it, each place that retries keeps a budget of its
      own: ``@retry``'s key is the function's module and qualified name (a callable without
      one, such as a ``functools.partial``: the module, function and line decorating it), a
      :func:`retry_context`'s the module, function and line it is called from (as many keys
      as there are such places in the code, never one per call).
    - ``budget``: a :class:`~llmguard_sdk.retry.budget.RetryBudget`.

    .. versionadded:: 0.2.0 (``on_result`` and ``give_up_hooks`` too)
    """

    on: RetryOn
    policy: RetryPolicy | None
    attempts: int | None
    timeout: float | None
    on_result: Callable[[Any], Any] | None
    hooks: Sequence[RetryHook]
    give_up_hooks: Sequence[RetryHook]
    name: str
    budget: RetryBudget | None


@dataclasses.dataclass
class _Loop:
    """One iteration of a :class:`Retrying`: when it started and its last wait (iterations
    of one object, in threads or tasks at once or one after the other, keep their own)."""

    started: float = dataclasses.field(default_factory=time.monotonic)
    previous_wait: float = 0.0
    waited: float = 0.0  # the waits before the retries so far, summed


_BUDGET_METHODS = ("record_request", "try_spend", "arecord_request", "atry_spend")


class Attempt:
    """One attempt of a :class:`Retrying` loop; use it as a context manager."""

    def __init__(self, retrying: Retrying, number: int, loop: _Loop | None = None) -> None:
        self._retrying = retrying
        self._loop = loop or _Loop()
        self.number = number
        self.decision: Decision | None = None
        self.cause: Exception | None = None  # set when a failure was swallowed for a retry
        self.delivered = False
        self.refused = False  # a retry the SDK refused to send (an open breaker): never made
        self._result: Any = NO_RESULT

    def set_result(self, result: Any) -> None:
        """Give the loop this attempt's result, for its ``on_result=`` predicate to judge
        before the next attempt (in the block or after it; without ``on_result``, ignored).

        .. versionadded:: 0.2.0
        """
        self._result = result

    def deliver(self, item: T) -> T:
        """``item``, noted as handed on to a consumer: ``yield attempt.deliver(chunk)`` in a
        generator. A failure after it is never retried (the consumer has part of the stream;
        a retry would give it the same items again): it propagates, as the Guard's streams
        do after their first token. A failure before it is retried as ever.

        .. versionadded:: 0.2.0
        """
        self.delivered = True
        return item

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        loop, retrying = self._loop, self._retrying
        decision = self.decision = retrying.judge(
            self.number,
            exc,
            started=loop.started,
            previous_wait=loop.previous_wait,
            delivered=self.delivered,
        )
        # a retry refused unsent goes back to the budget: the loop does it (async where it
        # runs async), then raises the refusal unless it is retried
        self.refused = self.number > 1 and not self.delivered and isinstance(exc, RefusedError)
        swallowed = decision.retry or (self.refused and retrying.budget is not None)
        if swallowed:
            self.cause = exc  # the loop asks the budget, then waits and goes on
        if not decision.retry and decision.reason != "not-retryable":
            retrying.give_up(self, exc, decision)
        return swallowed


class Retrying:
    """The engine behind :func:`retry` and :func:`retry_context`: iterate it, sync or async."""

    def __init__(
        self,
        *,
        budget_key: str = "",
        rng: random.Random | None = None,
        **options: Unpack[RetryOptions],
    ) -> None:
        check_keywords(options, RetryOptions, "retry")
        policy = options.get("policy") or RetryPolicy()
        if not isinstance(policy, RetryPolicy):
            raise ConfigurationError(f"retry policy= must be a RetryPolicy, got {policy!r}")
        overrides: dict[str, Any] = {}
        for shortcut in ("attempts", "timeout"):
            if options.get(shortcut) is not None:
                overrides[shortcut] = options.get(shortcut)
        if overrides:
            policy = dataclasses.replace(policy, **overrides)
        self.policy = policy
        on = self.on = options.get("on", is_retryable)
        if not is_exception_types(on) and (isinstance(on, type) or not callable(on)):
            raise ConfigurationError(
                f"retry on= must be an exception type, a tuple of them or a callable, got {on!r}"
            )
        if is_async_callable(on):
            raise ConfigurationError(
                f"retry on= is called, never awaited: it must not be async, got {on!r}"
            )
        self.on_result = options.get("on_result")
        check_result_predicate(self.on_result)
        self.hooks = _hooks(options.get("hooks", ()), "hooks")
        self.give_up_hooks = _hooks(options.get("give_up_hooks", ()), "give_up_hooks")
        self.name = options.get("name", "")
        if not isinstance(self.name, str):
            raise ConfigurationError(f"retry name= must be a string, got {self.name!r}")
        self.budget = options.get("budget")
        if self.budget is not None and not all(
            callable(getattr(self.budget, name, None)) for name in _BUDGET_METHODS
        ):
            raise ConfigurationError(
                "retry budget= must be a RetryBudget (MemoryRetryBudget or RedisRetryBudget "
                f"built from a RetryBudgetPolicy), got {self.budget!r}"
            )
        self.budget_key = (
            budget_key or self.name or (_call_site() if self.budget is not None else "")
        )
        self.rng = rng

    def judge(
        self,
        number: int,
        exc: Exception,
        *,
        started: float | None = None,
        previous_wait: float = 0.0,
        delivered: bool = False,
    ) -> Decision:
        """The policy's decision after attempt ``number`` failed with ``exc``, in a loop that
        ``started`` then (default: now) and waited ``previous_wait`` before this attempt;
        an attempt that ``delivered`` items (:meth:`Attempt.deliver`) is not retried.

        The retry budget is asked afterwards, by the iterator (sync or async as it runs), so
        an async loop never blocks on a sync Redis call.

        .. versionchanged:: 0.2.0 ``delivered``.
        """
        retryable, hint = judge(self.on, exc)
        if retryable and delivered:
            note(exc, f"not retried: attempt {number} had delivered items (attempt.deliver)")
            return Decision(False, 0.0, "stream-delivered")
        error = exc if isinstance(exc, ProviderError) else classify_exception(exc)
        sent = error.request_sent if error is not None else True
        return self._decide(number, retryable, hint, sent, started, previous_wait)

    def _decide(
        self,
        number: int,
        retryable: bool,
        hint: float | None,
        request_sent: bool,
        started: float | None,
        previous_wait: float,
    ) -> Decision:
        elapsed = 0.0 if started is None else time.monotonic() - started
        remaining = testing_remaining(self.policy.timeout - elapsed)
        policy = self.policy
        attempts = testing_attempts(policy.attempts)
        if attempts != policy.attempts:
            policy = dataclasses.replace(policy, attempts=attempts)
        return decide(
            policy,
            attempt=number,
            retryable=retryable,
            hint=hint,
            remaining=remaining,
            previous_wait=previous_wait,
            idempotent=policy.idempotent,
            request_sent=request_sent,
            rng=self.rng,
        )

    def rejects(self, attempt: Attempt) -> bool:
        """Whether the result given to ``attempt`` (:meth:`Attempt.set_result`) is retried:
        ``on_result`` asks for it and the policy allows it (the attempt's ``cause`` is then a
        :class:`RejectedResultError`). Raises that error, the give-up hooks told, when the
        retries ran out on it; without ``on_result`` or a result, ``False``."""
        result = attempt._result
        if self.on_result is None or result is NO_RESULT:
            return False
        retryable, hint = judge_result(self.on_result, result, attempt.number)
        if not retryable:
            return False
        loop = attempt._loop
        decision = attempt.decision = self._decide(
            attempt.number, True, hint, True, loop.started, loop.previous_wait
        )
        if not decision.retry:
            raise self.give_up(
                attempt,
                RejectedResultError(result, attempts=attempt.number, reason=decision.reason),
                decision,
            )
        attempt.cause = RejectedResultError(result, attempts=attempt.number, reason="retry")
        return True

    def give_up(self, attempt: Attempt, error: BaseException, decision: Decision) -> BaseException:
        """Tell the give-up hooks (if any) that the loop stops on ``error`` after
        ``attempt`` (for the ``decision``'s reason); returns ``error``, a note on it saying
        why it was not retried (a server's wait past the cap or the time left, the attempts,
        the retry budget)."""
        left = self.policy.timeout - (time.monotonic() - attempt._loop.started)
        note_why_not(error, decision, self.policy, attempt=attempt.number, remaining=left)
        if self.give_up_hooks:
            details = RetryDetails(
                name=self.name,
                attempt=attempt.number,
                wait=0.0,
                cause=error,
                elapsed=time.monotonic() - attempt._loop.started,
                hinted=decision.hinted,
                waited=attempt._loop.waited,
                reason=decision.reason,
            )
            for hook in self.give_up_hooks:
                hook(details)
        return error

    def _go_on(self, attempt: Attempt, budget_granted: bool) -> float:
        """After a swallowed failure: the wait before the next attempt, or re-raise."""
        decision, cause, loop = attempt.decision, attempt.cause, attempt._loop
        assert decision is not None
        assert cause is not None
        if not budget_granted:  # no retry budget left: the failure (or the result) stands
            spent = Decision(False, 0.0, "budget-exhausted")
            if isinstance(cause, RejectedResultError) and cause.reason == "retry":
                cause = RejectedResultError(
                    cause.result, attempts=attempt.number, reason=spent.reason
                )
            raise self.give_up(attempt, cause, spent)
        details = RetryDetails(
            name=self.name,
            attempt=attempt.number,
            wait=decision.wait,
            cause=cause,
            elapsed=time.monotonic() - loop.started,
            hinted=decision.hinted,
            waited=loop.waited,
        )
        loop.previous_wait = decision.wait
        loop.waited += decision.wait
        for hook in self.hooks:
            hook(details)
        return testing_wait(decision.wait)

    def _attempts(self) -> Iterator[Attempt]:
        """Attempt 1, 2, ... from now on (the drivers stop at a success)."""
        loop = _Loop()
        return (Attempt(self, number, loop) for number in itertools.count(1))

    def __iter__(self) -> Iterator[Attempt]:
        return self.iterate()

    def iterate(self, *, recorded: bool = False) -> Iterator[Attempt]:
        """``for attempt in retrying``; ``recorded``: the budget was told of this call
        already (a protected function's stream manager, retried as it is entered)."""
        attempts, budget = self._attempts(), self.budget
        if budget is not None and not recorded:
            budget.record_request(self.budget_key)
        owed = False  # a retry the budget granted, not sent yet (a refused one is reused)
        for attempt in attempts:
            yield attempt
            owed = owed and attempt.refused
            try:
                if attempt.cause is None and not self.rejects(attempt):
                    return
                _refused_stands(attempt)
                owed = owed or (budget is not None and budget.try_spend(self.budget_key))
                time.sleep(self._go_on(attempt, budget is None or owed))
            except BaseException:  # refused, a hook raised, the wait was interrupted
                if owed and budget is not None:
                    give_back(budget, self.budget_key)
                raise

    def __aiter__(self) -> AsyncIterator[Attempt]:
        return self.aiterate()

    async def aiterate(self, *, recorded: bool = False) -> AsyncIterator[Attempt]:
        """``async for attempt in retrying``; ``recorded``: the budget was told of this call
        already (a sync loop whose function returned a coroutine goes on here)."""
        attempts, budget = self._attempts(), self.budget
        if budget is not None and not recorded:
            await budget.arecord_request(self.budget_key)
        owed = False  # a retry the budget granted, not sent yet (a refused one is reused)
        for attempt in attempts:
            yield attempt
            owed = owed and attempt.refused
            try:
                if attempt.cause is None and not self.rejects(attempt):
                    return
                _refused_stands(attempt)
                owed = owed or (budget is not None and await budget.atry_spend(self.budget_key))
                await anyio.sleep(self._go_on(attempt, budget is None or owed))
            except BaseException:  # refused, a hook raised, the wait was cancelled
                if owed and budget is not None:
                    await agive_back(budget, self.budget_key)
                raise


async def _retried(
    attempts: AsyncIterator[Attempt], call: Callable[[], Any], first: Any = NO_RESULT
) -> Any:
    """``call()``'s result, awaited, each failure judged by the loop of ``attempts``; the
    first attempt awaits ``first`` where the call was made already (a plain function that
    returned a coroutine)."""
    async for attempt in attempts:
        with attempt:
            pending, first = (call() if first is NO_RESULT else first), NO_RESULT
            result = await pending if inspect.isawaitable(pending) else pending
            attempt.set_result(result)
    return result  # (the loop ends on an attempt that returned one)


def _hooks(hooks: object, option: str) -> tuple[RetryHook, ...]:
    """``hooks`` (the option ``option``) as a tuple of sync callables, else a
    :class:`ConfigurationError`."""
    if isinstance(hooks, str) or not isinstance(hooks, Iterable):
        raise ConfigurationError(f"retry {option}= must be a sequence of callables, got {hooks!r}")
    found = tuple(hooks)
    if not all(callable(hook) for hook in found):
        raise ConfigurationError(f"retry {option}= must all be callables, got {found!r}")
    if any(is_async_callable(hook) for hook in found):
        raise ConfigurationError(
            f"retry {option}= are called, never awaited: none may be async, got {found!r}"
        )
    return found


def _call_site() -> str:
    """Where the code outside this module made the loop: ``module.function:line`` (the
    budget's key of a loop without a name; unrelated loops shared the key "")."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    code = frame.f_code
    function = getattr(code, "co_qualname", code.co_name)  # (co_qualname: Python 3.11+)
    return f"{frame.f_globals.get('__name__', '?')}.{function}:{frame.f_lineno}"


def _refused_stands(attempt: Attempt) -> None:
    """Raise the refusal ``attempt`` swallowed only to give its retry back (not retried)."""
    if attempt.refused and attempt.decision is not None and not attempt.decision.retry:
        assert attempt.cause is not None
        raise attempt.cause


def retry_context(**options: Unpack[RetryOptions]) -> Retrying:
    """Retry a block: ``for attempt in retry_context(...): with attempt: ...``.

    Also ``async for`` in async code. Options (:class:`RetryOptions`) as for :func:`retry`;
    without ``name``, a ``budget`` is kept per place in the code that calls this (its module,
    function and line), not shared by every unnamed loop. With ``on_result``, give the loop
    what the block got (``attempt.set_result(value)``, in the block or after it); running out
    on a rejected result raises :class:`~llmguard_sdk.errors.RejectedResultError` from the
    ``for`` line.

    In a generator that yields inside the block, yield each item through
    :meth:`Attempt.deliver` (``yield attempt.deliver(chunk)``): a failure before the first
    item is retried, one after it propagates unretried, as the Guard's streams do after
    their first token. An item yielded without it is unknown to the loop, which would
    retry and hand the consumer the same items again.

    .. versionchanged:: 0.2.0 ``on_result``, ``give_up_hooks``, :meth:`Attempt.deliver`.
    """
    return Retrying(**options)


@overload
def retry(func: F, **given: Unpack[RetryOptions]) -> F: ...


@overload
def retry(func: None = None, **given: Unpack[RetryOptions]) -> Callable[[F], F]: ...


def retry(func: F | None = None, **given: Unpack[RetryOptions]) -> F | Callable[[F], F]:
    """Decorate a sync or async function so that its failures are retried.

    The options (:class:`RetryOptions`): ``on`` (what to retry; default
    :func:`is_retryable`), ``policy`` (a :class:`RetryPolicy`: full jitter, 3 attempts, 60 s
    by default), ``attempts`` and ``timeout`` (shortcuts that override the policy's),
    ``hooks`` (callables receiving :class:`RetryDetails` before each wait),
    ``give_up_hooks`` (called once when the retries stop on what they would retry),
    ``on_result`` (a predicate on what the function returns: truthy, or a ``float`` wait,
    calls it again; running out raises :class:`~llmguard_sdk.errors.RejectedResultError`
    carrying the last result), ``budget`` (a
    :class:`~llmguard_sdk.retry.budget.RetryBudget` keyed by the function's name).

    Use as ``@retry`` or ``@retry(attempts=5)`` (a bad option: :class:`ConfigurationError`
    at once). A plain function that wraps an async one (``AsyncOpenAI().chat.completions
    .create``) is retried as async: the decorated function returns a coroutine. So is a plain
    ``def`` that returns a coroutine (``return async_client.chat.completions.create(...)``):
    the wrapper returns a coroutine whose first attempt awaits the one returned, its retries
    call the function again and await it, the retry budget counting the call once. Stacked above
    ``@staticmethod`` or ``@classmethod``, it wraps their function and stays one.

    A generator function (sync or async) is retried as ``@guard.protect`` retries one: before
    its first item; after it, a failure propagates unretried, noted, the give-up hooks told
    ``reason="stream-delivered"`` (as after :meth:`Attempt.deliver`: no item is handed over
    twice). ``on_result`` is refused for a generator.

    .. versionchanged:: 0.2.0 above ``@staticmethod`` and ``@classmethod``; ``on_result``
       and ``give_up_hooks``; generator functions, sync and async (they were refused); the
       options checked when ``retry(...)`` is called; a plain function returning a
       coroutine retried as an async one (the coroutine came back unretried).
    """
    check_keywords(given, RetryOptions, "retry")
    if func is not None and not isinstance(func, classmethod) and not callable(func):
        raise ConfigurationError(
            f"retry takes a function, then its options as keywords (@retry(attempts=3)), "
            f"got {func!r}"
        )
    Retrying(budget_key="retry", **given)  # checked now, not once it decorates something

    def decorate(method: F) -> F:
        fn, takes_its_place = unwrap_method(method)
        own_name = getattr(fn, "__qualname__", None)
        name = own_name or type(fn).__qualname__
        options = given.copy()
        options.setdefault("name", name)
        # the budget's key: the function's module too, unless the name was given; a callable
        # without a name of its own (a functools.partial): where it was decorated
        module = getattr(fn, "__module__", None) or type(fn).__module__
        if "name" in given:
            key = options["name"]
        else:
            key = f"{module}.{name}" if own_name else _call_site()
        loop = functools.partial(Retrying, budget_key=key, **options)
        streaming = retry_generator(fn, name, loop, options.get("on_result"))
        if streaming is not None:
            return cast(F, takes_its_place(streaming))

        return cast(F, takes_its_place(_wrapped(fn, loop)))

    return decorate(func) if func is not None else decorate


def _wrapped(fn: Callable[..., Any], loop: Callable[[], Retrying]) -> Callable[..., Any]:
    """``fn`` retried by the loops ``loop()`` makes: an async function (or a plain one that
    wraps one) by an async wrapper; a plain one by a sync wrapper, which goes on as an async
    one, returning its coroutine, where ``fn`` returned an awaitable."""
    if is_async_callable(fn) or may_return_awaitable(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await _retried(loop().aiterate(), functools.partial(fn, *args, **kwargs))

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in loop():
            with attempt:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):  # a def returning a coroutine: go async
                    break
                attempt.set_result(result)
        else:
            return result  # (the loop ends on an attempt that returned one)
        call = functools.partial(fn, *args, **kwargs)
        return _retried(loop().aiterate(recorded=True), call, first=result)

    return wrapper
