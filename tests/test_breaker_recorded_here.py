"""A Guard records an attempt on in-process breakers and retry budgets at once, with no steps
(``Breakers.recorded_here``): the same states, transitions and give-backs as ``record``;
a Redis backend is left to its steps."""

from __future__ import annotations

from typing import Any

from llmguard_sdk.breaker import (
    BreakerPolicy,
    Breakers,
    BreakerTransition,
    MemoryBreakerBackend,
    RedisBreakerBackend,
)
from llmguard_sdk.errors import (
    BadRequestError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault
from tests.conftest import USER, redis_store

POLICY = BreakerPolicy(window=10, minimum_calls=4, failure_rate=0.5, half_open_permits=1)
ERRORS: list[BaseException | None] = [
    None,
    ProviderUnavailableError("down"),
    BadRequestError("ignored", status_code=400),  # its permit given back, nothing counted
    ProviderUnavailableError("down"),
    ValueError("a bug of the caller's"),  # the same
    ProviderUnavailableError("down"),
    ProviderUnavailableError("down"),  # 3 of 4 failed: open
]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breakers(clock: _Clock, seen: list[BreakerTransition]) -> Breakers:
    return Breakers(MemoryBreakerBackend(POLICY, clock=clock), hooks=[seen.append])


def test_recorded_here_is_record_on_a_memory_backend() -> None:
    here_clock, steps_clock = _Clock(), _Clock()
    here_seen: list[BreakerTransition] = []
    steps_seen: list[BreakerTransition] = []
    here, by_steps = _breakers(here_clock, here_seen), _breakers(steps_clock, steps_seen)
    for error in ERRORS:
        for clock, breakers in ((here_clock, here), (steps_clock, by_steps)):
            clock.now += 1
            breakers.permit("r")
        assert here.recorded_here("r", error, seconds=0.1, probe=None) is True
        by_steps.record("r", error, seconds=0.1)
        assert here.backend.state("r") == by_steps.backend.state("r")
        assert here.backend._states == by_steps.backend._states  # type: ignore[attr-defined]
    assert here.last_seen("r") == "open"
    assert here_seen == steps_seen == [BreakerTransition("r", "closed", "open")]
    # a 429 pauses the route for its Retry-After; a probe's success closes it
    here_clock.now += 1000
    assert here.permit("r").probe
    assert here.recorded_here("r", None, seconds=0.1, probe=True)
    assert here.last_seen("r") == "closed"
    assert here.recorded_here(
        "r", RateLimitedError("slow down", retry_after=5), seconds=0.1, probe=False
    )
    assert here.last_seen("r") == "open"


def test_recorded_here_leaves_a_redis_backend_to_its_steps(redis_url: str) -> None:
    store = redis_store(redis_url, "llmguard-test-recorded-here")
    try:
        breakers = Breakers(RedisBreakerBackend(store, POLICY))
        assert not breakers.recorded_here("r", ProviderUnavailableError("x"), seconds=1, probe=None)
        assert breakers.last_seen("r") == "closed"
    finally:
        store.close()


def test_a_guards_in_process_breaker_and_retry_budget_count_its_attempts(
    make_guard: Any,
) -> None:
    """Through a Guard (state in memory): the failing route's breaker opens after its
    failures, and its retry budget counted each call."""
    with FakeProvider(name="primary") as primary, FakeProvider(name="backup") as backup:
        guard = make_guard(
            primary,
            backup,
            breaker=BreakerPolicy(window=4, minimum_calls=2, failure_rate=0.5),
            retry=RetryPolicy(attempts=1),
        )
        primary.script(*[Fault(status=500)] * 2)
        for _ in range(2):
            assert guard.chat(USER).route == "backup"
        breakers, budget = guard._stages.breakers, guard._stages.retry_budget
        assert breakers is not None
        assert budget is not None
        # opened (a background probe of the route may have passed since: not closed)
        assert breakers.backend.state("primary") != "closed"
        assert budget.state("primary").requests > 1.5  # (decayed since: a bit under 2)
