"""Releases: a canary call whose candidate routes all failed falls back to the current
release's routes (each route tried once), and the canary still counts the candidate's
failure; ``ReleasePlan(fallback_to_current=False)`` keeps the canary's errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.errors import AllRoutesFailedError, ConfigurationError, ProviderError
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan
from llmguard_sdk.releases.policy import in_canary
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.testing import FakeProvider, Fault

from .routekinds import route_to
from .test_telemetry import Exported, call_span, exporting

USER = [{"role": "user", "content": "hello"}]
PRICES = PriceTable.default_table().with_prices(
    {f"fake-{v}-2025-01-01": Price(input=1.0, output=1.0) for v in ("a", "b", "c")}
)
otel = pytest.fixture(exporting, name="otel")
INSIDE = next(f"u{i}" for i in range(100) if in_canary(f"bot:u{i}", 0.5))
OUTSIDE = next(f"u{i}" for i in range(100) if not in_canary(f"bot:u{i}", 0.5))


@pytest.fixture
def fakes() -> Iterator[tuple[FakeProvider, FakeProvider, FakeProvider]]:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b, FakeProvider(name="c") as c:
        yield a, b, c


def route(fake: FakeProvider) -> OpenAICompatibleProvider:
    """``fake`` as a route asking for a model :data:`PRICES` prices."""
    return route_to(fake, model=f"fake-{fake.name}-2025-01-01")


def _guard(
    current: Release,
    candidate: Release,
    telemetry: Telemetry | bool = False,
    guard_args: Mapping[str, Any] | None = None,
    **plan: Any,
) -> Guard:
    """A Guard serving ``current`` with a canary of ``candidate`` at 50 %, started
    (``guard_args``: more of the Guard's arguments, or others than its ``prices``, ``retry``
    and ``breaker`` here; ``plan``: the ReleasePlan's)."""
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    releases = ReleasePlan(current, candidate=candidate, canary=policy, **plan)
    options: dict[str, Any] = {"prices": PRICES, "retry": None, "breaker": None}
    options.update(guard_args or {})
    guard = Guard(release=releases, environ={}, telemetry=telemetry, **options)
    assert guard.releases is not None
    guard.releases.start_now()
    return guard


def _candidate_figures(guard: Guard) -> tuple[int, float]:
    assert guard.releases is not None
    guard.releases.flush()
    figures = guard.releases.status()["candidate"]
    return figures["calls"], figures["error_rate"]


@pytest.mark.parametrize("how", ["plain", "stream", "async"])
def test_a_canary_call_falls_back_to_the_current_release(fakes: Any, how: str) -> None:
    """The candidate's routes failing left the canary's users with their errors until the
    canary rolled back: the current release, healthy, was never tried for them."""
    import anyio

    a, b, _ = fakes
    b.always(Fault(status=500))
    current = Release(
        "bot", "v1", route(a), system_prompt="v1 prompt", parameters={"temperature": 0.1}
    )
    candidate = Release(
        "bot", "v2", route(b), system_prompt="v2 prompt", parameters={"temperature": 0.9}
    )

    async def ask(guard: Guard) -> str | None:
        return (await guard.achat(USER, user=INSIDE)).route

    served: str | None
    with _guard(current, candidate) as guard:
        if how == "stream":
            chunks = list(guard.chat(USER, user=INSIDE, stream=True))
            served = next(c.route for c in chunks if c.route)
        elif how == "async":
            served = anyio.run(ask, guard)
        else:
            served = guard.chat(USER, user=INSIDE).route
        figures = _candidate_figures(guard)
    assert served == "a"
    assert (len(b.requests), len(a.requests)) == (1, 1)
    # the current release is sent what it would send (it was sent the candidate's prompt
    # and parameters); the candidate had its own
    assert [r.body["messages"][0]["content"] for r in (b.requests[0], a.requests[0])] == [
        "v2 prompt",
        "v1 prompt",
    ]
    assert [r.body["temperature"] for r in (b.requests[0], a.requests[0])] == [0.9, 0.1]
    assert [r.body["messages"][1]["content"] for r in a.requests] == ["hello"]
    assert figures == (1, 1.0)  # the candidate's failure, counted on its arm


def test_the_fallback_sends_a_new_idempotency_key_with_its_new_body(fakes: Any) -> None:
    """The current release's request is another body: it went out under the key the
    candidate's request was sent with (a provider that keeps keys may answer the old one)."""
    a, b, _ = fakes
    b.always(Fault(status=500))
    current = Release("bot", "v1", route(a), system_prompt="v1 prompt")
    candidate = Release("bot", "v2", route(b), system_prompt="v2 prompt")
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    retry = RetryPolicy(attempts=1)
    with Guard(release=plan, environ={}, prices=PRICES, retry=retry, telemetry=False) as guard:
        assert guard.releases is not None
        guard.releases.start_now()
        assert guard.chat(USER, user=INSIDE).route == "a"
    keys = [r.headers.get("idempotency-key") for r in (b.requests[0], a.requests[0])]
    assert all(keys), keys
    assert keys[0] != keys[1]


def test_the_fallback_keeps_the_output_limit_a_budget_gave_the_call(fakes: Any) -> None:
    """A budgeted call without ``max_tokens`` is given one (its hold is sized by it): the
    current release's request, which sets none, is sent under it too, not unbounded; its
    own parameters are its own (``temperature``)."""
    from llmguard_sdk import Budget
    from llmguard_sdk.budget import Budgets

    a, b, _ = fakes
    b.always(Fault(status=500))
    current = Release("bot", "v1", route(a), parameters={"temperature": 0.1})
    candidate = Release("bot", "v2", route(b), parameters={"temperature": 0.9})
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    budgets = Budgets([Budget(limit_usd=100.0)], prices=PRICES, default_output_tokens=77)
    with Guard(
        release=plan, environ={}, budgets=budgets, retry=None, breaker=None, telemetry=False
    ) as guard:
        assert guard.releases is not None
        guard.releases.start_now()
        assert guard.chat(USER, user=INSIDE).route == "a"
    sent = [(r.body.get("max_tokens"), r.body["temperature"]) for r in (*b.requests, *a.requests)]
    assert sent == [(77, 0.9), (77, 0.1)]


def test_the_fallback_is_recorded_as_the_current_releases_answer(
    fakes: Any, otel: Exported
) -> None:
    """The fallback's span and metric points carried the candidate's release id and prompt
    version though the current release answered; the call stays on the canary arm, whose
    figures count the candidate's failure."""
    a, b, _ = fakes
    b.always(Fault(status=500))
    current = Release("bot", "v1", route(a), prompt_version="p1")
    candidate = Release("bot", "v2", route(b), prompt_version="p2")
    with _guard(current, candidate, telemetry=otel.telemetry) as guard:
        answer = guard.chat(USER, user=INSIDE)
        figures = _candidate_figures(guard)
    assert answer.route == "a"
    attributes = dict(call_span(otel).attributes or {})
    assert attributes["llmguard.release"] == "bot@v1"
    assert attributes["llmguard.release.prompt_version"] == "p1"
    assert attributes["llmguard.release.arm"] == "canary"
    labels = [p.attributes for p in otel.points("gen_ai.client.operation.duration")]
    assert [(lab.get("llmguard.release"), lab.get("llmguard.release.arm")) for lab in labels] == [
        ("bot@v1", "canary")
    ]
    assert figures == (1, 1.0)


def test_a_route_both_releases_share_is_tried_once(fakes: Any) -> None:
    a, b, c = fakes
    a.always(Fault(status=500))
    b.always(Fault(status=500))
    shared = route(a)
    current = Release("bot", "v1", [shared, route(c)])
    candidate = Release("bot", "v2", [route(b), shared])
    with _guard(current, candidate) as guard:
        assert guard.chat(USER, user=INSIDE).route == "c"
        figures = _candidate_figures(guard)
    assert (len(b.requests), len(a.requests), len(c.requests)) == (1, 1, 1)
    assert figures == (1, 1.0)


def test_the_fallback_can_be_turned_off(fakes: Any) -> None:
    a, b, _ = fakes
    b.always(Fault(status=500))
    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    with _guard(current, candidate, fallback_to_current=False) as guard:
        with pytest.raises((ProviderError, AllRoutesFailedError)):
            guard.chat(USER, user=INSIDE)
        figures = _candidate_figures(guard)
    assert (len(b.requests), len(a.requests)) == (1, 0)
    assert figures == (1, 1.0)
    with pytest.raises(ConfigurationError, match="fallback_to_current"):
        ReleasePlan(current, candidate=candidate, fallback_to_current="no")  # type: ignore[arg-type]


def test_a_hedge_never_races_the_canary_against_the_current_release(fakes: Any) -> None:
    """The fallback is for a candidate that failed: a hedge race stays among the arm's own
    routes (a slow candidate is measured slow, not replaced by the release)."""
    a, b, _ = fakes
    b.always(Fault(latency=0.2))
    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    with Guard(
        release=plan, environ={}, prices=PRICES, retry=None, telemetry=False, hedge_after=0.01
    ) as guard:
        assert guard.releases is not None
        guard.releases.start_now()
        assert guard.chat(USER, user=INSIDE).route == "b"
    assert len(a.requests) == 0


def test_the_control_arm_does_not_fall_back_to_the_candidate(fakes: Any) -> None:
    a, b, _ = fakes
    a.always(Fault(status=500))
    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    outside = next(f"u{i}" for i in range(100) if not in_canary(f"bot:u{i}", 0.5))
    with _guard(current, candidate) as guard, pytest.raises((ProviderError, AllRoutesFailedError)):
        guard.chat(USER, user=outside)
    assert len(b.requests) == 0
