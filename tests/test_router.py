"""Deployment groups: the pure ranking, and groups in a Guard's chain against FakeProviders."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    ConfigurationError,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
)
from llmguard_sdk.router.policy import (
    Latency,
    estimate,
    observe,
    rank_by_latency,
    rank_by_weight,
    rotate,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

# -- the pure ranking ------------------------------------------------------------------------


def test_latency_mean_moves_toward_samples_and_failures_count_as_the_penalty() -> None:
    state = observe(Latency(), 0.2, 10.0, failed=False, penalty_s=5.0)
    assert state == Latency(0.2, 10.0)
    state = observe(state, 0.4, 11.0, failed=False, penalty_s=5.0)
    assert state.mean_s == pytest.approx(0.2 + 0.3 * 0.2)
    failed = observe(state, 0.01, 12.0, failed=True, penalty_s=5.0)  # a fast refusal
    assert failed.mean_s == pytest.approx(0.26 + 0.3 * (5.0 - 0.26))


def test_a_mean_drifts_halfway_to_the_best_each_half_life() -> None:
    state = Latency(mean_s=2.0, updated=100.0)
    assert estimate(state, 100.0, toward=0.0, half_life_s=10.0) == pytest.approx(2.0)
    assert estimate(state, 110.0, toward=0.0, half_life_s=10.0) == pytest.approx(1.0)
    assert estimate(state, 130.0, toward=0.5, half_life_s=10.0) == pytest.approx(0.5 + 1.5 / 8)
    assert estimate(Latency(), 130.0, toward=0.5, half_life_s=10.0) == 0.0  # never measured


def test_power_of_two_choices_puts_the_faster_of_the_pair_first() -> None:
    rng = random.Random(7)
    firsts = [rank_by_latency([0.1, 0.3, 0.9], rng)[0] for _ in range(3000)]
    # the slowest never leads; the fastest leads whenever it is drawn (2 pairs of 3)
    assert firsts.count(2) == 0
    assert firsts.count(0) / 3000 == pytest.approx(2 / 3, abs=0.04)
    assert rank_by_latency([0.5, 0.1], random.Random(1)) == [1, 0]
    assert rank_by_latency([0.5], random.Random(1)) == [0]


def test_weights_and_rotation() -> None:
    rng = random.Random(3)
    firsts = [rank_by_weight([3.0, 1.0, 0.0], rng)[0] for _ in range(4000)]
    assert firsts.count(2) == 0
    assert firsts.count(0) / 4000 == pytest.approx(0.75, abs=0.03)
    assert sorted(rank_by_weight([3.0, 1.0, 0.0], rng)) == [0, 1, 2]  # all stay as failover
    assert [rotate(3, turn) for turn in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]


def test_bad_groups_are_refused() -> None:
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="a")
    with pytest.raises(ConfigurationError, match="strategy"):
        DeploymentGroup("g", [route], strategy="fastest")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="one or more"):
        DeploymentGroup("g", [])
    with pytest.raises(ConfigurationError, match="weights"):
        DeploymentGroup("g", [route], weights=[0.0])
    with pytest.raises(ConfigurationError, match="unique"):
        Guard([DeploymentGroup("g", [route]), route], environ={})


# -- groups in a Guard ---------------------------------------------------------------------


@pytest.fixture
def servers() -> Iterator[list[FakeProvider]]:
    fakes = [FakeProvider(name=f"dep-{i}") for i in range(3)]
    for fake in fakes:
        fake.start()
    yield fakes
    for fake in fakes:
        fake.stop()


def _group(servers: list[FakeProvider], **options: object) -> DeploymentGroup:
    deployments = [
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers
    ]
    return DeploymentGroup("fake-model", deployments, seed=11, **options)  # type: ignore[arg-type]


def test_latency_strategy_keeps_calls_off_a_slow_deployment(servers: list[FakeProvider]) -> None:
    servers[1].always(Fault(latency=0.3))
    group = _group(servers)
    with Guard(group, environ={}) as guard:
        routes = [guard.chat(USER).route for _ in range(40)]
        latencies = group.latencies()
    assert routes.count("dep-1") <= 2  # measured once (a deployment never seen goes first)
    assert servers[1].stats.requests == routes.count("dep-1")
    assert routes.count("dep-0") + routes.count("dep-2") >= 38
    assert latencies["dep-1"] is not None
    assert latencies["dep-1"] > 0.2


def test_round_robin_spreads_calls_evenly(servers: list[FakeProvider]) -> None:
    with Guard(_group(servers, strategy="round_robin"), environ={}) as guard:
        routes = [guard.chat(USER).route for _ in range(30)]
    assert [routes.count(f"dep-{i}") for i in range(3)] == [10, 10, 10]


def test_a_failing_deployment_hands_over_within_the_group_then_to_the_chain(
    servers: list[FakeProvider],
) -> None:
    servers[0].always(Fault(status=503))
    group = _group(servers, strategy="ordered")
    with (
        FakeProvider(name="backup") as backup,
        Guard(
            [group, OpenAICompatibleProvider(backup.base_url, model="fake-model", name="backup")],
            environ={},
            retry=None,
        ) as guard,
    ):
        assert guard.chat(USER).route == "dep-1"  # the group's next deployment
        servers[1].always(Fault(status=503))
        servers[2].always(Fault(status=503))
        assert guard.chat(USER).route == "backup"  # then the chain's next route
        assert [r.name for r in guard.routes] == ["dep-0", "dep-1", "dep-2", "backup"]
        backup.always(Fault(status=503))
        with pytest.raises(AllRoutesFailedError):
            guard.chat(USER)


def test_streams_and_async_calls_go_through_groups(servers: list[FakeProvider]) -> None:
    import anyio

    group = _group(servers, strategy="round_robin")

    async def calls() -> list[str]:
        async with Guard(group, environ={}) as guard:
            routes = [(await guard.achat(USER)).route for _ in range(3)]
            stream = await guard.achat(USER, stream=True)
            async with stream:
                text = "".join([chunk.text async for chunk in stream])
            assert text == "Echo: hello there"
            return [*routes, stream.response.route]

    assert anyio.run(calls) == ["dep-0", "dep-1", "dep-2", "dep-0"]


def test_a_failure_moves_to_a_sibling_at_once_and_the_last_one_is_retried(
    servers: list[FakeProvider],
) -> None:
    servers[0].always(Fault(status=503))
    servers[1].always(Fault(status=503))
    servers[2].script(Fault(status=503))  # then answers
    with Guard(_group(servers, strategy="ordered"), environ={}) as guard:
        answer = guard.chat(USER)
    assert answer.route == "dep-2"
    assert [s.stats.requests for s in servers] == [1, 1, 2]  # no wait on 0 and 1
    assert answer.attempts == 4
