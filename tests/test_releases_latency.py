"""Releases: a canary's latency guardrail judges differences a user would notice. A call is
slow only above both ``latency_tolerance`` times the control's latency and the control's
latency plus ``latency_slack_s``: at millisecond latencies a candidate a few ms slower (3 ms
beside 1.1 ms on a fresh connection) was every call "slow" and rolled back."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan, Stage
from llmguard_sdk.releases.policy import decide, in_canary, metric_counts, observation
from llmguard_sdk.testing import FakeProvider, Fault

USER = [{"role": "user", "content": "hello"}]
PRICES = PriceTable.default_table().with_prices(
    {f"fake-{v}-2025-01-01": Price(input=1.0, output=1.0) for v in ("a", "b")}
)
USERS = [f"u{i}" for i in range(400)]
CANARY = [user for user in USERS if in_canary(f"bot:{user}", 0.5)]
CONTROL = [user for user in USERS if user not in CANARY]


def _arm(calls: int, latency_s: float) -> dict[str, float]:
    arm: dict[str, float] = {}
    for _ in range(calls):
        for name, value in observation(latency_s, 1e-4, failed=False, rejected=False).items():
            arm[name] = arm.get(name, 0.0) + value
    return arm


def test_a_candidate_milliseconds_slower_has_no_slow_calls() -> None:
    """3 ms beside the control's 1.1 ms is 2.7 times as slow, yet 2 ms: no slow call."""
    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=100)
    counts = metric_counts(_arm(100, 0.0011), _arm(100, 0.003), policy)
    assert counts["slow"] == (0, 100, 0, 100)
    promote = decide(Stage(candidate="c"), _arm(100, 0.0011), _arm(100, 0.003), policy)
    assert promote is not None
    assert promote.action == "promote"


@pytest.mark.parametrize(
    ("control_s", "candidate_s", "slack_s", "slow"),
    [
        (0.0011, 0.003, 0.05, False),  # 2.7 times, 2 ms: within the slack
        (0.0011, 0.003, 0.0, True),  # no slack: the ratio alone, as before
        (0.01, 0.2, 0.05, True),  # 20 times, 190 ms
        (1.0, 1.3, 0.05, False),  # 300 ms, yet 1.3 times: within the ratio
        (1.0, 1.8, 0.05, True),
        (0.1, 0.18, 0.1, False),  # 1.8 times, 80 ms: within a 100 ms slack
    ],
)
def test_a_call_is_slow_past_both_the_ratio_and_the_slack(
    control_s: float, candidate_s: float, slack_s: float, slow: bool
) -> None:
    policy = CanaryPolicy(stages=(0.5, 1.0), latency_slack_s=slack_s)
    bad_canary, _, bad_control, _ = metric_counts(
        _arm(50, control_s), _arm(50, candidate_s), policy
    )["slow"]
    assert (bad_canary, bad_control) == ((50, 0) if slow else (0, 0))


@pytest.mark.parametrize("slack", [-0.1, math.nan, math.inf, "0.05", None, True])
def test_a_canary_policy_refuses_a_slack_that_is_no_duration(slack: Any) -> None:
    with pytest.raises(ConfigurationError, match="latency_slack_s"):
        CanaryPolicy(latency_slack_s=slack)


def _canary(a: FakeProvider, b: FakeProvider, **policy: Any) -> Guard:
    route_a = OpenAICompatibleProvider(a.base_url, model="fake-a-2025-01-01", name="a")
    route_b = OpenAICompatibleProvider(b.base_url, model="fake-b-2025-01-01", name="b")
    plan = ReleasePlan(
        Release("bot", "v1", route_a),
        candidate=Release("bot", "v2", route_b),
        canary=CanaryPolicy(stages=(0.5, 1.0), min_calls=60, flush_interval=60.0, **policy),
    )
    return Guard(release=plan, environ={}, prices=PRICES, retry=None, breaker=None, telemetry=False)


def _run(guard: Guard, users: list[str], threads: int) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda user: guard.chat(USER, user=user), users))


@pytest.mark.parametrize(
    ("delay_s", "status"),
    [(0.004, "promoted"), (0.3, "rolled_back")],
)
def test_a_canary_promotes_a_candidate_ms_slower_and_rolls_back_one_much_slower(
    delay_s: float, status: str
) -> None:
    """Loopback providers: the control answers at once (a millisecond or so), the candidate
    ``delay_s`` later. 4 ms later was rolled back as slow; 0.3 s later (far past the 50 ms
    slack and the ratio) still is. The candidate's calls run 20 at a time (no timing is
    asserted: the decision alone)."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        b.always(Fault(latency=delay_s))
        guard = _canary(a, b)
        try:
            controls = guard.releases
            assert controls is not None
            controls.start_now()
            _run(guard, CONTROL[:80], 1)  # the control's, one at a time
            _run(guard, CANARY[:80], 20 if delay_s > 0.1 else 1)
            stage = controls.flush()
        finally:
            guard.close()
    assert stage is not None
    assert stage.status == status, stage.reason
    if status == "rolled_back":
        assert "slow breached" in stage.reason
