"""What a retry loop retries: the exceptions its ``on=`` matches (by default those the SDK
classifies as retryable provider failures), and the results its ``on_result=`` rejects, read
alike (a predicate's ``float`` is a wait, anything else counts by its truthiness).

.. versionadded:: 0.2.0 ``on_result``.
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from typing import Any

from .._decorating import is_async_callable
from ..classify import classify_exception
from ..errors import ConfigurationError, LLMGuardError, ProviderError
from ._testing import testing_attempts
from .policy import Decision, RetryPolicy, why_not

__all__ = [
    "NO_RESULT",
    "RetryOn",
    "check_result_predicate",
    "is_exception_types",
    "is_retryable",
    "judge",
    "judge_result",
    "note",
]

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], Any]

NO_RESULT: Any = object()  # an attempt given no result (``set_result`` never called)


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


def judge(on: RetryOn, exc: BaseException) -> tuple[bool, float | None]:
    """Whether ``on`` retries ``exc``, and the wait it asks for (a server's hint, or a
    predicate's ``float``)."""
    if isinstance(on, (type, tuple)):
        error = exc if isinstance(exc, ProviderError) else classify_exception(exc)
        hint = error.retry_after if error is not None else None
        return isinstance(exc, on) or classified_as(on, error), hint
    try:
        verdict = on(exc)
        if isinstance(verdict, float):  # (a bool or an int is no wait: a status code is not)
            return True, verdict
        retryable = bool(verdict)
    except Exception as broken:  # the caller's predicate: the error it judged still stands
        note(exc, f"not retried: the retry on= predicate {on!r} raised {broken!r}")
        return False, None
    return retryable, hint_of(exc) if retryable else None


def is_exception_types(on: object) -> bool:
    """Whether ``on`` is an exception type or a tuple of them."""
    kinds = on if isinstance(on, tuple) else (on,)
    return all(isinstance(kind, type) and issubclass(kind, BaseException) for kind in kinds)


def classified_as(
    on: type[BaseException] | tuple[type[BaseException], ...], error: ProviderError | None
) -> bool:
    """Whether the SDK's classification ``error`` of an exception is of a type of the SDK
    that ``on`` names: ``on=RateLimitedError`` retries openai's ``RateLimitError`` too. A type
    that is not the SDK's (``ConnectionError``) matches only what it says."""
    kinds = on if isinstance(on, tuple) else (on,)
    ours = tuple(kind for kind in kinds if issubclass(kind, LLMGuardError))
    return bool(ours) and error is not None and isinstance(error, ours)


def hint_of(exc: BaseException) -> float | None:
    """The wait the server asked for with ``exc`` (Retry-After and friends), if any."""
    error = exc if isinstance(exc, ProviderError) else classify_exception(exc)
    return error.retry_after if error is not None else None


def check_result_predicate(on_result: object) -> None:
    """A :class:`ConfigurationError` unless ``on_result`` is ``None`` or a sync predicate."""
    if on_result is None:
        return
    if not callable(on_result):
        raise ConfigurationError(
            f"retry on_result= must be a callable (result -> bool | float), got {on_result!r}"
        )
    if is_async_callable(on_result):
        raise ConfigurationError(
            f"retry on_result= is called, never awaited: it must not be async, got {on_result!r}"
        )


def judge_result(
    on_result: Callable[[Any], Any], result: object, number: int
) -> tuple[bool, float | None]:
    """Whether ``on_result`` asks to retry after attempt ``number`` returned ``result``, and
    the wait it gave (a ``float``). An error of the predicate's propagates, with a note."""
    try:
        verdict = on_result(result)
        if isinstance(verdict, float):  # (a bool or an int is no wait, as for on=)
            return True, verdict
        return bool(verdict), None
    except Exception as broken:  # the caller's bug: neither retried nor hidden
        note(
            broken,
            f"raised by the retry on_result= predicate {on_result!r} judging attempt "
            f"{number}'s result {reprlib.repr(result)}",
        )
        raise


def note(exc: BaseException, text: str) -> None:
    """Add ``text`` to ``exc`` (PEP 678; on Python 3.10, to its ``__notes__`` alone)."""
    if sys.version_info >= (3, 11):
        exc.add_note(text)
    else:  # (mypy reads one branch a version: the ignore is used on 3.10, unread on 3.11 on)
        notes = getattr(exc, "__notes__", None)
        exc.__notes__ = [*(notes or ()), text]  # type: ignore[attr-defined]


def note_why_not(
    error: BaseException,
    decision: Decision,
    policy: RetryPolicy,
    *,
    attempt: int,
    remaining: float,
) -> None:
    """Note on ``error`` why the retries stopped after attempt number ``attempt`` (see
    :func:`~llmguard_sdk.retry.policy.why_not`; ``remaining``: the seconds left of the
    timeout), the policy's attempts as the tests' switch sets them; nothing where the one
    attempt allowed was the first, or the error is not one to retry."""
    if decision.reason == "attempts-exhausted" and attempt <= 1:
        return
    attempts = testing_attempts(policy.attempts)
    if attempts != policy.attempts:
        policy = dataclasses.replace(policy, attempts=attempts)
    why = why_not(decision, policy, attempt=attempt, remaining=remaining)
    if why:
        note(error, why)
