"""Releases: what a canary's decisions rest on. A stage is promoted on evidence from both
arms: a canary whose control served (nearly) no calls has nothing to be compared with."""

from __future__ import annotations

import contextlib

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan, Stage
from llmguard_sdk.releases.policy import decide, in_canary, observation
from llmguard_sdk.testing import FakeProvider, Fault

USER = [{"role": "user", "content": "hello"}]
PRICES = PriceTable.default_table().with_prices(
    {f"fake-{v}-2025-01-01": Price(input=1.0, output=1.0) for v in ("a", "b")}
)


def _route(fake: FakeProvider, name: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, model=f"fake-{name}-2025-01-01", name=name)


def test_a_failing_candidate_of_a_tenant_alone_in_the_canary_is_not_promoted() -> None:
    """``sticky_by="tenant"`` with one tenant, hashed into the canary: every call went to the
    candidate, which failed each one, and the stage was promoted ("stage passed", the
    candidate then served everyone): with no control calls the test had nothing to weigh."""
    tenant = next(t for t in (f"acme{i}" for i in range(1000)) if in_canary(f"bot:{t}", 0.25))
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        b.always(Fault(status=500))
        policy = CanaryPolicy(
            stages=(0.25, 1.0), sticky_by="tenant", min_calls=50, flush_interval=60.0
        )
        plan = ReleasePlan(
            Release("bot", "v1", _route(a, "a")),
            candidate=Release("bot", "v2", _route(b, "b")),
            canary=policy,
        )
        guard = Guard(
            release=plan, environ={}, prices=PRICES, retry=None, breaker=None, telemetry=False
        )
        try:
            controls = guard.releases
            assert controls is not None
            controls.start_now()
            for i in range(80):
                with contextlib.suppress(Exception):
                    guard.chat(USER, tenant=tenant, user=f"u{i}")
            stage = controls.flush()
        finally:
            guard.close()
    assert len(b.requests) == 80  # the tenant's every call on the candidate
    assert stage is not None
    assert (stage.status, stage.index) == ("canary", 0)  # waiting for control calls


def _arm(calls: int, errors: int) -> dict[str, float]:
    arm: dict[str, float] = {}
    for i in range(calls):
        for name, value in observation(0.05, 1e-4, failed=i < errors, rejected=False).items():
            arm[name] = arm.get(name, 0.0) + value
    return arm


def test_a_stage_is_promoted_once_both_arms_served_min_calls() -> None:
    """500 canary calls, half of them errors, beside 20 clean control calls: the likelihood
    ratio stays under the bound (where bad events fall says little when nearly every call is
    the canary's), and the stage was promoted."""
    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=500)
    stage = Stage(candidate="c")
    assert decide(stage, _arm(20, 0), _arm(500, 250), policy) is None
    assert decide(stage, _arm(499, 0), _arm(600, 0), policy) is None
    promote = decide(stage, _arm(500, 0), _arm(500, 0), policy)
    assert promote is not None
    assert promote.action == "promote"
    rollback = decide(stage, _arm(500, 0), _arm(500, 250), policy)
    assert rollback is not None
    assert (rollback.action, rollback.metric) == ("rollback", "errors")
