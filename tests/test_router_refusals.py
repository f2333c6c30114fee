"""A deployment whose breaker or rate limit refuses calls: the group's other deployments
share its calls evenly, against FakeProviders (and a real Redis for a shared fleet)."""

from __future__ import annotations

from collections import Counter

import pytest

from llmguard_sdk import (
    BreakerPolicy,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
    RateLimit,
    RedisStore,
)
from llmguard_sdk.router.groups import CallFacts
from llmguard_sdk.router.policy import rank_by_weight
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, RawRedis
from .test_router import Clock

STRATEGIES = ["round_robin", "weighted", "least_outstanding", "headroom", "cheapest"]


def _group(servers: list[FakeProvider], strategy: str) -> DeploymentGroup:
    deployments = [
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers
    ]
    return DeploymentGroup("fake-model", deployments, strategy=strategy, seed=11)  # type: ignore[arg-type]


def _served(guard: Guard, calls: int) -> Counter[str]:
    return Counter(guard.chat(USER).route for _ in range(calls))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_deployment_whose_breaker_is_open_leaves_its_share_to_all_the_others(
    servers: list[FakeProvider], strategy: str
) -> None:
    """Its calls went to the deployment listed after it: with round robin the one after a
    dead deployment took two thirds of the calls, the other one third (LiteLLM's cooldown
    takes a deployment out of the rotation; the others share its calls)."""
    servers[0].always(Fault(status=503))
    policy = BreakerPolicy(minimum_calls=2, window=2, probe_every=None)
    with Guard(_group(servers, strategy), environ={}, retry=None, breaker=policy) as guard:
        assert guard.breakers is not None
        for _ in range(60):  # dep-0 fails until its breaker opens
            guard.chat(USER)
            if guard.breakers.state("dep-0") == "open":
                break
        served = _served(guard, 60)
    assert served["dep-0"] == 0
    assert abs(served["dep-1"] - served["dep-2"]) <= 6, served


def test_a_deployment_at_its_rate_limit_leaves_its_share_to_all_the_others(
    servers: list[FakeProvider],
) -> None:
    """LiteLLM's rpm per deployment: a deployment at its limit refused calls, and the
    deployment listed after it took them all."""
    limits = {"dep-0": RateLimit(rpm=2, burst=1.0)}
    with Guard(_group(servers, "round_robin"), environ={}, rate_limits=limits) as guard:
        served = _served(guard, 60)
    assert served["dep-0"] == 2
    assert abs(served["dep-1"] - served["dep-2"]) <= 6, served


def test_a_refused_deployment_comes_back_after_a_second_and_at_its_first_answer() -> None:
    """Refused, a deployment goes after the others for its refusal's wait, a second at
    most (its breaker may half-open sooner: a probe ends the wait in every process); an
    answer from it brings it back at once."""
    clock = Clock()
    routes = [OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name=n) for n in "abc"]
    group = DeploymentGroup("g", routes, strategy="round_robin", clock=clock)

    def firsts() -> Counter[str]:
        return Counter(group.ranked()[0].name for _ in range(30))

    group.refused("a", 30.0)
    assert firsts() == Counter({"b": 15, "c": 15})
    assert group.ranked()[-1].name == "a"  # still the group's failover
    clock.now += 1.0
    assert firsts() == Counter({"a": 10, "b": 10, "c": 10})
    group.refused("a", 0.2)
    clock.now += 0.1
    assert firsts()["a"] == 0
    clock.now += 0.1
    assert firsts()["a"] == 10
    group.refused("a", 30.0)
    group.observe("a", 0.01, failed=False)  # it answered (a failover or a probe's call)
    assert firsts()["a"] == 10
    group.refused("nobody", 5.0)  # a name of no deployment: nothing
    for name in "abc":
        group.refused(name, 30.0)  # all refused: the strategy ranks them all
    assert firsts() == Counter({"a": 10, "b": 10, "c": 10})


def test_a_weighted_group_whose_weighted_deployments_are_refused_leads_with_the_rest() -> None:
    """Weights of 0 among those left: drawn evenly, not a ValueError from the draw."""
    import random

    assert sorted(rank_by_weight([0.0, 0.0], random.Random(1))) == [0, 1]
    routes = [OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name=n) for n in "abc"]
    group = DeploymentGroup("g", routes, strategy="weighted", weights=[1.0, 0.0, 0.0])
    group.refused("a", 30.0)
    assert {group.ranked(CallFacts())[0].name for _ in range(40)} == {"b", "c"}


def test_least_outstanding_leases_a_deployment_the_call_goes_to_across_processes(
    servers: list[FakeProvider], redis_url: str, redis_prefix: str
) -> None:
    """A fleet sharing its calls in flight through Redis: a deployment taken out of service
    (its breaker isolated in every process) kept taking a third of the leases, for calls
    that went to another deployment: the counts said the dead deployment was busy and the
    live ones held fewer calls than they did."""
    import redis

    stores = [RedisStore(redis_url, key_prefix=redis_prefix) for _ in range(2)]
    guards = [Guard(_group(servers, "least_outstanding"), environ={}, store=s) for s in stores]
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        assert guards[0].breakers is not None
        guards[0].breakers.isolate("dep-0")  # every process: the breaker is in Redis
        streams = []
        for i in range(12):  # calls held open (in flight) in both processes
            stream = guards[i % 2].chat(USER, stream=True)
            next(iter(stream))
            streams.append(stream)
        in_flight = [s.stats.requests for s in servers]
        keys = {k.decode(): client.zcard(k) for k in client.scan_iter(f"{redis_prefix}:rt:*")}
        for stream in streams:
            stream.close()
    finally:
        for guard in guards:
            guard.close()
        client.close()
    assert in_flight[0] == 0
    assert in_flight[1:] == [6, 6], in_flight
    # the leases are where the calls are, but for the call in each process that found the
    # deployment refused (it learns so); before, a third of them stayed on it
    assert sum(keys.values()) == 12
    assert sorted(keys.values())[0] <= 2


def test_a_tenant_at_its_own_limit_leaves_the_ranking_alone(
    servers: list[FakeProvider],
) -> None:
    """One tenant at its own limit on a deployment says nothing of the deployment's room for
    the others."""
    limits = {"dep-0": RateLimit(rpm=2, per_tenant=True)}
    with Guard(_group(servers, "round_robin"), environ={}, rate_limits=limits) as guard:
        noisy = Counter(guard.chat(USER, tenant="noisy").route for _ in range(12))
        assert noisy["dep-0"] == 2  # it led 4 of them: 2 refused
        served = Counter(guard.chat(USER, tenant=f"t{i}").route for i in range(30))
    assert served == Counter({"dep-0": 10, "dep-1": 10, "dep-2": 10})
