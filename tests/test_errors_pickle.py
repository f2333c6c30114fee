"""The SDK's exceptions cross process boundaries (multiprocessing, process pools, task
queues pickle them): each comes back as the same type with the same message and attributes."""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from llmguard_sdk.errors import (
    AllRoutesFailedError,
    BudgetExceededError,
    BudgetUnavailableError,
    CanaryNotFoundError,
    CircuitOpenError,
    ConfigurationError,
    GuardrailRejectedError,
    InputTooLargeError,
    LLMGuardError,
    MovingModelAliasError,
    PromptLintError,
    RateLimitedError,
    RateLimitExceededError,
    RejectedResultError,
    ReleaseConflictError,
    RequestValidationError,
    StoreUnavailableError,
    StreamInterruptedError,
    UnknownModelError,
    UnknownModelPriceError,
)
from llmguard_sdk.prompts import LintWarning

ERRORS: list[LLMGuardError] = [
    ConfigurationError("bad"),
    UnknownModelPriceError("openai", "gpt-x"),
    MovingModelAliasError("gpt-4o", "primary"),
    RequestValidationError("bad request", [{"loc": ("messages",)}]),
    InputTooLargeError(5000, 4000, estimated=True),
    UnknownModelError("bigg", ["small", "big"], ["gpt-4o-mini"]),
    GuardrailRejectedError("no secrets", stage="input"),
    PromptLintError("t", [LintWarning("timestamp", "a date", "system", 1, 5, "2026-01-01")]),
    RateLimitedError("slow down", route="primary", status_code=429, retry_after=2.0),
    StreamInterruptedError("cut", route="primary", partial_text="Hello"),
    CircuitOpenError("primary", "open", retry_after=3.0),
    RateLimitExceededError("no room", key="k", retry_after=1.5),
    BudgetExceededError("over", scope="tenant", limit_usd=1.0, spent_usd=1.2, retry_after=60),
    BudgetUnavailableError("redis down", scope="s", limit_usd=1.0, spent_usd=float("inf")),
    ReleaseConflictError("bot", "promote", attempts=10),
    RejectedResultError({"state": "pending"}, attempts=3, reason="attempts-exhausted"),
    CanaryNotFoundError("bot", "rollback"),
    StoreUnavailableError("the shared cache was not cleared"),
    AllRoutesFailedError({"primary": CircuitOpenError("primary", "open", retry_after=3.0)}),
]


def _same(a: BaseException, b: BaseException) -> None:
    assert type(b) is type(a)
    assert str(b) == str(a)
    assert b.args == a.args
    assert repr(vars(b)) == repr(vars(a))


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_survives_pickle_and_copy(error: LLMGuardError) -> None:
    # CircuitOpenError, BudgetExceededError, AllRoutesFailedError ... were rebuilt by calling
    # their __init__ with the message alone: TypeError / ValueError on unpickling
    _same(error, pickle.loads(pickle.dumps(error)))
    _same(error, copy.copy(error))


def _refused(_: int) -> None:
    raise CircuitOpenError("primary", "open", retry_after=3.0)


def test_an_error_raised_in_a_process_pool_reaches_the_caller() -> None:
    # it broke the whole pool (BrokenProcessPool) instead
    with ProcessPoolExecutor(1) as pool, pytest.raises(CircuitOpenError) as caught:
        pool.submit(_refused, 0).result(timeout=60)
    assert (caught.value.route, caught.value.state, caught.value.retry_after) == (
        "primary",
        "open",
        3.0,
    )
