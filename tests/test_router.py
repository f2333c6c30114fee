"""Deployment groups: the pure ranking, and groups in a Guard's chain against FakeProviders."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    ConfigurationError,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
)
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.router.groups import CallFacts
from llmguard_sdk.router.leases import LeaseAsk
from llmguard_sdk.router.policy import (
    EXPLORE_EVERY,
    Latency,
    estimate,
    observe,
    outlasted,
    predicted,
    rank_by_latency,
    rank_by_load,
    rank_by_weight,
    rotate,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

# -- the pure ranking ------------------------------------------------------------------------


WARM = Latency(answers=1)  # a deployment whose first answer (and connection) came


def test_the_first_answer_is_not_measured_but_a_first_failure_is() -> None:
    cold = observe(Latency(), 0.5, 3.0, failed=False, penalty_s=5.0)
    assert cold == Latency(None, None, 3.0, 1)
    assert observe(cold, 0.02, 4.0, failed=False, penalty_s=5.0).first_s == pytest.approx(0.02)
    assert observe(Latency(), 0.01, 3.0, failed=True, penalty_s=5.0).first_s == 5.0


def test_a_slower_sample_replaces_the_mean_and_a_faster_one_pulls_it_down_with_time() -> None:
    state = observe(WARM, 0.2, 10.0, failed=False, penalty_s=5.0)
    assert state == Latency(0.2, None, 10.0, 2)
    state = observe(state, 0.5, 11.0, failed=False, penalty_s=5.0)
    assert state.first_s == pytest.approx(0.5)  # peak: one slow answer is enough
    soon = observe(state, 0.1, 11.0, failed=False, penalty_s=5.0, half_life_s=10.0)
    assert soon.first_s == pytest.approx(0.5)  # no time passed: the peak holds
    later = observe(state, 0.1, 21.0, failed=False, penalty_s=5.0, half_life_s=10.0)
    assert later.first_s == pytest.approx(0.1 + 0.4 / 2)  # halfway after one half-life
    failed = observe(later, 0.01, 22.0, failed=True, penalty_s=5.0)  # a fast refusal
    assert failed.first_s == pytest.approx(5.0)


def test_streams_split_first_token_and_per_token_time_and_plain_answers_use_both() -> None:
    state = observe(WARM, 1.1, 0.0, failed=False, penalty_s=5.0, first_s=0.1, tokens=11)
    assert (state.first_s, state.per_token_s) == pytest.approx((0.1, 0.1))
    assert predicted(state, 21) == pytest.approx(0.1 + 20 * 0.1)
    assert predicted(Latency(), 5) is None
    # a plain answer of 6 tokens in 0.8 s: 0.5 s of tokens at the learnt rate, 0.3 s first
    plain = observe(state, 0.8, 0.0, failed=False, penalty_s=5.0, tokens=6)
    assert plain.first_s == pytest.approx(0.3)
    assert plain.per_token_s == pytest.approx(0.1)


def test_a_mean_drifts_halfway_to_the_best_each_half_life() -> None:
    state = Latency(first_s=2.0, updated=100.0)
    assert estimate(state, 100.0, toward=0.0, half_life_s=10.0) == pytest.approx(2.0)
    assert estimate(state, 110.0, toward=0.0, half_life_s=10.0) == pytest.approx(1.0)
    assert estimate(state, 130.0, toward=0.5, half_life_s=10.0) == pytest.approx(0.5 + 1.5 / 8)
    assert estimate(Latency(), 130.0, toward=0.5, half_life_s=10.0) == 0.0  # never measured


def test_a_deployment_beyond_the_slack_takes_no_call_and_stays_as_failover() -> None:
    rng = random.Random(5)
    ranks = [rank_by_latency([0.02, 0.1, 0.025], rng, slack=2.0) for _ in range(2000)]
    assert all(r == [0, 2, 1] for r in ranks)  # the slow one never leads; still failover
    ranks = [rank_by_latency([0.02, 0.1, 0.025], rng, slack=10.0) for _ in range(2000)]
    assert {r[0] for r in ranks} == {0, 2}  # within a wider band it is drawn, and loses
    # without a band, P2C leads with the slow one whenever it is drawn with nothing slower
    assert rank_by_latency([0.02, 0.1], random.Random(1), slack=2.0) == [0, 1]
    # never measured deployments (cost 0) lead, among themselves
    firsts = {rank_by_latency([0.02, 0.0, 0.0], rng, slack=2.0)[0] for _ in range(200)}
    assert firsts == {1, 2}


def test_loads_rank_fewest_first_and_ties_go_round() -> None:
    assert rank_by_load([3, 1, 2], 0) == [1, 2, 0]
    assert [rank_by_load([1, 1, 1], turn)[0] for turn in range(4)] == [0, 1, 2, 0]
    assert rank_by_load([2, 1, 1], 1) == [1, 2, 0]
    assert rank_by_load([2, 1, 1], 2) == [2, 1, 0]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _named(*names: str) -> list[OpenAICompatibleProvider]:
    return [OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name=n) for n in names]


def test_a_known_slow_deployment_gets_a_trickle_not_bulk_traffic() -> None:
    clock = Clock()
    group = DeploymentGroup("g", _named("a", "b", "c"), seed=3, clock=clock)
    for name, seconds in (("a", 0.02), ("b", 0.1), ("c", 0.022)) * 2:  # the first: cold
        group.observe(name, seconds, failed=False)
    firsts: list[str] = []
    for _ in range(6000):  # 60 s at 100 calls/s, each answering as its deployment does
        clock.now += 0.01
        first = group.ranked()[0].name
        firsts.append(first)
        group.observe(first, {"a": 0.02, "b": 0.1, "c": 0.022}[first], failed=False)
    # b leads a call again only when it has neither answered nor led one for a half-life
    # (10 s), and each try brings its peak back: a trickle, not bulk traffic
    assert 4 <= firsts.count("b") <= 7
    assert "b" not in firsts[:990]
    tries = [i for i, name in enumerate(firsts) if name == "b"]
    assert all(later - earlier >= 990 for earlier, later in itertools.pairwise(tries))
    assert firsts.count("a") + firsts.count("c") == len(firsts) - firsts.count("b")


def test_calls_in_flight_multiply_the_cost() -> None:
    clock = Clock()
    group = DeploymentGroup("g", _named("a", "b"), seed=3, clock=clock)
    for name, seconds in (("a", 0.02), ("b", 0.03)) * 2:
        group.observe(name, seconds, failed=False)
    assert group.ranked()[0].name == "a"
    for call in range(2):  # two calls in flight on a: cost 0.06 against b's 0.03
        group.local_leases.take(LeaseAsk("g", group.names, 0, 0, f"call-{call}", 60.0))
    assert group.ranked()[0].name == "b"
    clock.now += 61  # the leases ran out (a crashed caller holds nothing for long)
    assert group.local_leases.counts("g", group.names) == [0, 0]


def test_a_deployment_not_yet_measured_takes_its_share_not_every_call() -> None:
    """Never measured, it cost 0 however many calls it had in flight: a burst went there
    whole (a deployment added to a busy group took every call until two answers came back)."""
    clock = Clock()
    group = DeploymentGroup("g", _named("a", "new"), seed=3, clock=clock)
    for _ in range(2):
        group.observe("a", 0.1, failed=False)
    assert group.ranked()[0].name == "new"  # nothing in flight there: measured early
    firsts = []
    for call in range(20):  # a burst: each call leases the deployment it leads with
        first = group.ranked()[0].name
        firsts.append(first)
        group.local_leases.take(
            LeaseAsk("g", group.names, group.names.index(first), 0, f"c{call}", 60.0)
        )
    assert 5 <= firsts.count("new") <= 15  # shared as if it were as fast as the best


def test_latency_predicts_no_longer_an_answer_than_the_call_allows() -> None:
    """A call allowing 5 tokens was ranked by the group's typical answer (1000 tokens): it
    went to the deployment fast per token but slow to its first one."""
    clock = Clock()
    group = DeploymentGroup("g", _named("quick", "steady"), seed=3, clock=clock)
    for _ in range(3):  # streams: quick starts in 0.1 s, then 10 ms a token; steady 1 s, 1 ms
        group.observe("quick", 0.1 + 999 * 0.01, failed=False, first_s=0.1, tokens=1000)
        group.observe("steady", 1.0 + 999 * 0.001, failed=False, first_s=1.0, tokens=1000)
    assert group.ranked()[0].name == "steady"  # 1000 tokens: 2 s against 10.1 s
    short = ChatRequest.model_validate({"messages": [USER[0]], "max_tokens": 5})
    firsts = {group.ranked(CallFacts(request=short))[0].name for _ in range(5)}
    assert firsts == {"quick"}  # 5 tokens: 0.14 s against 1.004 s


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
    # two groups of one name shared their load in the store, and a task tier naming it
    # went to one of them; a group named as a route made the tier's name ambiguous
    east, west, other = _named("east", "west", "other")
    clashes: list[list[DeploymentGroup | OpenAICompatibleProvider]] = [
        [DeploymentGroup("g", [east]), DeploymentGroup("g", [west])],
        [DeploymentGroup("other", [east]), other],
    ]
    for entries in clashes:
        with pytest.raises(ConfigurationError, match="unique"):
            Guard(entries, environ={})


@pytest.mark.parametrize(
    "setting",
    [
        {"half_life_s": "10"},
        {"penalty_s": None},
        {"slack": "2"},
        {"regions": ["a"]},
        {"regions": {"a": 5}},
        {"region": 5},
        {"weights": 5},
        {"clock": 5},
        {"name": 5},
        {"name": ""},
    ],
)
def test_group_settings_of_the_wrong_kind_are_configuration_errors(
    setting: dict[str, object],
) -> None:
    """They raised TypeError or AttributeError (``weights=5``; ``clock=5`` at the first
    call), or were taken (a name of 5 or "", a region of 5)."""
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="a")
    options = {"name": "g", **setting}
    with pytest.raises(ConfigurationError):
        DeploymentGroup(deployments=[route], **options)  # type: ignore[arg-type]


def test_deployments_and_weights_may_be_any_iterable() -> None:
    """A generator of deployments or of weights raised TypeError (no len())."""
    group = DeploymentGroup(
        "g", iter(_named("a", "b")), strategy="weighted", weights=(w for w in [1.0, 0.0])
    )
    assert (group.names, group.weights) == (("a", "b"), (1.0, 0.0))
    assert group.ranked()[0].name == "a"


@pytest.mark.parametrize(
    "weights", [[math.inf, 1.0], [math.nan, 1.0], ["2", "1"], [None, 1.0], [True, False]]
)
def test_weights_must_be_finite_numbers(weights: list[object]) -> None:
    """An infinite weight was accepted and every call then raised ValueError ("Total of
    weights must be finite"); a string weight raised TypeError; a bool was read as 1 or 0
    (a configuration file refused it)."""
    routes = [
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name=name)
        for name in ("a", "b")
    ]
    with pytest.raises(ConfigurationError, match="weights"):
        DeploymentGroup("g", routes, strategy="weighted", weights=weights)  # type: ignore[arg-type]


def test_huge_weights_draw_in_proportion_rather_than_overflow() -> None:
    """Each weight finite but their sum not: every call raised ValueError ("Total of weights
    must be finite")."""
    group = DeploymentGroup("g", _named("a", "b"), strategy="weighted", weights=[1e308, 1e308])
    assert {group.ranked()[0].name for _ in range(40)} == {"a", "b"}
    rng = random.Random(5)
    firsts = [rank_by_weight([1.5e308, 0.5e308], rng)[0] for _ in range(4000)]
    assert firsts.count(0) / 4000 == pytest.approx(0.75, abs=0.03)


def test_an_infinite_penalty_is_refused() -> None:
    """It made failed deployments' costs NaN (inf - inf), and a ranking of NaNs is none."""
    with pytest.raises(ConfigurationError, match="finite"):
        DeploymentGroup("g", _named("a", "b"), penalty_s=math.inf)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("half_life_s", math.inf),
        ("half_life_s", math.nan),
        ("half_life_s", True),
        ("slack", math.inf),
        ("slack", math.nan),
        ("penalty_s", math.nan),
        ("penalty_s", -math.inf),
    ],
)
def test_tuning_that_is_no_finite_number_is_refused_naming_it(setting: str, value: float) -> None:
    """``half_life_s=inf`` made a group that never explored, ``slack=inf`` a band that let
    any deployment lead: both were taken."""
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="a")
    with pytest.raises(ConfigurationError, match=rf"{setting} must be a finite .*{value!r}"):
        DeploymentGroup("g", [route], **{setting: value})  # type: ignore[arg-type]


# -- groups in a Guard ---------------------------------------------------------------------


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


def test_an_answer_after_a_failure_replaces_the_penalty() -> None:
    """A penalty stands in for a measure until the next answer: it was decayed as if it
    were one (halfway per half-life), so a recovered deployment took log2(penalty / its
    latency) half-lives (about 100 s at the defaults) to be back within the slack."""
    failed = observe(Latency(0.02, None, 0.0, 5), 0.01, 1.0, failed=True, penalty_s=10.0)
    assert failed.first_s == 10.0
    back = observe(failed, 0.03, 11.0, failed=False, penalty_s=10.0, half_life_s=10.0)
    assert back.first_s == pytest.approx(0.03)  # (the penalty decayed: 5.015)
    slower = observe(back, 0.01, 11.0, failed=False, penalty_s=10.0, half_life_s=10.0)
    assert slower.first_s == pytest.approx(0.03)  # then a peak-sensitive average again


def test_an_attempt_stopped_unanswered_raises_the_mean_and_never_lowers_it() -> None:
    state = observe(WARM, 0.2, 10.0, failed=False, penalty_s=5.0)
    assert outlasted(state, 0.5, 11.0) == Latency(0.5, None, 11.0, 2)
    assert outlasted(state, 0.1, 11.0).first_s == pytest.approx(0.2)
    assert outlasted(Latency(), 0.3, 1.0).first_s == pytest.approx(0.3)  # never measured


def test_a_deployment_back_from_an_outage_leads_again_after_one_exploration(
    servers: list[FakeProvider],
) -> None:
    """The fastest deployment fails (a penalty keeps it out), comes back, and once the
    group's clock has gone past its exploration time (five half-lives) one call explores it
    and it leads every call again. Time is the group's clock, moved by the test (frozen in
    between: every deployment stays due). Exploring is rationed: the others, due too, are
    explored one call in ``EXPLORE_EVERY`` (each call explored one of them: the first three
    calls went one to each). The others answer 1 s slow: a loopback answer of the fastest
    stays out of their band (``slack`` 2) unless it takes over 0.5 s."""
    clock = Clock()
    for server in servers[1:]:
        server.always(Fault(latency=1.0))
    group = _group(servers, half_life_s=0.3, clock=clock)
    for name, seconds in (("dep-0", 0.01), ("dep-1", 1.0), ("dep-2", 1.0)) * 2:
        group.observe(name, seconds, failed=False)  # every deployment measured (not the first)
    servers[0].always(Fault(status=500))
    with Guard(group, environ={}, retry=None, breaker=None) as guard:
        during = [guard.chat(USER).route for _ in range(2)]  # its outage: failed over, then out
        servers[0].always(None)
        clock.now += 1.5  # five half-lives after its return: each one due for exploring
        back = [guard.chat(USER).route for _ in range(EXPLORE_EVERY + 1)]
    assert set(during) <= {"dep-1", "dep-2"}
    assert servers[0].stats.by_status == {500: 1, 200: EXPLORE_EVERY}  # once in its outage
    assert back[:EXPLORE_EVERY] == ["dep-0"] * EXPLORE_EVERY  # explored by the first, then leads
    assert back[EXPLORE_EVERY] in {"dep-1", "dep-2"}  # the next exploration


def test_a_deployment_that_loses_hedge_races_is_measured_slow(
    servers: list[FakeProvider],
) -> None:
    """A hedge race's loser is stopped unanswered and was not measured: a deployment that
    turned slow kept the average of its fast days and led every call, each waiting out
    ``hedge_after`` for the other. It took at least as long as it ran: its average rises."""
    clock = Clock()  # (no drift, no exploration: the averages say what was measured)
    group = _group(servers[:2], clock=clock)
    for name, seconds in (("dep-0", 0.01), ("dep-1", 0.05)) * 2:  # (the first: unmeasured)
        group.observe(name, seconds, failed=False)
    servers[0].always(Fault(latency=1.0))
    with Guard(group, environ={}, hedge_after=0.1) as guard:
        routes = [guard.chat(USER).route for _ in range(6)]
    assert routes == ["dep-1"] * 6
    assert servers[0].stats.requests == 1  # lost one race, then ranked after dep-1
    assert (group.latencies()["dep-0"] or 0.0) >= 0.1


def test_a_deployment_without_a_sibling_left_for_the_call_is_retried(
    servers: list[FakeProvider],
) -> None:
    """A failure moved the call on without a retry whenever the group had another deployment
    not failed yet, even one the call would never try (a tier naming one deployment of a
    group): a transient 503 went to the chain's next route, or failed the call."""
    from llmguard_sdk import TaskRouter

    a, b, c = (
        OpenAICompatibleProvider(s.base_url, model="fake-model", name=s.name) for s in servers
    )
    group = DeploymentGroup("g", [a, b], strategy="ordered")
    tasks = TaskRouter(tiers={"one": ["dep-0", "dep-2"]}, default="one")
    with Guard([group, c], environ={}, tasks=tasks) as guard:
        servers[0].script(Fault(status=503))
        assert guard.chat(USER).route == "dep-0"  # retried, as any route
    assert [s.stats.requests for s in servers] == [2, 0, 0]
    with Guard([group, c], environ={}, tasks=tasks, retry=None) as guard:
        servers[0].script(Fault(status=503))
        assert guard.chat(USER).route == "dep-2"  # no retries: the tier's next route


@pytest.mark.parametrize("strategy", ["latency", "round_robin", "least_outstanding", "ordered"])
def test_weights_for_another_strategy_are_refused_in_code_as_in_a_file(strategy: str) -> None:
    """A configuration file refused them; in code they were taken and never used (LiteLLM's
    ``weight`` shapes its default strategy: here only ``weighted`` reads them)."""
    with pytest.raises(ConfigurationError, match="weights are for strategy='weighted'"):
        DeploymentGroup("g", _named("a", "b"), strategy=strategy, weights=[3.0, 1.0])  # type: ignore[arg-type]
    deployment = {"model": "vllm/m", "base_url": "http://127.0.0.1:9/v1"}
    group = {"group": "g", "strategy": strategy, "weights": [3, 1]}
    routes = [{**group, "deployments": [{**deployment, "name": n} for n in "ab"]}]
    with pytest.raises(ConfigurationError, match=r"routes\.0: weights are for strategy="):
        Guard.from_config({"routes": routes}, environ={})
