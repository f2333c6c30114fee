"""Retrying any function, sync or async, with the SDK's policy: a decorator and a context.

::

    from llmguard_sdk.retry import retry, retry_context

    @retry(attempts=4, timeout=20)
    def fetch():                      # or: async def fetch(): ...
        return client.chat.completions.create(...)

    for attempt in retry_context(on=httpx.TransportError):
        with attempt:
            do_something()

By default an exception is retried when the SDK classifies it as a retryable provider failure
(429, 5xx, timeouts, connection errors, from this SDK, openai-python, httpx or anything shaped
like them), and a server's ``Retry-After`` is honoured. :func:`set_testing` turns waits off.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import math
import random
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypedDict, TypeVar, cast, overload

import anyio
from typing_extensions import Unpack

from .._decorating import is_async_callable, may_return_awaitable, refuse_generator, unwrap_method
from .._keywords import check_keywords
from ..classify import classify_exception
from ..context import RetryDetails
from ..errors import ConfigurationError, LLMGuardError, ProviderError
from .budget import RetryBudget
from .policy import MIN_ATTEMPT_SECONDS, Decision, RetryPolicy, decide

F = TypeVar("F", bound=Callable[..., Any])
RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], Any]


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
    - ``hooks``: callables receiving :class:`RetryDetails` before each wait.
    - ``name``: the name in :class:`RetryDetails` and the budget's key (``@retry``: the
      function's qualified name). Without it, each place that retries keeps a budget of its
      own: ``@retry``'s key is the function's module and qualified name (a callable without
      one, such as a ``functools.partial``: the module, function and line decorating it), a
      :func:`retry_context`'s the module, function and line it is called from (as many keys
      as there are such places in the code, never one per call).
    - ``budget``: a :class:`~llmguard_sdk.retry.budget.RetryBudget`.

    .. versionadded:: 0.2.0
    """

    on: RetryOn
    policy: RetryPolicy | None
    attempts: int | None
    timeout: float | None
    hooks: Sequence[RetryHook]
    name: str
    budget: RetryBudget | None


class _Testing:
    lock = threading.Lock()
    enabled = False
    attempts: int | None = None


def set_testing(enabled: bool, *, attempts: int | None = None) -> None:
    """Turn waits off (``enabled=True``) in tests; optionally cap attempts too.

    While on, every wait of :func:`retry`, :func:`retry_context` *and* the Guard's retry stage
    is zero, so tests run fast without changing the code under test. A wait not taken does
    not count against the ``timeout`` of :func:`retry` and :func:`retry_context`, nor against
    a Guard call's (only the time really spent does), so their retries do not depend on the
    jitter's draws.
    """
    if attempts is not None and (
        not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1
    ):
        raise ConfigurationError(f"attempts must be a whole number >= 1, got {attempts!r}")
    with _Testing.lock:
        _Testing.enabled = enabled
        _Testing.attempts = attempts if enabled else None


@contextlib.contextmanager
def waits_off(*, attempts: int | None = None) -> Iterator[None]:
    """Turn waits off (and optionally cap attempts) for a block, then restore the setting.

    The switch is process-wide (it reaches code running in other threads too), as stamina's.
    """
    with _Testing.lock:
        saved = (_Testing.enabled, _Testing.attempts)
    set_testing(True, attempts=attempts)
    try:
        yield
    finally:
        with _Testing.lock:
            _Testing.enabled, _Testing.attempts = saved


def is_testing() -> bool:
    """Whether :func:`set_testing` turned waits off."""
    return _Testing.enabled


def testing_wait(wait: float) -> float:
    """``wait``, or 0 while testing mode is on."""
    return 0.0 if _Testing.enabled else wait


def testing_remaining(remaining: float) -> float:
    """The time left that a retry's wait must fit in: ``remaining`` seconds, or, while
    testing mode is on and an attempt still fits, no bound (a wait not taken cannot overrun
    the timeout: only the time really spent counts)."""
    if _Testing.enabled and remaining >= MIN_ATTEMPT_SECONDS:
        return math.inf
    return remaining


def testing_attempts(attempts: int) -> int:
    """``attempts``, capped while testing mode says so."""
    cap = _Testing.attempts
    return min(attempts, cap) if cap is not None else attempts


def is_retryable(exc: BaseException) -> bool | float:
    """The default ``on=``: retry provider failures the SDK classifies as retryable.

    Returns the server's wait hint (seconds) when there is one, ``True`` to retry with
    backoff, ``False`` not to retry. An exception group (a task group's) is retried when
    every member is retryable, after the longest wait its members asked for
    (:func:`~llmguard_sdk.classify.classify_exception`).
    """
    error = classify_exception(exc)
    if error is None or not error.retryable:
        return False
    return float(error.retry_after) if error.retry_after is not None else True


def _judge(on: RetryOn, exc: BaseException) -> tuple[bool, float | None]:
    if isinstance(on, (type, tuple)):
        error = exc if isinstance(exc, ProviderError) else classify_exception(exc)
        hint = error.retry_after if error is not None else None
        return isinstance(exc, on) or _classified_as(on, error), hint
    try:
        verdict = on(exc)
        if isinstance(verdict, float):  # (a bool or an int is no wait: a status code is not)
            return True, verdict
        retryable = bool(verdict)
    except Exception as broken:  # the caller's predicate: the error it judged still stands
        _note(exc, f"not retried: the retry on= predicate {on!r} raised {broken!r}")
        return False, None
    return retryable, _hint_of(exc) if retryable else None


def _note(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc`` (PEP 678; on Python 3.10, to its ``__notes__`` alone)."""
    add_note = getattr(exc, "add_note", None)
    if callable(add_note):
        add_note(note)
    else:
        notes = getattr(exc, "__notes__", None)
        exc.__notes__ = [*(notes or ()), note]  # type: ignore[attr-defined]


def _is_exception_types(on: object) -> bool:
    kinds = on if isinstance(on, tuple) else (on,)
    return all(isinstance(kind, type) and issubclass(kind, BaseException) for kind in kinds)


def _classified_as(
    on: type[BaseException] | tuple[type[BaseException], ...], error: ProviderError | None
) -> bool:
    """Whether the SDK's classification ``error`` of an exception is of a type of the SDK
    that ``on`` names: ``on=RateLimitedError`` retries openai's ``RateLimitError`` too. A type
    that is not the SDK's (``ConnectionError``) matches only what it says."""
    kinds = on if isinstance(on, tuple) else (on,)
    ours = tuple(kind for kind in kinds if issubclass(kind, LLMGuardError))
    return bool(ours) and error is not None and isinstance(error, ours)


def _hint_of(exc: BaseException) -> float | None:
    error = exc if isinstance(exc, ProviderError) else classify_exception(exc)
    return error.retry_after if error is not None else None


@dataclasses.dataclass
class _Loop:
    """One iteration of a :class:`Retrying`: when it started and its last wait (iterations
    of one object, in threads or tasks at once or one after the other, keep their own)."""

    started: float = dataclasses.field(default_factory=time.monotonic)
    previous_wait: float = 0.0


_BUDGET_METHODS = ("record_request", "try_spend", "arecord_request", "atry_spend")


class Attempt:
    """One attempt of a :class:`Retrying` loop; use it as a context manager."""

    def __init__(self, retrying: Retrying, number: int, loop: _Loop | None = None) -> None:
        self._retrying = retrying
        self._loop = loop or _Loop()
        self.number = number
        self.decision: Decision | None = None
        self.cause: Exception | None = None  # set when a failure was swallowed for a retry

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
        loop = self._loop
        self.decision = self._retrying.judge(
            self.number, exc, started=loop.started, previous_wait=loop.previous_wait
        )
        if self.decision.retry:
            self.cause = exc  # swallowed: the loop asks the budget, then waits and goes on
        return self.decision.retry


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
        if not _is_exception_types(on) and (isinstance(on, type) or not callable(on)):
            raise ConfigurationError(
                f"retry on= must be an exception type, a tuple of them or a callable, got {on!r}"
            )
        if is_async_callable(on):
            raise ConfigurationError(
                f"retry on= is called, never awaited: it must not be async, got {on!r}"
            )
        hooks = options.get("hooks", ())
        if isinstance(hooks, str) or not isinstance(hooks, Iterable):
            raise ConfigurationError(f"retry hooks= must be a sequence of callables, got {hooks!r}")
        self.hooks = tuple(hooks)
        if not all(callable(hook) for hook in self.hooks):
            raise ConfigurationError(f"retry hooks= must all be callables, got {self.hooks!r}")
        if any(is_async_callable(hook) for hook in self.hooks):
            raise ConfigurationError(
                f"retry hooks= are called, never awaited: none may be async, got {self.hooks!r}"
            )
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
    ) -> Decision:
        """The policy's decision after attempt ``number`` failed with ``exc``, in a loop that
        ``started`` then (default: now) and waited ``previous_wait`` before this attempt.

        The retry budget is asked afterwards, by the iterator (sync or async as it runs), so
        an async loop never blocks on a sync Redis call.
        """
        retryable, hint = _judge(self.on, exc)
        elapsed = 0.0 if started is None else time.monotonic() - started
        remaining = testing_remaining(self.policy.timeout - elapsed)
        policy = self.policy
        attempts = testing_attempts(policy.attempts)
        if attempts != policy.attempts:
            policy = dataclasses.replace(policy, attempts=attempts)
        error = exc if isinstance(exc, ProviderError) else classify_exception(exc)
        return decide(
            policy,
            attempt=number,
            retryable=retryable,
            hint=hint,
            remaining=remaining,
            previous_wait=previous_wait,
            idempotent=policy.idempotent,
            request_sent=error.request_sent if error is not None else True,
            rng=self.rng,
        )

    def _go_on(self, attempt: Attempt, budget_granted: bool) -> float:
        """After a swallowed failure: the wait before the next attempt, or re-raise."""
        decision, cause = attempt.decision, attempt.cause
        assert decision is not None
        assert cause is not None
        if not budget_granted:
            raise cause  # no retry budget left: the failure stands
        attempt._loop.previous_wait = decision.wait
        details = RetryDetails(
            name=self.name,
            attempt=attempt.number,
            wait=decision.wait,
            cause=cause,
            elapsed=time.monotonic() - attempt._loop.started,
            hinted=decision.hinted,
        )
        for hook in self.hooks:
            hook(details)
        return testing_wait(decision.wait)

    def _attempts(self) -> Iterator[Attempt]:
        """Attempt 1, 2, ... from now on (the drivers stop at a success)."""
        loop = _Loop()
        return (Attempt(self, number, loop) for number in itertools.count(1))

    def __iter__(self) -> Iterator[Attempt]:
        attempts, budget = self._attempts(), self.budget
        if budget is not None:
            budget.record_request(self.budget_key)
        for attempt in attempts:
            yield attempt
            if attempt.cause is None:
                return
            granted = budget is None or budget.try_spend(self.budget_key)
            try:
                time.sleep(self._go_on(attempt, granted))
            except BaseException:  # a hook raised, the wait was interrupted: never made
                if granted and budget is not None:
                    _give_back(budget, self.budget_key)
                raise

    async def __aiter__(self) -> AsyncIterator[Attempt]:
        attempts, budget = self._attempts(), self.budget
        if budget is not None:
            await budget.arecord_request(self.budget_key)
        for attempt in attempts:
            yield attempt
            if attempt.cause is None:
                return
            granted = budget is None or await budget.atry_spend(self.budget_key)
            try:
                await anyio.sleep(self._go_on(attempt, granted))
            except BaseException:  # a hook raised, the wait was cancelled: never made
                if granted and budget is not None:
                    await _agive_back(budget, self.budget_key)
                raise


def _call_site() -> str:
    """Where the code outside this module made the loop: ``module.function:line`` (the
    budget's key of a loop without a name; unrelated loops shared the key "")."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    code = frame.f_code
    function = getattr(code, "co_qualname", code.co_name)  # (co_qualname: Python 3.11+)
    return f"{frame.f_globals.get('__name__', '?')}.{function}:{frame.f_lineno}"


def _give_back(budget: RetryBudget, key: str) -> None:
    """Return a retry ``budget`` gave that was never made (a budget without ``refund``,
    which :class:`RetryBudget` does not require, keeps it)."""
    refund = getattr(budget, "refund", None)
    if callable(refund):
        refund(key)


async def _agive_back(budget: RetryBudget, key: str) -> None:
    """Async :func:`_give_back`, shielded: it runs while the loop is being cancelled (a
    Redis budget's call is bounded by the store's socket timeout)."""
    refund = getattr(budget, "arefund", None)
    if callable(refund):
        with anyio.CancelScope(shield=True):
            await refund(key)


def retry_context(**options: Unpack[RetryOptions]) -> Retrying:
    """Retry a block: ``for attempt in retry_context(...): with attempt: ...``.

    Also ``async for`` in async code. Options (:class:`RetryOptions`) as for :func:`retry`;
    without ``name``, a ``budget`` is kept per place in the code that calls this (its module,
    function and line), not shared by every unnamed loop.
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
    ``hooks`` (callables receiving :class:`RetryDetails` before each wait), ``budget`` (a
    :class:`~llmguard_sdk.retry.budget.RetryBudget` keyed by the function's name).

    Use as ``@retry`` or ``@retry(attempts=5)``. A plain function that wraps an async one
    (``AsyncOpenAI().chat.completions.create``) is retried as async: the decorated function
    returns a coroutine. Stacked above ``@staticmethod`` or ``@classmethod``, it wraps their
    function and stays a staticmethod or classmethod. A generator function is refused
    (:class:`ConfigurationError`): its failures come while it is iterated.

    .. versionchanged:: 0.2.0 above ``@staticmethod`` and ``@classmethod``.
    """
    check_keywords(given, RetryOptions, "retry")
    if func is not None and not isinstance(func, classmethod) and not callable(func):
        raise ConfigurationError(
            f"retry takes a function, then its options as keywords (@retry(attempts=3)), "
            f"got {func!r}"
        )

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
        Retrying(budget_key=key, **options)  # validate the options now, not at the first call
        refuse_generator(fn, name, "retry", "retry the code that consumes it instead")

        if is_async_callable(fn) or may_return_awaitable(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async for attempt in Retrying(budget_key=key, **options):
                    with attempt:
                        result = fn(*args, **kwargs)
                        return await result if inspect.isawaitable(result) else result
                raise AssertionError("unreachable: the last attempt re-raises")

            return cast(F, takes_its_place(async_wrapper))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for attempt in Retrying(budget_key=key, **options):
                with attempt:
                    return fn(*args, **kwargs)
            raise AssertionError("unreachable: the last attempt re-raises")

        return cast(F, takes_its_place(wrapper))

    return decorate(func) if func is not None else decorate
