"""Edge cases of the retry stage found in review: each one a behaviour that could regress."""

from __future__ import annotations

import functools
import json
import logging
import time
import warnings
from typing import Any

import anyio
import httpx
import openai
import pytest

from llmguard_sdk import (
    BadRequestError,
    CallEvent,
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    ProviderUnavailableError,
    ResponseCache,
    RetryMultiplicationWarning,
    StreamChunk,
    StreamInterruptedError,
)
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.retry import (
    MemoryRetryBudget,
    RedisRetryBudget,
    RetryBudgetPolicy,
    RetryDetails,
    RetryPolicy,
    is_retryable,
    is_testing,
    retry,
    retry_context,
    set_testing,
    waits_off,
)
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

from .conftest import USER
from .rawserver import RawServer, sse_head
from .test_continuation_counts import LONG, assert_continued_or_refused


def test_httpx_errors_are_classified_for_retries() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert is_retryable(httpx.ConnectError("refused", request=request)) is True
    assert is_retryable(httpx.ReadError("reset", request=request)) is True
    assert is_retryable(httpx.RemoteProtocolError("cut", request=request)) is True
    assert is_retryable(httpx.ReadTimeout("slow", request=request)) is True
    busy = httpx.Response(503, request=request, text="{}")
    assert is_retryable(httpx.HTTPStatusError("503", request=request, response=busy)) is True
    bad = httpx.Response(400, request=request, text="{}")
    assert is_retryable(httpx.HTTPStatusError("400", request=request, response=bad)) is False


def test_negative_or_nan_hints_are_ignored() -> None:
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("x")
        return "ok"

    with waits_off():
        assert retry(flaky, on=lambda exc: -1.0)() == "ok"
        calls = 0
        assert retry(flaky, on=lambda exc: float("nan"))() == "ok"


@pytest.mark.parametrize("bad", [0, True, "3", 2.5])
def test_a_testing_attempts_cap_is_a_whole_number(bad: Any) -> None:
    # "3" raised TypeError, True capped every loop at one attempt; waits_off() too
    with pytest.raises(ConfigurationError, match="attempts"):
        set_testing(True, attempts=bad)
    with pytest.raises(ConfigurationError, match="attempts"), waits_off(attempts=bad):
        pass
    assert not is_testing()


def test_waits_off_restores_the_previous_setting() -> None:
    assert not is_testing()
    with waits_off():
        assert is_testing()
        with waits_off(attempts=1):
            assert is_testing()
        assert is_testing()
    assert not is_testing()


class CountingBudget(MemoryRetryBudget):
    """A real memory budget that also counts which twin was called."""

    def __init__(self) -> None:
        super().__init__(RetryBudgetPolicy())
        self.calls: list[str] = []

    def try_spend(self, route: str) -> bool:
        self.calls.append("sync")
        return super().try_spend(route)

    async def atry_spend(self, route: str) -> bool:
        self.calls.append("async")
        return super().try_spend(route)


def test_async_retries_ask_the_async_budget() -> None:
    budget = CountingBudget()
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ProviderUnavailableError("down")
        return "ok"

    async def run() -> str:
        async for attempt in retry_context(attempts=3, budget=budget):
            with attempt:
                return await flaky()
        raise AssertionError

    with waits_off():
        assert anyio.run(run) == "ok"
    assert budget.calls == ["async", "async"]


def test_protect_does_not_resend_without_idempotency(fake: FakeProvider) -> None:
    guard = Guard(retry=RetryPolicy(attempts=3, base=0.01, idempotency_header=None), environ={})
    client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)

    @guard.protect
    def ask() -> Any:
        return client.chat.completions.create(model="m", messages=USER)

    fake.script(Fault(status=503))
    with pytest.raises(openai.InternalServerError):
        ask()
    assert fake.stats.requests == 1
    client.close()


class Holder:
    def __init__(self, client: object) -> None:
        self.client = client

    def ask(self) -> Any:
        return self.client.chat.completions.create(model="m", messages=USER)  # type: ignore[attr-defined]


def test_protect_finds_clients_through_methods_and_partials(fake: FakeProvider) -> None:
    guard = Guard(environ={})
    retrying = openai.OpenAI(base_url=fake.base_url, api_key="x")
    with pytest.warns(RetryMultiplicationWarning):
        guard.protect(Holder(retrying).ask)

    def ask(client: Any) -> Any:
        return client.chat.completions.create(model="m", messages=USER)

    with pytest.warns(RetryMultiplicationWarning):
        guard.protect(functools.partial(ask, retrying))

    def inline() -> Any:
        return retrying.with_options(max_retries=0).chat.completions.create(
            model="m", messages=USER
        )

    with warnings.catch_warnings():
        warnings.simplefilter("error", RetryMultiplicationWarning)
        guard.protect(inline)  # the advice we give: no warning for it
    retrying.close()


def test_a_stream_cut_after_tool_call_deltas_is_an_interruption() -> None:
    delta = {
        "tool_calls": [
            {
                "index": 0,
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": "{"},
            }
        ]
    }
    event = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    with RawServer(sse_head(), (b"data: " + json.dumps(event).encode() + b"\n\n",)) as server:
        guard = Guard(OpenAICompatibleProvider(server.base_url, model="m"), environ={})
        with pytest.raises(StreamInterruptedError), guard.chat(USER, stream=True) as stream:
            list(stream)
        guard.close()


def test_a_refused_continuation_still_raises_the_interruption(
    fake: FakeProvider, fake2: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(fake, fake2, retry=None, continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    fake2.script(Fault(status=400))
    seen: list[str] = []
    with pytest.raises(StreamInterruptedError) as info, guard.chat(USER, stream=True) as stream:
        seen.extend(chunk.text for chunk in stream)
    assert info.value.partial_text == "".join(seen) == "Echo: hello"
    assert isinstance(info.value.__cause__, BadRequestError)


@pytest.mark.parametrize("slack", [10, 200])
def test_a_continuation_goes_only_to_a_route_whose_window_holds_it(
    fake: FakeProvider, fake2: FakeProvider, slack: int
) -> None:
    """A route's ``context_window`` was checked against the request alone: a continuation
    (the request, the 40 words already streamed, the prompt to go on) went to a route whose
    window holds the request with 10 tokens to spare, not the continuation. With 200 to
    spare the continuation is sent there."""
    request = ChatRequest.model_validate({"messages": LONG, "model": fake2.model})
    window = count_request_tokens(request).tokens + 20 + slack  # 20: max_tokens
    routes = [
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary"),
        OpenAICompatibleProvider(
            fake2.base_url, model=fake2.model, name="backup", context_window=window
        ),
    ]
    fake.script(Fault(cut_stream_after=40))
    events: list[CallEvent] = []
    options: dict[str, Any] = {"retry": None, "hooks": [events.append], "environ": {}}
    guard = Guard(routes, continue_interrupted_streams=True, **options)
    assert_continued_or_refused(guard, fake2, events, fits=slack > 100)


def test_a_continuation_leaves_the_chains_first_route_what_it_was(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """The chain's first route is the one the call starts on, whatever a continuation adds:
    the cache's check of who serves in place of the first (a local one behind it) does not
    take the route the stream broke on for too small, nor record such an error for it."""
    request = ChatRequest.model_validate({"messages": LONG, "model": fake.model})
    window = count_request_tokens(request).tokens + 20 + 10  # holds the request only
    routes = [
        OpenAICompatibleProvider(
            fake.base_url, model=fake.model, name="primary", context_window=window
        ),
        OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name="backup"),
    ]
    routes[1].is_local = True  # type: ignore[attr-defined]
    fake.script(Fault(cut_stream_after=40))
    events: list[CallEvent] = []
    options: dict[str, Any] = {"retry": None, "hooks": [events.append], "environ": {}}
    guard = Guard(routes, cache=ResponseCache(), continue_interrupted_streams=True, **options)
    with guard, guard.chat(LONG, stream=True, max_tokens=20) as stream:
        list(stream)
    assert stream.response.route == "backup"
    assert events[-1].route_errors == (("primary", "llmguard_sdk.errors.StreamInterruptedError"),)
    with guard:  # the local route's continuation stood in for the remote one: not cached
        assert guard.chat(LONG, max_tokens=20).route == "primary"


def test_a_continuation_gets_a_new_idempotency_key(
    fake: FakeProvider, fake2: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(fake, fake2, retry=RetryPolicy(), continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    with guard.chat(USER, stream=True) as stream:
        list(stream)
    first = fake.requests[-1].headers["idempotency-key"]
    second = fake2.requests[-1].headers["idempotency-key"]
    assert first != second


def test_a_retried_stream_opens_once(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(fake, retry=RetryPolicy(base=0.01))
    fake.script(Fault(cut_stream_after=0), Fault(cut_stream_after=0))
    with waits_off(), guard.chat(USER, stream=True) as stream:
        chunks: list[StreamChunk] = list(stream)
    empty = [c for c in chunks if not (c.text or c.finish_reason or c.usage or c.tool_calls)]
    assert len(empty) == 1  # one role-only opening, not one per attempt
    assert stream.response.attempts == 3


def test_a_dead_redis_is_skipped_after_its_first_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.2)
    budget = RedisRetryBudget(store, RetryBudgetPolicy())
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        for _ in range(10):
            budget.record_request("r")
            budget.try_spend("r")
    assert len([r for r in caplog.records if "Redis unavailable" in r.message]) == 1


def test_iterations_of_one_retrying_keep_their_own_clock() -> None:
    """One ``retry_context`` shared by calls (threads, tasks, a module-level object): a call
    that starts meanwhile does not give another call back the time it has spent."""
    shared = retry_context(
        on=ValueError,
        policy=RetryPolicy(attempts=5, base=0.5, cap=0.5, timeout=0.5, jitter="none"),
    )
    tries: list[int] = []

    def call() -> None:
        for attempt in shared:
            with attempt:
                tries.append(attempt.number)
                if attempt.number == 2:
                    time.sleep(0.6)  # this call's second attempt spends all of its time
                    for other in shared:  # another call through the same object, meanwhile
                        with other:
                            pass
                raise ValueError("down")

    with waits_off(), pytest.raises(ValueError, match="down"):  # (waits off: time spent counts)
        call()
    assert tries == [1, 2]  # no time left (the other call's clock did not give it back)


def test_an_object_with_an_async_call_is_retried_as_async() -> None:
    class Client:
        def __init__(self) -> None:
            self.calls = 0

        async def __call__(self) -> str:
            self.calls += 1
            if self.calls < 3:
                raise ProviderUnavailableError("down")
            return "ok"

    client = Client()
    wrapped = retry(client, attempts=3)
    with waits_off():
        assert anyio.run(wrapped) == "ok"
    assert client.calls == 3


def _one_retry_budget() -> MemoryRetryBudget:
    """A budget that holds one retry (and no share of traffic)."""
    return MemoryRetryBudget(RetryBudgetPolicy(ratio=0.0, min_per_second=1.0, window=1.0))


def test_a_retry_a_hook_stopped_goes_back_to_the_budget() -> None:
    """A hook that raised ended the loop after the budget gave its retry: that retry was
    never made but stayed spent (a Guard gives it back; the standalone loop did not)."""
    budget = _one_retry_budget()

    def broken_hook(details: RetryDetails) -> None:
        raise RuntimeError("telemetry down")

    @retry(attempts=2, budget=budget, hooks=[broken_hook], name="r")
    def down() -> None:
        raise ProviderUnavailableError("down")

    with waits_off(), pytest.raises(RuntimeError, match="telemetry"):
        down()
    assert budget.state("r").retries == pytest.approx(0.0)


def test_a_retry_whose_wait_was_cancelled_goes_back_to_the_budget() -> None:
    budget = _one_retry_budget()

    async def run() -> None:
        with anyio.move_on_after(0.2):  # the caller gives up during the backoff
            async for attempt in retry_context(
                attempts=2, budget=budget, name="r", on=lambda exc: 5.0
            ):
                with attempt:
                    raise ProviderUnavailableError("down")

    anyio.run(run)
    assert budget.state("r").retries == pytest.approx(0.0)


def _storm(budget: MemoryRetryBudget) -> int:
    """A loop that always fails; how many attempts it made."""
    attempts = 0

    def loop() -> None:
        nonlocal attempts
        for attempt in retry_context(attempts=5, budget=budget):
            with attempt:
                attempts += 1
                raise ProviderUnavailableError("down")

    with pytest.raises(ProviderUnavailableError):
        loop()
    return attempts


def _fails_once(budget: MemoryRetryBudget) -> str:
    calls = 0
    for attempt in retry_context(attempts=3, budget=budget):
        with attempt:
            calls += 1
            if calls == 1:
                raise ProviderUnavailableError("blip")
            return "ok"
    raise AssertionError


def test_unnamed_retry_contexts_in_different_places_keep_budgets_of_their_own() -> None:
    """Every retry_context without a name spent the budget's key "": one caller's retry
    storm left no retry to an unrelated one."""
    # two retries per key, and only those (no share of the requests, no decay to speak of)
    budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=0.0, min_per_second=2e-9, window=1e9))
    with waits_off():
        assert _storm(budget) == 3  # its two retries spent
        assert _fails_once(budget) == "ok"  # another place's retry: still allowed
        assert _storm(budget) == 1  # the same place again: the same key, nothing left


def test_retried_functions_of_one_name_in_two_modules_keep_budgets_of_their_own() -> None:
    """@retry keyed the budget by the qualified name alone: ``fetch`` of one module spent
    the retries of ``fetch`` in another."""
    budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=0.0, min_per_second=1e-9, window=1e9))
    calls: dict[str, int] = {}

    def decorated(module: str) -> Any:
        def fetch() -> str:
            calls[module] = calls.get(module, 0) + 1
            if calls[module] == 1:
                raise ProviderUnavailableError("blip")
            return module

        fetch.__module__ = module
        return retry(attempts=2, budget=budget)(fetch)

    with waits_off():
        assert decorated("app.billing")() == "app.billing"
        assert decorated("app.search")() == "app.search"  # its own retry, not billing's


def test_retried_partials_keep_budgets_of_their_own() -> None:
    """A callable without a qualified name (a functools.partial) was keyed by its type:
    every retried partial in a program shared one budget."""
    import functools

    budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=0.0, min_per_second=1e-9, window=1e9))
    calls: dict[str, int] = {}

    def fetch(what: str) -> str:
        calls[what] = calls.get(what, 0) + 1
        if calls[what] == 1:
            raise ProviderUnavailableError("blip")
        return what

    billing = retry(attempts=2, budget=budget)(functools.partial(fetch, "billing"))
    search = retry(attempts=2, budget=budget)(functools.partial(fetch, "search"))
    with waits_off():
        assert billing() == "billing"
        assert search() == "search"  # its own retry, not billing's
