"""The headroom and cheapest strategies and region preference: the pure ranking, then groups
in a Guard against FakeProviders."""

from __future__ import annotations

import datetime
import math

import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    ConfigurationError,
    ContextLengthExceededError,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
    RequestValidationError,
)
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.router import Strategy
from llmguard_sdk.router.fit import (
    Headroom,
    by_region,
    exhausted,
    fits,
    headroom_from,
    needs,
    rank_by_cost,
    rank_by_headroom,
    share_at,
)
from llmguard_sdk.router.groups import CallFacts
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_router import Clock, _named


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


def test_anthropic_headroom_is_kept_until_its_rfc3339_reset() -> None:
    anthropic = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "5",
        "anthropic-ratelimit-requests-reset": "2027-01-15T08:05:00Z",
        "anthropic-ratelimit-tokens-limit": "1000",
        "anthropic-ratelimit-tokens-remaining": "500",
        "anthropic-ratelimit-tokens-reset": "2027-01-15T08:02:00+00:00",
    }
    wall = datetime.datetime(2027, 1, 15, 8, 0, tzinfo=datetime.timezone.utc).timestamp()
    # read at 08:00 (wall clock), kept until the later reset, 5 minutes on (group clock)
    assert headroom_from(anthropic, 10.0, wall=wall) == Headroom(0.1, 310.0)
    passed = {**anthropic, "anthropic-ratelimit-requests-reset": "2027-01-15T07:00:00Z"}
    assert headroom_from(passed, 10.0, wall=wall) == Headroom(0.1, 130.0)  # one reset passed


def test_a_group_keeps_anthropic_headroom_past_a_minute() -> None:
    clock = Clock()
    group = DeploymentGroup("g", _named("a", "b"), strategy="headroom", clock=clock)
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=10)
    group.learn_headroom(
        "a",
        {
            "anthropic-ratelimit-requests-limit": "100",
            "anthropic-ratelimit-requests-remaining": "10",
            "anthropic-ratelimit-requests-reset": soon.isoformat(),
        },
    )
    group.learn_headroom(
        "b", {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "50"}
    )
    assert [d.name for d in group.ranked()] == ["b", "a"]
    clock.now += 61.0  # b's counters reset (no reset said: a minute); a's have not
    assert [group.ranked()[0].name for _ in range(4)] == ["b"] * 4


@pytest.mark.parametrize("garbage", ["1_0", "\u0661\u0660", "nan", "-5", "inf"])
def test_headroom_reads_counts_as_the_rate_limiter_does(garbage: str) -> None:
    """The group read remaining counts with float(), which takes "1_0" and Arabic-Indic
    digits that the rate limiter (and every other header parser) refuses as garbage."""
    headers = {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": garbage}
    assert headroom_from(headers, 0.0) is None
    limit = {"x-ratelimit-limit-requests": garbage, "x-ratelimit-remaining-requests": "10"}
    assert headroom_from(limit, 0.0) is None


def test_a_bogus_wait_hint_leaves_a_deployment_no_headroom_an_hour_at_most() -> None:
    assert exhausted(1e9, 5.0) == Headroom(0.0, 3605.0)
    assert exhausted(math.inf, 5.0) == Headroom(0.0, 3605.0)
    assert headroom_from(
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1e9"}, 5.0
    ) == Headroom(0.0, 3605.0)
    clock = Clock()
    group = DeploymentGroup("g", _named("a", "b"), strategy="headroom", clock=clock)
    group.learn_headroom("a", None, pause_s=1e9, limited=True)
    clock.now += 3600.0
    assert {group.ranked()[0].name for _ in range(4)} == {"a", "b"}  # a leads again


# a dear input and cheap output, b the other way round
OPPOSITE_PRICES = PriceTable(
    {"a/fake-model": Price(input=10.0, output=1.0), "b/fake-model": Price(input=1.0, output=10.0)}
)


def _cheapest_pair_with_long_answers() -> DeploymentGroup:
    routes = [
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="fake-model", name=n)
        for n in ("a", "b")
    ]
    group = DeploymentGroup("g", routes, strategy="cheapest")
    group.observe("a", 1.0, failed=False, tokens=1000)  # answers run to 1000 tokens
    return group


def test_cheapest_prices_the_answer_length_the_group_saw_from_its_first_answer() -> None:
    group = _cheapest_pair_with_long_answers()
    facts = CallFacts(input_tokens=200.0, prices=OPPOSITE_PRICES)
    # 200 in, 1000 out: a costs 3000, b 10200 (taken as 100 out, b was the cheaper)
    assert [group.ranked(facts)[0].name for _ in range(3)] == ["a"] * 3


def test_cheapest_prices_no_more_output_than_the_call_allows() -> None:
    """With the group's typical answer learnt (1000 tokens), a call allowing 5 was priced as
    if it would get 1000, and went where output is cheap and input dear."""
    group = _cheapest_pair_with_long_answers()
    short = ChatRequest.model_validate({"messages": [USER[0]], "max_tokens": 5})
    facts = CallFacts(request=short, input_tokens=200.0, prices=OPPOSITE_PRICES)
    # 200 in, 5 out at most: a costs 2005, b 250
    assert [group.ranked(facts)[0].name for _ in range(3)] == ["b"] * 3


def test_cheapest_counts_a_deployments_per_request_fee() -> None:
    """Tokens half the price and a fee per request ($0.012, Perplexity's ``sonar``): it was
    ranked the cheaper for a call of 200 tokens in and 100 out ($0.00015 against $0.0123)."""
    routes = [
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="fake-model", name=n)
        for n in ("a", "b")
    ]
    group = DeploymentGroup("g", routes, strategy="cheapest")
    prices = PriceTable(
        {
            "a/fake-model": Price(input=1.0, output=1.0),
            "b/fake-model": Price(input=0.5, output=0.5, per_request=0.012),
        }
    )
    short = ChatRequest.model_validate({"messages": [USER[0]], "max_tokens": 100})
    facts = CallFacts(request=short, input_tokens=200.0, prices=prices)
    assert [group.ranked(facts)[0].name for _ in range(3)] == ["a"] * 3


def test_headroom_ranks_most_left_first_and_ties_go_round() -> None:
    assert rank_by_headroom([0.2, 0.9, 0.5], 0) == [1, 2, 0]
    assert [rank_by_headroom([1.0, 1.0, 1.0], t)[0] for t in range(3)] == [0, 1, 2]


def test_cheapest_ranks_those_that_fit_by_price_then_the_others() -> None:
    assert rank_by_cost([3.0, 1.0, 2.0], [True, False, True], 0) == [2, 0, 1]
    assert [rank_by_cost([1.0, 1.0], [True, True], t)[0] for t in range(2)] == [0, 1]
    small = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="small")
    small.context_window = 1000
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
    assert by_region(regions, "eu") == [[1], [0, 2, 3]]
    assert by_region(regions, "us") == [[0, 2], [1, 3]]
    assert by_region(regions, None) == [[0, 1, 2, 3]]
    assert by_region(["us", "us"], "ap") == [[], [0, 1]]  # none there: all failover


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
    routes[1].context_window = 20
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


_US_EU_US = {"dep-0": "us", "dep-1": "eu", "dep-2": "us"}


@pytest.mark.parametrize("strategy", ["round_robin", "headroom"])
def test_the_strategy_shares_calls_within_the_callers_region(
    servers: list[FakeProvider], strategy: Strategy
) -> None:
    """The strategy ranked every deployment, then the caller's region was moved first: a call
    whose turn fell on another region's deployment went to the caller's region's first one,
    which took two calls in three (round robin over us, eu, us: 20 and 40 of 60). The
    caller's region is ranked by the strategy on its own, then the others."""
    group = DeploymentGroup("m", _routes(servers), strategy=strategy, regions=_US_EU_US)
    with Guard(group, environ={}) as guard:
        routes = [guard.chat(USER, region="us").route for _ in range(60)]
    assert (routes.count("dep-0"), routes.count("dep-2")) == (30, 30)


def test_weights_are_honoured_within_the_callers_region() -> None:
    """A draw that fell on another region's deployment went to the heaviest of the caller's:
    equal weights gave the caller's two deployments two thirds and one third."""
    group = DeploymentGroup(
        "m", _named("a", "b", "c"), strategy="weighted", weights=[1, 1, 1], seed=5,
        regions={"a": "us", "b": "eu", "c": "us"},
    )  # fmt: skip
    firsts = [group.ranked(CallFacts(region="us"))[0].name for _ in range(3000)]
    assert firsts.count("b") == 0
    assert min(firsts.count("a"), firsts.count("c")) > 1350  # 1,500 each (drawn)


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


_WIDE = [{"role": "user", "content": "hello world " * 100}]  # gpt-4: ~200 tokens; gpt-4o: ~1,200


@pytest.mark.usefixtures("o200k_offline")
@pytest.mark.parametrize("first", ["gpt-4o", "gpt-4-0613"])
def test_a_routes_context_window_holds_the_request_as_its_own_model_counts_it(first: str) -> None:
    """A route's ``context_window`` was checked against the call's count, taken for the first
    route's model: a gpt-4 route (600 tokens of context) behind gpt-4o was skipped for
    gpt-4o's 1,200 tokens, and a gpt-4o route behind gpt-4 was sent 1,200 tokens its 600 do
    not hold. Each route is checked with its own model's count."""
    second = "gpt-4-0613" if first == "gpt-4o" else "gpt-4o"
    with FakeProvider(model=first, name="first") as down, FakeProvider(model=second) as other:
        down.always(Fault(status=503))
        routes = [
            OpenAICompatibleProvider(down.base_url, model=first, name="first"),
            OpenAICompatibleProvider(
                other.base_url, model=second, name="second", context_window=600
            ),
        ]
        # max_input_tokens: the call counts as its first route's model
        with Guard(routes, retry=None, max_input_tokens=5_000, environ={}) as guard:
            if second == "gpt-4-0613":
                assert guard.chat(_WIDE, max_tokens=10).route == "second"
                return
            with pytest.raises(AllRoutesFailedError) as caught:
                guard.chat(_WIDE, max_tokens=10)
        assert other.stats.requests == 0
    skipped = caught.value.errors["second"]
    assert isinstance(skipped, ContextLengthExceededError)
    assert not skipped.request_sent
    assert "needs about 1216 tokens" in str(skipped)


def test_a_route_counting_with_the_calls_encoding_takes_the_calls_count(
    counted_models: list[str | None],
) -> None:
    """Models "small-model" (an estimate) and gpt-4 (exact) both count with cl100k_base: the
    gpt-4 route's context check takes the call's count (exact now) rather than encode the request
    again for it."""
    with FakeProvider() as down, FakeProvider() as other:
        down.always(Fault(status=503))
        routes = [
            OpenAICompatibleProvider(down.base_url, model="small-model", name="first"),
            OpenAICompatibleProvider(other.base_url, model="gpt-4-0613", context_window=100),
        ]
        guard = Guard(
            routes, retry=None, max_input_tokens=1_000, environ={}
        )  # 1,206 bytes: counted
        with guard, pytest.raises(AllRoutesFailedError, match="needs about 2"):
            guard.chat(_WIDE, max_tokens=10)
        assert other.stats.requests == 0
    assert counted_models == ["small-model"]  # the size check's count, once


@pytest.mark.usefixtures("o200k_offline")
@pytest.mark.parametrize(
    ("call_model", "prices", "window", "encoded"),
    [
        # counted as cl100k_base (~200 tokens), "wide" looked 3 times cheaper; as gpt-4o
        # counts it (~1,200 tokens) it is twice as dear as "narrow"
        (None, {"wide": 1.0, "narrow": 3.0}, None, [None, "gpt-4o"]),
        # counted as gpt-4o (~1,200 tokens), "narrow" (300 tokens of context) looked too small
        # and went last; its gpt-4 counts ~200: it holds the call and is the cheapest
        ("gpt-4o", {"wide": 3.0, "narrow": 1.0}, 300, [None, "gpt-4-0613"]),
    ],
)
def test_cheapest_prices_and_fits_each_deployment_with_its_own_models_count(
    counted_models: list[str | None],
    call_model: str | None,
    prices: dict[str, float],
    window: int | None,
    encoded: list[str | None],
) -> None:
    """``cheapest`` ranked every deployment with one count of the call: a gpt-4o deployment
    (o200k_base) and a gpt-4 one (cl100k_base) count the same request differently. Each
    encoding takes the request once a call (the call's count, listed as None, is for the
    request's model): a deployment counting with the call's encoding reuses its count."""
    with (
        FakeProvider(model="gpt-4o", name="wide") as wide,
        FakeProvider(model="gpt-4-0613", name="narrow") as narrow,
    ):
        routes = [
            OpenAICompatibleProvider(wide.base_url, model="gpt-4o", name="wide"),
            OpenAICompatibleProvider(
                narrow.base_url, model="gpt-4-0613", name="narrow", context_window=window
            ),
        ]
        table = PriceTable(
            {
                "wide/gpt-4o": Price(input=prices["wide"], output=0.0),
                "narrow/gpt-4-0613": Price(input=prices["narrow"], output=0.0),
            }
        )
        group = DeploymentGroup("m", routes, strategy="cheapest")
        with Guard(group, environ={}, prices=table, retry=None) as guard:
            answers = [guard.chat(_WIDE, max_tokens=10, model=call_model) for _ in range(2)]
        assert [a.route for a in answers] == ["narrow"] * 2
        assert wide.stats.requests == 0
    assert counted_models == encoded * 2


@pytest.mark.parametrize("window", [True, 8192.0, "8k", 0, -1])
def test_a_context_window_that_is_no_whole_number_is_refused_as_the_guard_is_built(
    window: object,
) -> None:
    """A custom provider's ``context_window`` of the wrong kind: the route loop read a bool
    (True) as a window of one token (every call skipped the route), a string raised
    TypeError mid-call, and after that the window was taken for unknown without a word. The
    Guard now refuses it as it is built, naming the route (the ranking's own reading,
    ``providers.base.context_window()``, still takes it for unknown)."""
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="fake-model", name="only")
    route.context_window = window  # type: ignore[assignment]
    if not isinstance(window, int) or isinstance(window, bool):
        assert fits(route, 10**6, ())  # the ranking: no window known
    with pytest.raises(ConfigurationError, match="route 'only': context_window must be"):
        Guard(route, retry=None, environ={})


class _OwnTokenizer(OpenAICompatibleProvider):
    """A route with its own tokenizer (as a local model has), counting how often it is asked."""

    def __init__(self, *args: object, answer: int | None = 40, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.counts = 0
        self.answer = answer

    def count_tokens(self, request: ChatRequest) -> int | None:
        self.counts += 1
        return self.answer  # (None: its tokenizer cannot count this request)


def test_a_routes_own_tokenizer_counts_a_call_once() -> None:
    """A route with its own ``count_tokens`` and a ``context_window`` under a rate limit: its
    size check and its reservation each tokenized the request (no cache), twice a call."""
    from llmguard_sdk import RateLimit

    with FakeProvider() as server:
        route = _OwnTokenizer(server.base_url, model="m", name="own", context_window=1000)
        limits = {"own": RateLimit(input_tpm=10**6)}
        with Guard([route], retry=None, rate_limits=limits, environ={}) as guard:
            guard.chat(USER, max_tokens=10)
            assert route.counts == 1
            guard.chat(USER, max_tokens=10)
            assert route.counts == 2  # once per call: a call's request is its own


def test_a_tokenizer_that_cannot_count_is_asked_once_a_call_too() -> None:
    """A local model's ``count_tokens`` says None when its chat template fails: the call fell
    back to tiktoken but asked the tokenizer again at each stage (the size check, the
    reservation), as nothing was kept."""
    from llmguard_sdk import RateLimit

    with FakeProvider() as server:
        route = _OwnTokenizer(
            server.base_url, model="m", name="own", context_window=1000, answer=None
        )
        limits = {"own": RateLimit(input_tpm=10**6)}
        with Guard([route], retry=None, rate_limits=limits, environ={}) as guard:
            guard.chat(USER, max_tokens=10)
            assert route.counts == 1
