"""The Guard's retry stage against FakeProvider, sync and async."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import openai
import pytest
import redis

from llmguard_sdk import (
    AuthenticationError,
    BadRequestError,
    CallEvent,
    ChatRequest,
    ChatResponse,
    ContextLengthExceededError,
    Guard,
    OpenAICompatibleProvider,
    ProviderError,
    ProviderUnavailableError,
    RateLimitedError,
    RetryMultiplicationWarning,
    StreamInterruptedError,
)
from llmguard_sdk._core.routes import CONTINUE_PROMPT
from llmguard_sdk.retry import RetryBudgetPolicy, RetryPolicy, set_testing
from llmguard_sdk.store import hash_id
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, USER, chat_in_mode
from .slowanswer import SlowAnswers

MakeGuard = Callable[..., Guard]
FAST = RetryPolicy(attempts=3, base=0.01, cap=8.0)


@pytest.fixture
def no_waits() -> Iterator[None]:
    set_testing(True)
    yield
    set_testing(False)


def read_stream(guard: Guard, mode: str, seen: list[str]) -> ChatResponse:
    """Read a whole guarded stream (sync or async) into ``seen``; return its response."""
    if mode == "sync":
        with guard.chat(USER, stream=True) as stream:
            seen.extend(c.text for c in stream)
        return stream.response

    async def run() -> ChatResponse:
        stream = await guard.achat(USER, stream=True)
        try:
            async with stream:
                async for chunk in stream:
                    seen.append(chunk.text)
        finally:
            await guard.aclose()
        return stream.response

    return anyio.run(run)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "fault",
    [
        Fault(status=408),
        Fault(status=409),  # a lock timeout: openai-python and anthropic retry it too
        Fault(status=429),
        Fault(status=500),
        Fault(status=502),
        Fault(status=503),
        Fault(status=504),
        Fault(status=529),
        Fault(reset=True),
        Fault(hang=True),
        Fault(malformed_json=True),
    ],
)
def test_transient_failures_are_retried(
    fake: FakeProvider, make_guard: MakeGuard, mode: str, fault: Fault, no_waits: None
) -> None:
    events: list[CallEvent] = []
    silent = 1.0 if fault.hang else 30.0  # only a hang needs the attempt cut short
    guard = make_guard(fake, retry=FAST, attempt_timeout=silent, hooks=[events.append])
    fake.script(fault)
    response = chat_in_mode(guard, mode)
    assert response.route == "primary"
    assert response.attempts == 2
    assert fake.stats.requests == 2
    assert len(events[-1].retries) == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault(status=400), BadRequestError),
        (Fault(status=401), AuthenticationError),
        (Fault(status=403), AuthenticationError),
        (Fault(status=404), BadRequestError),
        (Fault(status=422), BadRequestError),
        (Fault(status=400, error_code="context_length_exceeded"), ContextLengthExceededError),
    ],
)
def test_client_errors_are_never_retried(
    fake: FakeProvider,
    make_guard: MakeGuard,
    mode: str,
    fault: Fault,
    error: type[ProviderError],
    no_waits: None,
) -> None:
    fake.script(fault)
    with pytest.raises(error):
        chat_in_mode(make_guard(fake, retry=FAST), mode)
    assert fake.stats.requests == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("fault", "wait"),
    [(Fault(status=429, retry_after=0.3), 0.3), (Fault(status=503, retry_after_ms=150), 0.15)],
)
def test_server_hints_are_honoured(
    fake: FakeProvider, make_guard: MakeGuard, mode: str, fault: Fault, wait: float
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, retry=FAST, hooks=[events.append])
    fake.script(fault)
    started = time.monotonic()
    assert chat_in_mode(guard, mode).attempts == 2
    assert time.monotonic() - started >= wait
    (retry,) = events[-1].retries
    assert retry.wait == wait
    assert retry.hinted


@pytest.mark.parametrize("mode", MODES)
def test_a_hint_beyond_the_cap_goes_to_the_next_route_without_sleeping(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, fake2, retry=FAST, hooks=[events.append])
    fake.script(Fault(status=429, retry_after=30))
    response = chat_in_mode(guard, mode)
    assert response.route == "backup"
    assert events[-1].retries == ()
    # From the primary's 429 to the backup's request: no 30 s (nor 8 s cap) sleep between.
    handover = fake2.requests[-1].time - fake.requests[-1].time
    assert 0 < handover < 4


@pytest.mark.parametrize("mode", MODES)
def test_a_hint_beyond_the_deadline_is_not_waited_for(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    fake.script(Fault(status=429, retry_after=30))
    guard = make_guard(fake, retry=FAST)
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as info:
        chat_in_mode(guard, mode, timeout=10.0)
    assert info.value.retry_after == 30.0  # the caller learns when to come back
    assert fake.stats.requests == 1  # not tried again
    assert time.monotonic() - started < 5  # nor waited for the 10 s deadline


@pytest.mark.parametrize("mode", MODES)
def test_the_deadline_is_never_exceeded(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    events: list[CallEvent] = []
    fake.always(Fault(status=503))
    policy = RetryPolicy(attempts=50, base=0.1, cap=0.4)
    guard = make_guard(fake, retry=policy, retry_budget=None, breaker=None, hooks=[events.append])
    with pytest.raises(ProviderUnavailableError):
        chat_in_mode(guard, mode, timeout=1.0)
    event = events[-1]
    assert len(event.retries) >= 2
    assert all(r.elapsed + r.wait < 1.0 for r in event.retries)
    assert event.latency_s < 1.5


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("jitter", ["none", "full"])
def test_with_waits_off_a_short_timeout_spends_every_attempt(
    fake: FakeProvider, make_guard: MakeGuard, mode: str, jitter: Any, no_waits: None
) -> None:
    """A wait not taken cannot overrun the call's timeout: with a 1 s timeout, retries whose
    backoff (0.5, 1, 2, 4 s without jitter) did not fit the time left were refused, so the
    call gave up after 3 attempts (with full jitter: by the draw), as ``@retry`` did."""
    events: list[CallEvent] = []
    policy = RetryPolicy(attempts=5, jitter=jitter)
    guard = make_guard(fake, retry=policy, timeout=1, breaker=None, hooks=[events.append])
    fake.script(*[Fault(status=503)] * 4)
    response = chat_in_mode(guard, mode)
    assert response.attempts == 5
    assert fake.stats.requests == 5
    assert len(events[-1].retries) == 4


STORM_BUDGET = RetryBudgetPolicy(ratio=0.1, min_per_second=0.0, window=1e9)


def test_a_retry_storm_stays_within_the_budget(
    fake: FakeProvider, make_guard: MakeGuard, no_waits: None
) -> None:
    fake.always(Fault(status=503))
    # Breakers off: this is about the retry budget alone (a breaker would stop the storm too).
    guard = make_guard(fake, retry=RetryPolicy(attempts=5), retry_budget=STORM_BUDGET, breaker=None)
    for _ in range(100):
        with pytest.raises(ProviderUnavailableError):
            guard.chat(USER)
    assert fake.stats.requests <= 100 + 10 + 1  # without a budget: 500


def test_a_storm_from_two_processes_shares_one_redis_budget(
    fake: FakeProvider, redis_url: str, redis_prefix: str, no_waits: None
) -> None:
    fake.always(Fault(status=503))

    def process() -> Guard:
        provider = OpenAICompatibleProvider(fake.base_url, model="m", name="primary")
        return Guard(
            provider,
            store=redis_url,
            key_prefix=redis_prefix,
            retry=RetryPolicy(attempts=5),
            retry_budget=STORM_BUDGET,
            breaker=None,
            environ={},
        )

    guards = [process(), process()]

    async def storm(guard: Guard) -> None:
        for _ in range(50):
            with pytest.raises(ProviderUnavailableError):
                await guard.achat(USER)
        await guard.aclose()

    async def both() -> None:
        async with anyio.create_task_group() as tasks:
            for guard in guards:
                tasks.start_soon(storm, guard)

    anyio.run(both)
    assert fake.stats.requests <= 100 + 10 + 1


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_the_deadline_no_longer_allows_spends_no_retry_budget(
    fake: FakeProvider, redis_url: str, redis_prefix: str, mode: str
) -> None:
    # Redis answers the budget's spend 1 s late: afterwards the retry's 1.2 s wait no
    # longer fits the 2 s deadline, so the retry is not made; the retry it took goes back
    # (it was kept: retries that never happened shrank every route's budget)
    fake.script(Fault(status=429, retry_after=1.2))
    with SlowAnswers(redis_url, b"spend", delay=1.0) as slow:
        provider = OpenAICompatibleProvider(fake.base_url, model="m", name="primary")
        store = f"{slow.url}?socket_timeout=3"
        guard = Guard(provider, store=store, key_prefix=redis_prefix, breaker=None, environ={})
        with pytest.raises(RateLimitedError):
            chat_in_mode(guard, mode, timeout=2.0)
        guard.close()
    assert fake.stats.requests == 1
    client = redis.Redis.from_url(redis_url)
    try:
        key = f"{redis_prefix}:rb:{{{hash_id('primary')}}}"
        retries = float(client.hget(key, "r") or 0)  # type: ignore[arg-type]
    finally:
        client.close()
    assert retries < 0.01


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_is_retried_before_its_first_token(
    fake: FakeProvider, make_guard: MakeGuard, mode: str, no_waits: None
) -> None:
    guard = make_guard(fake, retry=FAST)
    fake.script(Fault(status=503), Fault(cut_stream_after=0))
    seen: list[str] = []
    response = read_stream(guard, mode, seen)
    text = "".join(seen)
    assert text == "Echo: hello there"
    assert response.attempts == 3
    assert fake.stats.requests == 3


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_cut_after_its_first_token_is_never_replayed(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, no_waits: None
) -> None:
    guard = make_guard(fake, fake2, retry=FAST)
    fake.script(Fault(cut_stream_after=2))
    seen: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        read_stream(guard, mode, seen)
    assert "".join(seen) == info.value.partial_text == "Echo: hello"
    assert fake.stats.requests == 1
    assert fake2.stats.requests == 0


@pytest.mark.parametrize("mode", MODES)
def test_opt_in_continuation_asks_the_next_route_to_go_on(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, no_waits: None
) -> None:
    guard = make_guard(fake, fake2, retry=FAST, continue_interrupted_streams=True)
    fake.script(Fault(cut_stream_after=2))
    seen: list[str] = []
    response = read_stream(guard, mode, seen)
    text = "".join(seen)
    assert text.startswith("Echo: hello")
    assert text == response.text
    assert response.route == "backup"
    assert response.metadata["continued_after"] == ["primary"]
    sent = fake2.requests[-1].body
    assert sent is not None
    assert sent["messages"][-2] == {"role": "assistant", "content": "Echo: hello"}
    assert sent["messages"][-1]["content"] == CONTINUE_PROMPT
    assert fake.stats.requests == 1


def test_one_idempotency_key_per_call_sent_on_every_attempt(
    fake: FakeProvider, make_guard: MakeGuard, no_waits: None
) -> None:
    guard = make_guard(fake, retry=FAST)
    fake.script(Fault(status=503), Fault(status=503))
    guard.chat(USER)
    guard.chat(USER)
    keys = [r.headers["idempotency-key"] for r in fake.requests]
    assert keys[0] == keys[1] == keys[2] != keys[3]
    assert keys[0].startswith("llmguard-")


@pytest.mark.parametrize("through", ["chat", "client"])
def test_a_callers_own_idempotency_key_is_sent_on_every_attempt(
    fake: FakeProvider, make_guard: MakeGuard, no_waits: None, through: str
) -> None:
    """The caller's key, in its ``extra_headers`` (through ``guard.chat`` or the drop-in
    client's), in place of one of the Guard's: the client's was dropped as an SDK's own."""
    guard = make_guard(fake, retry=FAST)
    fake.script(Fault(status=503))
    mine = {"Idempotency-Key": "order-42"}
    if through == "chat":
        guard.chat(USER, extra_headers=mine)
    else:
        guard.client().chat.completions.create(model="m", messages=USER, extra_headers=mine)
    assert [r.headers["idempotency-key"] for r in fake.requests] == ["order-42", "order-42"]


def test_an_input_filter_that_replaces_the_request_keeps_the_idempotency_key(
    fake: FakeProvider, make_guard: MakeGuard, no_waits: None
) -> None:
    def replace(request: ChatRequest) -> ChatRequest:  # a new request, headers of its own
        return request.model_copy(update={"extra_headers": {"x-team": "search"}})

    guard = make_guard(fake, retry=FAST, input_filters=[replace])
    fake.script(Fault(status=503))
    guard.chat(USER)
    first, second = fake.requests[-2].headers, fake.requests[-1].headers
    assert first["x-team"] == "search"
    assert first["idempotency-key"] == second["idempotency-key"]
    assert first["idempotency-key"].startswith("llmguard-")


def test_without_idempotency_keys_only_unsent_requests_are_retried(
    fake: FakeProvider, make_guard: MakeGuard, no_waits: None
) -> None:
    policy = RetryPolicy(attempts=3, base=0.01, idempotency_header=None)
    guard = make_guard(fake, retry=policy)
    fake.script(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        guard.chat(USER)
    assert fake.stats.requests == 1
    assert "idempotency-key" not in fake.requests[-1].headers

    dead = FakeProvider()
    dead.start()
    dead.stop()
    events: list[CallEvent] = []
    refused = Guard(
        OpenAICompatibleProvider(dead.base_url, model="m"),
        retry=policy,
        hooks=[events.append],
        environ={},
    )
    with pytest.raises(ProviderUnavailableError):
        refused.chat(USER)
    assert len(events[-1].retries) == 2  # connection refused: nothing was sent, safe to resend


def test_retry_attempts_from_the_environment(fake: FakeProvider, no_waits: None) -> None:
    environ = {
        "LLMGUARD_BASE_URL": fake.base_url,
        "LLMGUARD_MODEL": "m",
        "LLMGUARD_RETRY_ATTEMPTS": "1",
    }
    fake.script(Fault(status=503))
    with Guard(environ=environ) as guard, pytest.raises(ProviderUnavailableError):
        guard.chat(USER)
    assert fake.stats.requests == 1


def test_protect_warns_when_the_openai_client_retries_too(fake: FakeProvider) -> None:
    guard = Guard(environ={})
    retrying_client = openai.OpenAI(base_url=fake.base_url, api_key="x")  # max_retries=2
    quiet_client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    with pytest.warns(RetryMultiplicationWarning, match="max_retries=2"):

        @guard.protect
        def ask() -> Any:
            return retrying_client.chat.completions.create(model="m", messages=USER)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RetryMultiplicationWarning)

        @guard.protect
        def ask_quietly() -> Any:
            return quiet_client.chat.completions.create(model="m", messages=USER)

    assert ask_quietly().choices[0].message.content == "Echo: hello there"
    retrying_client.close()
    quiet_client.close()
