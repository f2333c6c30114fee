"""Breakers inside the Guard: skipping open routes, probing, sharing, degraded answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    CallEvent,
    CircuitOpenError,
    ContextLengthExceededError,
    Guard,
    OpenAICompatibleProvider,
    ProviderError,
)
from llmguard_sdk.breaker import (
    BreakerPolicy,
    Breakers,
    BreakerTransition,
    MemoryBreakerBackend,
)
from llmguard_sdk.retry import RetryPolicy, waits_off
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

MakeGuard = Callable[..., Guard]
POLICY = BreakerPolicy(
    window=10, minimum_calls=4, failure_rate=0.5, open_seconds=10, probe_every=None
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def driven(clock: Clock, hooks: Any = ()) -> Breakers:
    return Breakers(MemoryBreakerBackend(POLICY, clock=clock), hooks)


def test_an_open_breaker_skips_the_route_without_calling_it(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()
    transitions: list[BreakerTransition] = []
    guard = make_guard(fake, fake2, retry=None, breaker=driven(clock, [transitions.append]))
    fake.always(Fault(status=503))
    for _ in range(4):
        assert guard.chat(USER).route == "backup"
    assert fake.stats.requests == 4
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == "open"
    for _ in range(5):
        response = guard.chat(USER)
        assert response.route == "backup"
        assert response.attempts == 1
    assert fake.stats.requests == 4  # no call reached the dead primary while open
    assert transitions == [BreakerTransition("primary", "closed", "open")]


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    until = time.monotonic() + seconds
    while not condition() and time.monotonic() < until:
        time.sleep(0.01)
    return condition()


def test_background_probes_bring_a_recovered_route_back_before_its_open_wait_ends(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()  # frozen: only a probe can end the 10 s open wait
    policy = BreakerPolicy(
        window=10, minimum_calls=4, failure_rate=0.5, open_seconds=10, probe_every=0.2
    )
    breakers = Breakers(MemoryBreakerBackend(policy, clock=clock))
    guard = make_guard(fake, fake2, retry=None, breaker=breakers)
    fake.always(Fault(status=503))
    for _ in range(4):
        assert guard.chat(USER).route == "backup"
    assert guard.chat(USER).route == "backup"  # refused by the open breaker: a probe starts
    assert _wait_for(lambda: fake.stats.requests == 5)  # the probe reached the dead route
    assert guard.chat(USER).route == "backup"  # it failed: still open, no second probe yet
    assert breakers.state("primary") == "open"
    fake.always(None)  # the route recovers
    time.sleep(0.25)  # probe_every has passed
    assert guard.chat(USER).route == "backup"  # the next refusal starts a probe; it succeeds
    assert _wait_for(lambda: fake.stats.requests == 6)
    assert _wait_for(lambda: guard.chat(USER).route == "primary")  # half-open, then closed
    assert fake.requests[4].body["max_tokens"] == 1  # probes are one-token requests


def test_a_slow_background_probe_does_not_end_the_open_wait_of_a_route_tripped_by_slowness(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """A probe's one-token request slower than ``slow_call_seconds`` ended the open wait:
    the route came back half-open only to trip on its slow calls again."""
    clock = Clock()  # frozen: only a probe can end the 10 s open wait
    policy = BreakerPolicy(
        window=10, minimum_calls=4, slow_call_seconds=0.05, open_seconds=10, probe_every=2.0
    )
    breakers = Breakers(MemoryBreakerBackend(policy, clock=clock))
    guard = make_guard(fake, fake2, retry=None, breaker=breakers)
    fake.always(Fault(latency=0.1))  # every answer of the primary is slow
    for _ in range(4):
        assert guard.chat(USER).route == "primary"
    assert breakers.state("primary") == "open"
    assert guard.chat(USER).route == "backup"  # refused by the open breaker: a probe starts
    prober = guard._stages.prober
    assert prober is not None
    assert _wait_for(lambda: fake.stats.requests == 5 and not prober._running)
    assert breakers.state("primary") == "open"
    assert guard.chat(USER).route == "backup"  # the slow probe did not end the open wait


def test_half_open_probes_then_recovery(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()
    guard = make_guard(fake, fake2, retry=None, breaker=driven(clock))
    fake.always(Fault(status=503))
    for _ in range(4):
        guard.chat(USER)
    fake.always(None)  # the primary comes back
    clock.now = 10.5  # the open duration has passed
    assert guard.chat(USER).route == "primary"  # first probe
    assert guard.chat(USER).route == "primary"  # second probe closes it
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == "closed"
    assert fake.stats.requests == 6


def test_a_429_opens_the_breaker_for_its_retry_after(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()
    guard = make_guard(fake, fake2, retry=None, breaker=driven(clock))
    fake.script(Fault(status=429, retry_after=5))
    assert guard.chat(USER).route == "backup"
    assert guard.chat(USER).route == "backup"
    assert fake.stats.requests == 1
    clock.now = 5.5
    assert guard.chat(USER).route == "primary"


def test_client_errors_do_not_count(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, retry=None, breaker=driven(Clock()))
    fake.always(Fault(status=400))
    for _ in range(8):
        with pytest.raises(ProviderError):
            guard.chat(USER)
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == "closed"


def test_a_single_open_route_raises_circuit_open_with_retry_after(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, retry=None, breaker=driven(Clock()))
    assert guard.breakers is not None
    guard.breakers.isolate("primary")
    with pytest.raises(CircuitOpenError) as info:
        guard.chat(USER)
    assert info.value.state == "isolated"
    assert fake.stats.requests == 0
    guard.breakers.reset("primary")
    assert guard.chat(USER).route == "primary"


def test_degraded_answer_when_every_route_is_down(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    degraded = "Answers are limited right now; please try again shortly."
    events: list[CallEvent] = []
    guard = make_guard(fake, fake2, retry=None, degraded=degraded, hooks=[events.append])
    fake.always(Fault(status=503))
    fake2.always(Fault(reset=True))
    answer = guard.chat(USER)
    assert answer.text == degraded
    assert answer.route == "degraded"
    # (each error named fully, as the call's event and its span's error.type name it)
    unavailable = "llmguard_sdk.errors.ProviderUnavailableError"
    assert answer.metadata["route_errors"] == {"primary": unavailable, "backup": unavailable}
    assert dict(events[-1].route_errors) == answer.metadata["route_errors"]
    with guard.chat(USER, stream=True) as stream:
        assert "".join(chunk.text for chunk in stream) == degraded
    assert stream.response.route == "degraded"

    async def run() -> str:
        result = await guard.achat(USER)
        await guard.aclose()
        return result.route

    assert anyio.run(run) == "degraded"


def test_without_a_degraded_text_every_failure_is_raised(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, retry=None)
    fake.always(Fault(status=503))
    fake2.always(Fault(status=503))
    with pytest.raises(AllRoutesFailedError):
        guard.chat(USER)


def test_two_processes_share_breakers_through_redis(
    fake: FakeProvider, fake2: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    def process() -> Guard:
        return Guard(
            [
                OpenAICompatibleProvider(fake.base_url, model="m", name="primary"),
                OpenAICompatibleProvider(fake2.base_url, model="m", name="backup"),
            ],
            store=redis_url,
            key_prefix=redis_prefix,
            retry=None,
            breaker=POLICY,
            environ={},
        )

    first, second = process(), process()
    fake.always(Fault(status=503))
    for _ in range(4):
        first.chat(USER)
    seen = fake.stats.requests
    assert second.chat(USER).route == "backup"
    assert fake.stats.requests == seen  # the other process skipped the primary at once
    first.close()
    second.close()


def test_routes_with_too_small_a_context_are_skipped(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    small = OpenAICompatibleProvider(fake.base_url, model="m", name="small", context_window=50)
    big = OpenAICompatibleProvider(fake2.base_url, model="m", name="big")
    guard = Guard([small, big], environ={})
    long_question = [{"role": "user", "content": "word " * 200}]
    assert guard.chat(long_question).route == "big"
    assert fake.stats.requests == 0
    assert guard.chat(USER).route == "small"
    guard.close()


def test_context_window_is_a_provider_option(fake: FakeProvider) -> None:
    provider = OpenAICompatibleProvider(fake.base_url, model="m", context_window=50)
    guard = Guard(provider, environ={})
    with pytest.raises(ContextLengthExceededError):
        guard.chat([{"role": "user", "content": "word " * 200}])
    assert fake.stats.requests == 0


def test_moves_on_is_configurable(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, retry=None, moves_on=lambda error: True)
    fake.script(Fault(status=400))
    assert guard.chat(USER).route == "backup"  # this application wants every error moved on


def test_streams_record_slow_first_tokens(fake: FakeProvider, make_guard: MakeGuard) -> None:
    policy = BreakerPolicy(window=4, minimum_calls=2, slow_call_rate=1.0, slow_call_seconds=0.1)
    guard = make_guard(fake, retry=None, breaker=policy)
    fake.always(Fault(first_token_delay=0.15))
    with waits_off():
        for _ in range(2):
            with guard.chat(USER, stream=True) as stream:
                list(stream)
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == "open"


def test_probes_that_end_without_an_outcome_give_their_permit_back(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()
    policy = BreakerPolicy(window=10, minimum_calls=4, open_seconds=10, half_open_permits=1)
    guard = make_guard(
        fake, retry=None, breaker=Breakers(MemoryBreakerBackend(policy, clock=clock))
    )
    fake.always(Fault(status=503))
    for _ in range(4):
        with pytest.raises(ProviderError):
            guard.chat(USER)
    fake.always(None)
    clock.now = 10.5
    fake.script(Fault(status=400))  # the probe's request is refused as wrong: no outcome
    with pytest.raises(ProviderError):
        guard.chat(USER)
    with guard.chat(USER, stream=True) as stream:  # the next probe is closed early
        next(stream)
    assert guard.chat(USER).route == "primary"  # a third probe still gets through, and closes
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == "closed"


def test_streams_cut_mid_answer_count_as_failures(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, retry=None, breaker=driven(Clock()))
    fake.always(Fault(cut_stream_after=1))
    for _ in range(4):
        with pytest.raises(ProviderError), guard.chat(USER, stream=True) as stream:
            list(stream)
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == "open"


def test_a_half_open_refusal_does_not_say_retry_at_once(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """Refused while the half-open breaker's probes are out, a call was told retry_after=0.0
    (retry at once, as the probes still run); when a probe ends is unknown: None."""
    clock = Clock()
    guard = make_guard(fake, retry=None, breaker=driven(clock))
    fake.always(Fault(status=503))
    for _ in range(4):
        with pytest.raises(ProviderError):
            guard.chat(USER)
    fake.always(Fault(latency=1.0))  # back, slowly: the probes are out a while
    clock.now = 10.5  # half open
    permits = POLICY.half_open_permits

    async def main() -> BaseException:
        async with anyio.create_task_group() as tasks:
            for _ in range(permits):
                tasks.start_soon(guard.achat, USER)  # the probes
            await anyio.sleep(0.3)
            with pytest.raises((CircuitOpenError, AllRoutesFailedError)) as refused:
                await guard.achat(USER)
        return refused.value

    error: Any = anyio.run(main)
    assert "half_open" in str(error)
    assert error.retry_after is None


def test_calls_an_open_breaker_refuses_are_no_requests_of_the_retry_budget(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """A call the breaker refused was counted as a request of the route's retry budget,
    whose retries grow with its requests: an open route earned retries it never used."""
    once = RetryPolicy(attempts=1)  # (retry=None turns the retry budget off too)
    guard = make_guard(fake, fake2, retry=once, breaker=driven(Clock()))
    fake.always(Fault(status=503))
    for _ in range(14):  # 4 reach the primary and open its breaker; 10 are refused
        assert guard.chat(USER).route == "backup"
    assert fake.stats.requests == 4
    retry_budget: Any = guard._stages.retry_budget
    assert retry_budget.state("primary").requests == pytest.approx(4, rel=0.05)  # (decaying)
    assert retry_budget.state("backup").requests == pytest.approx(14, rel=0.05)


def test_a_call_let_through_before_the_trip_gives_back_no_probe_permit(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    clock = Clock()
    breakers = driven(clock)
    guard = make_guard(fake, retry=None, breaker=breakers)
    fake.script(Fault(hang=True))

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(guard.achat, USER)  # permitted while the breaker is closed
            while fake.stats.requests < 1:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            for _ in range(4):  # other calls trip it meanwhile; it half-opens
                breakers.record("primary", ProviderError("down", status_code=503), seconds=0.1)
            clock.now = 11
            assert breakers.permit("primary").probe
            assert breakers.permit("primary").probe
            tasks.cancel_scope.cancel()  # the early call is cancelled

    anyio.run(main)
    assert not breakers.permit("primary").allowed  # still exactly two probes out
    breakers.record("primary", None, seconds=0.1, probe=True)
    assert breakers.state("primary") == "half_open"  # one probe's success is not two


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_out_of_time_before_its_request_fails_no_route(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    """A call whose deadline passed before any request went out (here: an input filter
    that took its whole timeout) says nothing about its routes: their breakers record no
    failure (both routes' breakers opened after two such calls, neither asked)."""

    def slow_filter(request: Any) -> None:
        time.sleep(0.15)

    breaker = BreakerPolicy(window=4, minimum_calls=2, open_seconds=10, probe_every=None)
    guard = make_guard(fake, fake2, input_filters=[slow_filter], timeout=0.1, breaker=breaker)

    def call() -> object:
        return guard.chat(USER) if mode == "sync" else anyio.run(lambda: guard.achat(USER))

    for _ in range(3):
        with pytest.raises(AllRoutesFailedError):
            call()
    assert fake.stats.requests == fake2.stats.requests == 0
    assert guard.breakers is not None
    assert guard.breakers.state("primary") == guard.breakers.state("backup") == "closed"
