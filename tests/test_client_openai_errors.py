"""A failed call through ``guard.client()`` / ``guard.aclient()`` raises an error that is both the
Guard's (``except AllRoutesFailedError``, every attribute) and openai's own, the one the
transport seam gives for the same failure (its status, body and headers on a real response),
so code and frameworks that catch openai's errors (Pydantic AI's FallbackModel, LangChain's
context-overflow handling, ``except openai.RateLimitError``) work on the drop-in client."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BadRequestError,
    BudgetExceededError,
    ContextLengthExceededError,
    Guard,
    LLMGuardError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    RequestValidationError,
    StreamInterruptedError,
)
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.client import _async_openai_client, _openai_client
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, require_module

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


def _failing(kind: str, fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard) -> Guard:
    """A Guard whose next call fails as ``kind`` says."""
    if kind == "budget":  # one call's estimate is over the limit: refused before sending
        return make_guard(fake, budgets=Budgets([Budget(limit_usd=1e-9)], prices=PRICES))
    if kind == "chain":
        fake.always(Fault(status=503))
        fake2.always(Fault(status=500))
        return make_guard(fake, fake2, retry=None, breaker=None)
    faults = {
        "429": Fault(status=429, retry_after=7),
        "500": Fault(status=500),
        "400": Fault(status=400),
        "overflow": Fault(status=400, error_code="context_length_exceeded"),
        "timeout": Fault(latency=3.0),
    }
    if kind in faults:
        fake.always(faults[kind])
    return make_guard(fake, retry=None, breaker=None)


def _create(client: Any, kind: str, stream: bool) -> Any:
    options: dict[str, Any] = {"model": "m", "messages": USER, "max_tokens": 10}
    if kind == "timeout":
        options["timeout"] = 0.3
    if kind == "invalid":
        options["n"] = 2
    return client.chat.completions.create(stream=stream, **options)


# the failure, the Guard's error class, openai's, the status the seam answers
CASES = [
    ("429", RateLimitedError, openai.RateLimitError, 429),
    ("500", ProviderUnavailableError, openai.InternalServerError, 500),
    ("400", BadRequestError, openai.BadRequestError, 400),
    ("overflow", ContextLengthExceededError, openai.BadRequestError, 400),
    ("invalid", RequestValidationError, openai.BadRequestError, 400),
    ("budget", BudgetExceededError, openai.RateLimitError, 429),
    ("timeout", ProviderTimeoutError, openai.InternalServerError, 504),
    ("chain", AllRoutesFailedError, openai.InternalServerError, 500),
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("kind", "guard_kind", "openai_kind", "status"), CASES, ids=lambda c: c)
def test_a_failure_is_the_guard_s_error_and_openai_s(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    kind: str,
    guard_kind: type[LLMGuardError],
    openai_kind: type[openai.APIStatusError],
    status: int,
    stream: bool,
) -> None:
    # the Guard's error came out as it was: `except openai.RateLimitError` (and every
    # framework that catches openai's errors) missed it
    guard = _failing(kind, fake, fake2, make_guard)
    with pytest.raises(openai_kind) as caught:
        _create(_openai_client(guard), kind, stream)
    error: Any = caught.value
    assert issubclass(type(error), guard_kind)  # (isinstance would narrow Any for mypy)
    assert type(error).__name__ == guard_kind.__name__  # tracebacks read as before
    assert error.status_code == status
    assert error.response.headers["x-llmguard-error"] == guard_kind.__name__
    assert error.response.extensions["llmguard_error"].__class__ is guard_kind
    # the Guard error's text (an overflow's: with OpenAI's wording, which frameworks look for)
    assert str(error).startswith(str(error.response.extensions["llmguard_error"]))
    assert str(error) == error.body["message"]
    assert ("context_length_exceeded" in str(error)) is (kind == "overflow")
    # the seam gives the same openai error for the same failure: class, status and body
    seam = openai.OpenAI(
        api_key="sk-x", base_url="http://guard.test/v1", http_client=guard.http_client()
    )
    with pytest.raises(openai.APIStatusError) as seen:
        _create(seam, kind, stream)
    assert type(seen.value) is openai_kind
    assert (seen.value.status_code, seen.value.code, seen.value.type) == (
        error.status_code,
        error.code,
        error.type,
    )
    assert isinstance(error.body, dict)
    assert error.body.keys() == {"message", "type", "param", "code"}


def _caught(kind: str, expected: type[BaseException], *servers: Any) -> Any:
    """The error a plain call through ``guard.client()`` raises, failing as ``kind`` says."""
    client = _openai_client(_failing(kind, *servers))
    with pytest.raises(expected) as caught:
        client.chat.completions.create(model="m", messages=USER)
    return caught.value


def test_the_guard_s_attributes_stay(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    error = _caught("429", RateLimitedError, fake, fake2, make_guard)
    assert (error.route, error.retry_after, error.retryable) == ("primary", 7.0, True)
    assert error.headers["retry-after"] == "7"  # the provider's headers, as before
    assert error.response.headers["retry-after-ms"] == "7000"
    failed = _caught("chain", AllRoutesFailedError, fake, fake2, make_guard)
    assert issubclass(type(failed), openai.InternalServerError)
    assert list(failed.errors) == ["primary", "backup"]
    assert all(isinstance(e, ProviderUnavailableError) for e in failed.errors.values())


def test_the_async_client_raises_the_same(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = _failing("budget", fake, fake2, make_guard)

    async def run() -> BaseException:
        client = _async_openai_client(guard)
        try:
            await client.chat.completions.create(model="m", messages=USER, max_tokens=10)
        except openai.RateLimitError as exc:
            return exc
        finally:
            await guard.aclose()
        raise AssertionError("no error")

    error: Any = anyio.run(run)
    assert issubclass(type(error), BudgetExceededError)
    assert error.code == "insufficient_quota"
    assert error.limit_usd == 1e-9


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_broken_stream_is_openai_s_stream_error_too(
    fake: FakeProvider, make_guard: MakeGuard, api: str
) -> None:
    # after the stream began the Guard's StreamInterruptedError came alone; openai's SDK raises
    # APIError for the seam's error event (Pydantic AI maps it to its own model error)
    guard = make_guard(fake, retry=None)
    fake.always(Fault(cut_stream_after=2))
    client = _openai_client(guard)
    if api == "chat":
        stream: Any = client.chat.completions.create(model="m", messages=USER, stream=True)
    else:
        stream = client.responses.create(model="m", input="hello there", stream=True)
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    error: Any = caught.value
    assert issubclass(type(error), StreamInterruptedError)
    assert not issubclass(type(error), openai.APIStatusError)  # no status: the answer was 200
    assert error.partial_text == "Echo: hello"
    assert error.body["message"] == error.message == str(error)
    assert error.request.url.path.endswith("/chat/completions" if api == "chat" else "/responses")

    async def run() -> BaseException:
        client = _async_openai_client(guard)
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        try:
            async for _chunk in stream:
                pass
        except openai.APIError as exc:
            return exc
        finally:
            await guard.aclose()
        raise AssertionError("no error")

    assert isinstance(anyio.run(run), StreamInterruptedError)


def test_such_errors_pickle_and_copy(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    error = _caught("chain", AllRoutesFailedError, fake, fake2, make_guard)
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(again) is type(error)
        assert issubclass(type(again), openai.InternalServerError)
        assert str(again) == str(error)
        assert again.args == error.args
        assert list(again.errors) == ["primary", "backup"]
        assert again.status_code == again.response.status_code == 500
        assert again.body == error.body


def test_pydantic_ai_s_fallback_model_falls_back(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    # pydantic-ai turns only openai's APIStatusError into its ModelHTTPError, the error its
    # FallbackModel falls back on: the Guard's error ended the run instead
    require_module("pydantic_ai", "pydantic-ai-slim[openai] is a dev dependency")
    from pydantic_ai import Agent
    from pydantic_ai.models.fallback import FallbackModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    fake.always(Fault(status=503))
    failing = make_guard(fake, retry=None)
    working = make_guard(fake2)

    def model(guard: Guard) -> OpenAIChatModel:
        return OpenAIChatModel("m", provider=OpenAIProvider(openai_client=guard.aclient()))

    agent = Agent(FallbackModel(model(failing), model(working)))
    assert agent.run_sync("hello there").output == "Echo: hello there"
    assert (len(fake.requests), len(fake2.requests)) == (1, 1)


def test_langchain_classifies_the_errors(fake: FakeProvider, make_guard: MakeGuard) -> None:
    # LangChain turns openai's errors into its own model errors (ModelRateLimitError ...; a
    # ContextOverflowError, which its agents trim and retry on, from a BadRequestError whose
    # text names the overflow); the Guard's own error passed all of that by
    lc = require_module("langchain_openai", "langchain-openai is a dev dependency")
    from langchain_core.exceptions import ModelInvalidRequestError, ModelRateLimitError

    client = _openai_client(make_guard(fake, retry=None, breaker=None))
    llm = lc.ChatOpenAI(
        model="m", api_key="sk-not-sent", client=client.chat.completions, root_client=client
    )
    fake.always(Fault(status=400))
    with pytest.raises(ModelInvalidRequestError) as refused:
        llm.invoke("hello there")
    assert isinstance(refused.value.__cause__, BadRequestError)
    fake.always(Fault(status=429))
    with pytest.raises(ModelRateLimitError) as limited:
        llm.invoke("hello there")
    assert isinstance(limited.value.__cause__, RateLimitedError)


def test_without_openai_the_look_alike_raises_the_guard_s_errors() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["openai"] = None  # as if it were not installed
        from llmguard_sdk import Guard, OpenAICompatibleProvider, ProviderUnavailableError
        from llmguard_sdk.testing import FakeProvider, Fault

        with FakeProvider() as fake:
            fake.always(Fault(status=503))
            guard = Guard(OpenAICompatibleProvider(fake.base_url), retry=None, environ={})
            try:
                guard.client().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            except ProviderUnavailableError as exc:
                print(type(exc).__mro__[1].__name__)
            guard.close()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ProviderError"


def overflowing(where: str, fake: FakeProvider, make_guard: MakeGuard) -> Guard:
    """A Guard whose call overflows: the provider's own 400 (``where="provider"``), or the
    route's known window cannot hold it (``"window"``: not sent)."""
    from llmguard_sdk import OpenAICompatibleProvider

    if where == "provider":
        fake.always(Fault(status=400, error_code="context_length_exceeded"))
        return make_guard(fake, retry=None, breaker=None)
    small = OpenAICompatibleProvider(fake.base_url, model="fake-model", context_window=8)
    return Guard(small, retry=None, breaker=None, environ={})


@pytest.mark.parametrize("how", ["seam", "client"])
@pytest.mark.parametrize("where", ["provider", "window"])
def test_langchain_tells_a_context_overflow(
    fake: FakeProvider, make_guard: MakeGuard, how: str, where: str
) -> None:
    # the seam's overflow answer had the code in its body but not in its text, which is where
    # LangChain looks: its ContextOverflowError (its agents trim the messages and retry on it)
    # never came, neither through the seam nor through guard.client()
    lc = require_module("langchain_openai", "langchain-openai is a dev dependency")
    from langchain_core.exceptions import ContextOverflowError

    guard = overflowing(where, fake, make_guard)
    if how == "seam":
        http = guard.http_client()
        client: Any = openai.OpenAI(
            api_key="sk-x", base_url="http://guard.test/v1", http_client=http
        )
    else:
        client = _openai_client(guard)
    llm = lc.ChatOpenAI(
        model="m", api_key="sk-not-sent", client=client.chat.completions, root_client=client
    )
    with pytest.raises(ContextOverflowError) as caught:
        llm.invoke("hello there " * 20)
    cause: Any = caught.value.__cause__
    assert isinstance(cause, openai.BadRequestError)
    assert cause.code == "context_length_exceeded"
    assert "maximum context length" in str(cause)
    if how == "client":
        assert isinstance(
            cause, ContextLengthExceededError if where == "provider" else LLMGuardError
        )
    assert fake.stats.requests == (1 if where == "provider" else 0)
    guard.close()
