"""Hedged calls: when the first route is slow, the second starts too and the first answer wins."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BadRequestError,
    ChatResponse,
    Guard,
    OpenAICompatibleProvider,
    ProviderUnavailableError,
    RequestValidationError,
)
from llmguard_sdk.breaker import BreakerPolicy, Breakers, MemoryBreakerBackend
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, USER, answering_route, chat_in_mode
from .rawserver import RawServer, sse_head

MakeGuard = Callable[..., Guard]


@pytest.mark.parametrize("mode", MODES)
def test_a_slow_first_route_is_overtaken_by_the_hedge(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, hedge_after=0.05, timeout=10)
    fake.script(Fault(latency=2.0))  # slow, but it would answer: only a hedge beats it
    response = chat_in_mode(guard, mode)
    assert response.route == "backup"
    assert response.attempts == 2
    assert fake2.stats.requests == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_fast_first_route_needs_no_hedge(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, hedge_after=1.0)
    response = chat_in_mode(guard, mode)
    assert response.route == "primary"
    assert response.attempts == 1
    assert fake2.stats.requests == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_first_route_failing_early_starts_the_second_at_once(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, hedge_after=5.0, timeout=10)
    fake.script(Fault(status=503))
    response = chat_in_mode(guard, mode)
    assert response.route == "backup"  # without waiting the 5 s hedge delay
    assert fake.stats.requests == 1  # a hedged pair is not retried


@pytest.mark.parametrize("mode", MODES)
def test_when_both_hedged_routes_fail_the_chain_goes_on(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    with FakeProvider(name="third") as third:
        guard = make_guard(fake, fake2, third, hedge_after=0.05, timeout=10)
        fake.script(Fault(status=503))
        fake2.script(Fault(status=502))
        response = chat_in_mode(guard, mode)
        assert response.route == "third"
        assert third.stats.requests == 1
    guard = make_guard(fake, fake2, hedge_after=0.05, timeout=10, retry=None)
    fake.script(Fault(status=503))
    fake2.script(Fault(status=503))
    with pytest.raises(AllRoutesFailedError) as info:
        chat_in_mode(guard, mode)
    assert set(info.value.errors) == {"primary", "backup"}


def test_hedging_per_call_and_its_validation(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2)
    fake.script(Fault(latency=2.0))
    assert guard.chat(USER, hedge_after=0.05, timeout=10).route == "backup"
    with pytest.raises(RequestValidationError, match="hedge_after"):
        guard.chat(USER, hedge_after=-1)


def test_a_single_route_is_not_hedged(fake: FakeProvider) -> None:
    guard = Guard(OpenAICompatibleProvider(fake.base_url, model="m"), hedge_after=0.01, environ={})
    assert guard.chat(USER).text == "Echo: hello there"
    guard.close()


def read(guard: Guard, mode: str, **kwargs: Any) -> tuple[str, ChatResponse]:
    """Read a whole hedged stream (sync or async)."""
    if mode == "sync":
        with guard.chat(USER, stream=True, **kwargs) as stream:
            text = "".join(chunk.text for chunk in stream)
        return text, stream.response

    async def run() -> tuple[str, ChatResponse]:
        stream = await guard.achat(USER, stream=True, **kwargs)
        async with stream:
            text = "".join([chunk.text async for chunk in stream])
        await guard.aclose()
        return text, stream.response

    return anyio.run(run)


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_slow_to_its_first_token_is_overtaken(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, hedge_after=0.05, timeout=10)
    fake.script(Fault(first_token_delay=2.0))
    text, response = read(guard, mode)
    assert text == "Echo: hello there"
    assert response.route == "backup"
    assert response.attempts == 2
    assert response.usage is not None
    assert response.usage.output_tokens == 3


@pytest.mark.parametrize("mode", MODES)
def test_a_fast_stream_is_not_hedged(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, hedge_after=1.0)
    text, response = read(guard, mode)
    assert (text, response.route, response.attempts) == ("Echo: hello there", "primary", 1)
    assert fake2.stats.requests == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_failing_before_its_first_token_hands_over_at_once(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    with FakeProvider(name="third") as third:
        guard = make_guard(fake, fake2, third, hedge_after=5.0, timeout=10)
        fake.script(Fault(status=503))
        text, response = read(guard, mode)
        assert response.route == "backup"
        fake.script(Fault(status=503))
        fake2.script(Fault(status=502))
        text, response = read(guard, mode)
        assert text == "Echo: hello there"
        assert response.route == "third"


def _refusal_event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
    return b"data: " + json.dumps({**body, "choices": [choice]}).encode() + b"\n\n"


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_is_an_answer_in_a_hedge_race(
    fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    # a refusal's first piece (OpenAI's delta.refusal) goes to the caller and makes a stream
    # delivered, but the race did not count it as content: it waited for the slower backup
    first = _refusal_event({"role": "assistant", "refusal": "I cannot"})
    rest = _refusal_event({"refusal": " help."}, "stop") + b"data: [DONE]\n\n"
    with RawServer(sse_head() + first, (rest,), gap=3.0) as raw:
        refusing = OpenAICompatibleProvider(raw.base_url, model="m", name="refusing")
        backup = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name="backup")
        fake2.script(Fault(latency=1.0))
        guard = Guard([refusing, backup], hedge_after=0.05, timeout=10, environ={})
        try:
            text, response = read(guard, mode)
        finally:
            guard.close()
    assert (text, response.route) == ("", "refusing")
    assert response.metadata["refusal"] == "I cannot help."


def test_a_request_error_is_not_hedged(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, hedge_after=5.0, timeout=10)
    for attempt in (lambda: guard.chat(USER), lambda: read(guard, "sync")):
        fake.script(Fault(status=400))
        with pytest.raises(BadRequestError):
            attempt()
    assert fake2.stats.requests == 0  # a wrong request would fail everywhere


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("streaming", [False, True])
def test_both_hedged_routes_hanging_end_by_the_deadline_with_typed_errors(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, streaming: bool
) -> None:
    guard = make_guard(fake, fake2, hedge_after=0.05, retry=None)
    fake.always(Fault(hang=True))
    fake2.always(Fault(hang=True))
    send = read if streaming else chat_in_mode
    with pytest.raises(AllRoutesFailedError) as info:
        send(guard, mode, timeout=0.5)
    assert set(info.value.errors) == {"primary", "backup"}
    assert fake.stats.requests == 1  # not tried again after the deadline
    assert fake2.stats.requests == 1


@pytest.mark.parametrize("streaming", [False, True])
def test_an_open_first_route_moves_the_race_to_the_next_pair(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, streaming: bool
) -> None:
    with FakeProvider(name="third") as third:
        guard = make_guard(fake, fake2, third, hedge_after=0.05, timeout=10)
        assert guard.breakers is not None
        guard.breakers.isolate("primary")
        fake2.always(Fault(latency=2.0, first_token_delay=2.0))
        route = read(guard, "sync")[1].route if streaming else guard.chat(USER).route
        assert route == "third"
        assert fake.stats.requests == 0


def test_cancelling_an_async_hedged_stream_gives_the_permits_back(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = [0.0]
    policy = BreakerPolicy(window=10, minimum_calls=2, open_seconds=10, half_open_permits=1)
    breakers = Breakers(MemoryBreakerBackend(policy, clock=lambda: clock[0]))
    guard = make_guard(fake, fake2, hedge_after=0.05, timeout=10, retry=None, breaker=breakers)
    for route in ("primary", "backup"):
        breakers.record(route, ProviderUnavailableError("down"), seconds=0)
        breakers.record(route, ProviderUnavailableError("down"), seconds=0)
    clock[0] = 10.5  # both may send one probe now
    fake.always(Fault(first_token_delay=2.0))
    fake2.always(Fault(first_token_delay=2.0))

    async def run() -> None:
        async def read() -> None:
            stream = await guard.achat(USER, stream=True)
            async with stream:
                async for _chunk in stream:
                    pass

        async def cancel_once_both_probes_are_in(scope: anyio.CancelScope) -> None:
            # The servers count requests in their own threads and signal nothing: poll them.
            with anyio.fail_after(30):  # both servers hold their first token for 2 s
                while fake.stats.requests < 1 or fake2.stats.requests < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancel_once_both_probes_are_in, tasks.cancel_scope)
            await read()
        await guard.aclose()

    anyio.run(run)
    # Both probes were sent (each took its route's only half-open permit) before the cancel.
    assert (fake.stats.requests, fake2.stats.requests) == (1, 1)
    assert breakers.permit("primary").allowed  # the cancelled probes gave their permits back
    assert breakers.permit("backup").allowed


class Broken(OpenAICompatibleProvider):
    """A provider with a bug: not a provider failure, so it must reach the caller as it is."""

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("bug in a custom provider")

    async def acomplete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("bug in a custom provider")


@pytest.mark.parametrize("mode", MODES)
def test_a_bug_in_a_hedged_provider_is_raised_as_it_is(fake: FakeProvider, mode: str) -> None:
    broken = Broken(fake.base_url, model="m", name="broken")
    backup = OpenAICompatibleProvider(fake.base_url, model="m", name="backup")
    guard = Guard([broken, backup], hedge_after=1.0, environ={})
    with pytest.raises(ValueError, match="bug"):
        chat_in_mode(guard, mode)


@pytest.mark.parametrize("stream", [False, True])
def test_a_sync_hedge_loser_is_stopped_at_once_and_gives_its_slot_back(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    # the first request hangs for 30 s (a whole answer, or a stream's first token); the
    # primary admits one call at a time, and the next call may wait 5 s for that slot
    fake.script(Fault(latency=30) if not stream else Fault(first_token_delay=30))
    guard = make_guard(
        fake,
        fake2,
        hedge_after=0.05,
        timeout=60,
        rate_limits={"primary": RateLimit(concurrency=1, max_wait=5)},
        breaker=None,
    )

    def call() -> str:
        return answering_route(guard, stream)

    assert call() == "backup"  # the hedge won
    # the loser's socket was shut down: it ended and gave its slot back (abandoned to its
    # 60 s deadline, it held the slot past the next call's 5 s wait: the backup answered)
    assert call() == "primary"
