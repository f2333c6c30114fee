"""The headroom and cheapest strategies and region preference: the pure ranking, then groups
in a Guard against FakeProviders."""

from __future__ import annotations

import pytest

from llmguard_sdk import (
    ConfigurationError,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
    RequestValidationError,
)
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.router.fit import (
    Headroom,
    exhausted,
    fits,
    headroom_from,
    needs,
    prefer_region,
    rank_by_cost,
    rank_by_headroom,
    share_at,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_router import Clock


def test_headroom_is_the_tightest_share_left_until_the_counters_reset() -> None:
    headers = {
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": "80",
        "x-ratelimit-reset-requests": "6s",
        "X-RateLimit-Limit-Tokens": "10000",
        "X-RateLimit-Remaining-Tokens": "2500",
        "X-RateLimit-Reset-Tokens": "1m30s",
    }
    learnt = headroom_from(headers, 10.0)
    assert learnt == Headroom(0.25, 100.0)
    assert share_at(learnt, 99.0) == 0.25
    assert share_at(learnt, 100.0) == 1.0  # reset: nothing known any more
    assert share_at(None, 0.0) == 1.0  # never heard of: all of it
    anthropic = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "5",
    }
    assert headroom_from(anthropic, 0.0) == Headroom(0.1, 60.0)
    assert headroom_from({"x-ratelimit-remaining-requests": "0"}, 0.0) == Headroom(0.0, 60.0)
    assert headroom_from({"x-ratelimit-remaining-requests": "7"}, 0.0) is None  # no limit
    assert headroom_from({"content-type": "application/json"}, 0.0) is None
    assert exhausted(3.0, 5.0) == Headroom(0.0, 8.0)
    assert exhausted(None, 5.0) == Headroom(0.0, 6.0)


def test_headroom_ranks_most_left_first_and_ties_go_round() -> None:
    assert rank_by_headroom([0.2, 0.9, 0.5], 0) == [1, 2, 0]
    assert [rank_by_headroom([1.0, 1.0, 1.0], t)[0] for t in range(3)] == [0, 1, 2]


def test_cheapest_ranks_those_that_fit_by_price_then_the_others() -> None:
    assert rank_by_cost([3.0, 1.0, 2.0], [True, False, True], 0) == [2, 0, 1]
    assert [rank_by_cost([1.0, 1.0], [True, True], t)[0] for t in range(2)] == [0, 1]
    small = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="small")
    small.context_window = 1000  # type: ignore[attr-defined]
    plain = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="plain")
    plain.capabilities = frozenset({"tools"})  # type: ignore[attr-defined]
    assert fits(small, 900, ())
    assert not fits(small, 1200, ())
    assert fits(plain, 10**6, {"tools"})
    assert not fits(plain, 10, {"vision"})
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    request = ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        }
    )
    assert needs(request) == {"tools", "vision"}
    assert needs(ChatRequest.model_validate({"messages": [USER[0]]})) == frozenset()


def test_the_callers_region_goes_first_then_the_others_as_failover() -> None:
    regions = ["us", "eu", "us", None]
    assert prefer_region([0, 1, 2, 3], regions, "eu") == [1, 0, 2, 3]
    assert prefer_region([2, 0, 1, 3], regions, "us") == [2, 0, 1, 3]
    assert prefer_region([3, 2, 1, 0], regions, None) == [3, 2, 1, 0]
    assert prefer_region([0, 1], ["us", "us"], "ap") == [0, 1]  # none there: all failover


def _routes(servers: list[FakeProvider]) -> list[OpenAICompatibleProvider]:
    return [OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers]


def test_headroom_strategy_moves_calls_to_the_deployment_with_most_limit_left() -> None:
    with (
        FakeProvider(name="small", rpm=4) as small,
        FakeProvider(name="large", rpm=1000) as large,
    ):
        group = DeploymentGroup("m", _routes([small, large]), strategy="headroom")
        with Guard(group, environ={}) as guard:
            routes = [guard.chat(USER).route for _ in range(12)]
    # both are tried (nothing known: ties go round), then small, its 4 a minute nearly
    # spent, gets nothing while large has most of its limit left
    assert routes[:2] == ["small", "large"] or routes[:2] == ["large", "small"]
    assert routes[2:].count("small") <= 1
    assert small.stats.rate_limited == 0


def test_a_429_leaves_a_deployment_no_headroom_for_its_wait() -> None:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        a.always(Fault(status=429, retry_after=30))
        group = DeploymentGroup("m", _routes([a, b]), strategy="headroom")
        with Guard(group, environ={}, breaker=None) as guard:
            routes = [guard.chat(USER).route for _ in range(6)]
        assert set(routes) == {"b"}
        assert a.stats.requests == 1  # refused once: no further call within its wait


def test_cheapest_takes_the_cheapest_deployment_that_fits(servers: list[FakeProvider]) -> None:
    prices = PriceTable(
        {
            "dep-0/fake-model": Price(input=5.0, output=15.0),
            "dep-1/fake-model": Price(input=0.5, output=1.5),
            "dep-2/fake-model": Price(input=1.0, output=3.0),
        }
    )
    routes = _routes(servers)
    routes[1].context_window = 20  # type: ignore[attr-defined]
    group = DeploymentGroup("m", routes, strategy="cheapest")
    with Guard(group, environ={}, prices=prices) as guard:
        assert guard.chat(USER, max_tokens=5).route == "dep-1"
        long = [{"role": "user", "content": "word " * 40}]
        assert guard.chat(long, max_tokens=5).route == "dep-2"  # dep-1 cannot hold it
        servers[2].always(Fault(status=503))
        assert guard.chat(long, max_tokens=5).route == "dep-0"  # failover: the dearest


def test_regions_prefer_the_callers_and_fail_over_to_others(servers: list[FakeProvider]) -> None:
    group = DeploymentGroup(
        "m",
        _routes(servers),
        strategy="round_robin",
        regions={"dep-0": "us", "dep-1": "eu", "dep-2": "us"},
        region="us",
    )
    with Guard(group, environ={}) as guard:
        assert {guard.chat(USER).route for _ in range(4)} == {"dep-0", "dep-2"}
        assert {guard.chat(USER, region="eu").route for _ in range(3)} == {"dep-1"}
        servers[1].always(Fault(status=503))
        assert guard.chat(USER, region="eu").route in {"dep-0", "dep-2"}  # across regions
        with pytest.raises(RequestValidationError, match="region"):
            guard.chat(USER, region="")
    with pytest.raises(ConfigurationError, match="regions"):
        DeploymentGroup("m", _routes(servers), regions={"nope": "eu"})


def test_least_outstanding_counts_within_the_callers_region(servers: list[FakeProvider]) -> None:
    clock = Clock()
    group = DeploymentGroup(
        "m",
        _routes(servers),
        strategy="least_outstanding",
        regions={"dep-0": "eu", "dep-1": "us", "dep-2": "us"},
        clock=clock,
    )
    with Guard(group, environ={}) as guard:
        routes = [guard.chat(USER, region="us").route for _ in range(4)]
        assert set(routes) == {"dep-1", "dep-2"}
        assert guard.chat(USER, region="eu").route == "dep-0"
