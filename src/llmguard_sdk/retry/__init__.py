"""Retries: full-jitter backoff, server hints, deadlines, retry budgets, streaming safety.

The Guard retries each route with its :class:`RetryPolicy`; the same machinery retries any
function through :func:`retry` and :func:`retry_context`, no Guard needed.

.. versionadded:: 0.1.0
"""

from ..context import RetryDetails
from ..errors import RejectedResultError
from ._api import (
    Attempt,
    RetryHook,
    Retrying,
    RetryOptions,
    retry,
    retry_context,
)
from ._testing import is_testing, set_testing, waits_off
from ._verdicts import is_retryable
from .budget import MemoryRetryBudget, RetryBudget, RetryBudgetPolicy
from .policy import Decision, Jitter, RetryPolicy, backoff, decide
from .redis import RedisRetryBudget

__all__ = [
    "Attempt",
    "Decision",
    "Jitter",
    "MemoryRetryBudget",
    "RedisRetryBudget",
    "RejectedResultError",
    "RetryBudget",
    "RetryBudgetPolicy",
    "RetryDetails",
    "RetryHook",
    "RetryOptions",
    "RetryPolicy",
    "Retrying",
    "backoff",
    "decide",
    "is_retryable",
    "is_testing",
    "retry",
    "retry_context",
    "set_testing",
    "waits_off",
]
