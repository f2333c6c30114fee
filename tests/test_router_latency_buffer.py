"""``latency``'s buffer: deployments whose costs lie within ``buffer`` of each other are as
fast as each other, so the power of two choices picks either at random and equal
deployments share the load (as LiteLLM's ``lowest_latency_buffer``). Without it the
marginally fastest of two equal deployments led every call."""

from __future__ import annotations

import random

import pytest

from llmguard_sdk import ConfigurationError, DeploymentGroup, Guard, OpenAICompatibleProvider
from llmguard_sdk.router.policy import rank_by_latency
from llmguard_sdk.testing import FakeProvider

from .conftest import USER


def test_costs_within_the_buffer_are_drawn_evenly_and_beyond_it_the_cheaper_leads() -> None:
    rng = random.Random(4)
    firsts = [rank_by_latency([0.100, 0.102], rng, buffer=0.2)[0] for _ in range(2000)]
    assert firsts.count(1) / 2000 == pytest.approx(0.5, abs=0.05)
    # beyond the buffer (50 % slower), the cheaper of the pair leads, as before
    assert {rank_by_latency([0.100, 0.150], rng, buffer=0.2)[0] for _ in range(200)} == {0}
    # no buffer: the marginally faster one leads every call
    assert {rank_by_latency([0.100, 0.102], rng)[0] for _ in range(200)} == {0}
    # the rest keep their failover order, cheapest first
    assert all(
        rank[1:] == sorted(rank[1:], key=[0.1, 0.102, 0.104].__getitem__)
        for rank in (rank_by_latency([0.1, 0.102, 0.104], rng, buffer=0.2) for _ in range(50))
    )


class FrozenClock:
    """A group clock that never moves: a faster sample cannot pull an average down (it
    does so by how long the average went unfed), so the averages stay as seeded."""

    def __call__(self) -> float:
        return 1000.0


def _shares(servers: list[FakeProvider], **options: object) -> dict[str, int]:
    """The calls each of two deployments got, the first measured at 5 s, the second at
    5.1 s (2 % slower): equal deployments, as far as anyone can tell (seconds: a loopback
    call's own time, its first one's set-up included, stays below both)."""
    deployments = [
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers[:2]
    ]
    group = DeploymentGroup(
        "fake-model", deployments, seed=5, clock=FrozenClock(),
        **options,  # type: ignore[arg-type]
    )  # fmt: skip
    for name, seconds in (("dep-0", 5.0), ("dep-1", 5.1)) * 2:  # the first: unmeasured
        group.observe(name, seconds, failed=False)
    with Guard(group, environ={}) as guard:
        for _ in range(200):
            guard.chat(USER)
    return {s.name: s.stats.requests for s in servers[:2]}


def test_equal_deployments_share_the_load(servers: list[FakeProvider]) -> None:
    """The marginally faster deployment took all 200 calls; by default (a 20 % buffer) they
    are shared."""
    shares = _shares(servers)
    assert sum(shares.values()) == 200
    assert min(shares.values()) >= 70, shares
    assert _shares(servers, buffer=0.0)["dep-1"] == shares["dep-1"]  # (no more calls there)


def test_the_buffer_is_a_finite_number_at_least_zero() -> None:
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="a")
    assert DeploymentGroup("g", [route]).buffer == 0.2
    for bad in (-0.1, float("inf"), float("nan"), "0.2", True):
        with pytest.raises(ConfigurationError, match="buffer must be a finite"):
            DeploymentGroup("g", [route], buffer=bad)  # type: ignore[arg-type]
