"""A failed call through ``anthropic_client(guard)`` raises an error that is both the Guard's
(``except AllRoutesFailedError``, every attribute) and anthropic's own for the seam's answer
(its status and error body), as ``guard.client()``'s errors are openai's too."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BadRequestError,
    BudgetExceededError,
    Guard,
    LLMGuardError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    StreamInterruptedError,
)
from llmguard_sdk.client import anthropic_client, async_anthropic_client
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, require_module
from .test_client_openai_errors import MakeGuard
from .test_client_openai_errors import _failing as openai_failing


@pytest.fixture
def anthropic() -> Any:
    return require_module("anthropic", "anthropic is a dev dependency")


def _failing(kind: str, fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard) -> Guard:
    """A Guard whose next call fails as ``kind`` says (Claude's 529 besides openai's cases)."""
    if kind != "529":
        return openai_failing(kind, fake, fake2, make_guard)
    fake.always(Fault(status=529))
    return make_guard(fake, retry=None, breaker=None)


def _create(client: Any, kind: str, stream: bool) -> Any:
    options: dict[str, Any] = {"model": "m", "messages": USER, "max_tokens": 10}
    if kind == "timeout":
        options["timeout"] = 0.3
    answer = client.messages.create(stream=stream, **options)
    return list(answer) if stream else answer


# the failure, the Guard's error class, anthropic's (by name), the status the seam answers
CASES = [
    ("429", RateLimitedError, "RateLimitError", 429),
    ("500", ProviderUnavailableError, "InternalServerError", 500),
    ("529", ProviderUnavailableError, "OverloadedError", 529),
    ("400", BadRequestError, "BadRequestError", 400),
    ("budget", BudgetExceededError, "RateLimitError", 429),
    ("timeout", ProviderTimeoutError, "InternalServerError", 504),
    ("chain", AllRoutesFailedError, "InternalServerError", 500),
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("kind", "guard_kind", "sdk_name", "status"), CASES, ids=lambda c: c)
def test_a_failure_is_the_guard_s_error_and_anthropic_s(
    anthropic: Any,
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    kind: str,
    guard_kind: type[LLMGuardError],
    sdk_name: str,
    status: int,
    stream: bool,
) -> None:
    # anthropic's error came alone, the Guard's hidden in response.extensions: `except
    # AllRoutesFailedError` (or any Guard error) missed it
    guard = _failing(kind, fake, fake2, make_guard)
    with pytest.raises(getattr(anthropic, sdk_name)) as caught:
        _create(anthropic_client(guard), kind, stream)
    error: Any = caught.value
    assert issubclass(type(error), guard_kind)
    assert type(error).__name__ == guard_kind.__name__  # tracebacks read as before
    assert error.status_code == error.response.status_code == status
    assert error.response.headers["x-llmguard-error"] == guard_kind.__name__
    assert error.response.extensions["llmguard_error"].__class__ is guard_kind
    assert str(error) == str(error.response.extensions["llmguard_error"])
    assert error.body["type"] == "error"
    assert error.type == error.body["error"]["type"]  # anthropic's attributes stay


def test_the_guard_s_attributes_stay_and_it_pickles_and_copies(
    anthropic: Any, fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    client = anthropic_client(_failing("429", fake, fake2, make_guard))
    with pytest.raises(RateLimitedError) as limited:
        client.messages.create(model="m", max_tokens=10, messages=USER)
    error: Any = limited.value
    assert isinstance(error, anthropic.RateLimitError)
    assert (error.route, error.retry_after, error.retryable) == ("primary", 7.0, True)
    client = anthropic_client(_failing("chain", fake, fake2, make_guard))
    with pytest.raises(AllRoutesFailedError) as caught:
        client.messages.create(model="m", max_tokens=10, messages=USER)
    failed: Any = caught.value
    for again in (pickle.loads(pickle.dumps(failed)), copy.copy(failed), copy.deepcopy(failed)):
        assert type(again) is type(failed)
        assert isinstance(again, anthropic.InternalServerError)
        assert (str(again), again.args, again.body) == (str(failed), failed.args, failed.body)
        assert list(again.errors) == ["primary", "backup"]
        assert again.status_code == again.response.status_code == 500


def test_a_broken_stream_and_the_async_client(
    anthropic: Any, fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    # a stream that broke after it began raised anthropic's status error (for its 200) alone
    guard = make_guard(fake, retry=None)
    fake.always(Fault(cut_stream_after=2))
    with pytest.raises(anthropic.APIStatusError) as caught:
        list(anthropic_client(guard).messages.create(**_ask(), stream=True))
    error: Any = caught.value
    assert issubclass(type(error), StreamInterruptedError)
    assert error.status_code == 200
    assert error.partial_text == "Echo: hello"
    assert error.body["error"]["message"] == str(error)
    budget = _failing("budget", fake, fake2, make_guard)

    async def run(guard: Guard, stream: bool) -> BaseException:
        try:
            answer = await async_anthropic_client(guard).messages.create(**_ask(), stream=stream)
            async for _event in answer:
                pass
        except LLMGuardError as exc:
            return exc
        finally:
            await guard.aclose()
        raise AssertionError("no error")

    broken = anyio.run(run, guard, True)
    assert isinstance(broken, StreamInterruptedError)
    assert issubclass(type(broken), anthropic.APIStatusError)
    refused: Any = anyio.run(run, budget, False)
    assert issubclass(type(refused), BudgetExceededError)
    assert issubclass(type(refused), anthropic.RateLimitError)
    assert (refused.status_code, refused.limit_usd) == (429, 1e-9)


def _ask() -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": USER}
