"""Releases: what a bad setting or a bad score gets (a typed error, nothing counted)."""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.errors import ConfigurationError, RequestValidationError
from llmguard_sdk.models import ChatRequest, Message
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan, ShadowPolicy, Stage
from llmguard_sdk.testing import FakeProvider

from .test_telemetry import Exported, exporting

otel = pytest.fixture(exporting, name="otel")
USER = [{"role": "user", "content": "hi"}]
ROUTE = OpenAICompatibleProvider("http://127.0.0.1:9", model="m-2025-01-01", name="a")


def _route(fake: FakeProvider, name: str, model: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, model=model, name=name)


@pytest.mark.parametrize(
    "parameters",
    [
        {"temperature": 5.0},
        {"max_tokens": -3},
        {"max_tokens": "many"},
        {"top_p": 1.5},
        {"stop": ["a", "b", "c", "d", "e"]},
    ],
)
def test_a_release_refuses_parameters_a_request_could_not_carry(parameters: Any) -> None:
    """A release's parameters were never validated: apply() copied them into the request
    unchecked (a temperature of 5, a negative max_tokens went to the provider)."""
    with pytest.raises(ConfigurationError, match="parameters"):
        Release("bot", "v1", ROUTE, parameters=parameters)


def test_a_release_applies_its_parameters_as_a_request_holds_them() -> None:
    # (numbers are strict since requests are: an int temperature is held as a float)
    release = Release("bot", "v1", ROUTE, parameters={"temperature": 1, "max_tokens": 7})
    request = release.apply(ChatRequest(messages=[Message(role="user", content="hi")]))
    assert (request.temperature, request.max_tokens) == (1.0, 7)
    assert isinstance(release.parameters["temperature"], float)
    assert release.parameters == {"temperature": 1.0, "max_tokens": 7}


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, True, "30"])
def test_a_shadow_refuses_a_timeout_its_calls_could_not_take(timeout: Any) -> None:
    """The timeout was never checked: every shadow call then failed its own validation
    (counted as a candidate error, no pair ever compared), and an infinite one made
    ``Guard.close()`` raise OverflowError joining the worker (routes left open)."""
    with pytest.raises(ConfigurationError, match="timeout"):
        ShadowPolicy(timeout=timeout)


@pytest.mark.parametrize(
    ("score", "label"),
    [(math.nan, None), (math.inf, None), ("good", None), (None, None), (0.0, 5)],
)
def test_a_bad_feedback_score_is_refused_before_the_canary_counts_it(
    score: Any, label: Any, otel: Exported
) -> None:
    """The canary counted any score (NaN as a good one; a string raised TypeError) before
    telemetry refused it, and a good score whose label telemetry then refused."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        current = Release("bot", "v1", _route(a, "a", "fake-a-2025-01-01"))
        candidate = Release("bot", "v2", _route(b, "b", "fake-b-2025-02-01"))
        policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
        plan = ReleasePlan(current, candidate=candidate, canary=policy)
        guard = Guard(release=plan, environ={}, telemetry=otel.telemetry)
        try:
            controls = guard.releases
            assert controls is not None
            controls.start_now()
            answer = guard.chat([{"role": "user", "content": "hi"}], user="u1")
            with pytest.raises(RequestValidationError, match=r"score|label"):
                guard.feedback(answer.metadata["call_id"], score, label=label)
            assert guard.feedback(answer.metadata["call_id"], 1.0) is True
            controls.flush()
            status = controls.status()
        finally:
            guard.close()
    counted = status["control"]["feedback_scores"] + status["candidate"]["feedback_scores"]
    assert counted == 1  # the good score only


@pytest.mark.parametrize(
    "setting",
    [
        {"ratio": math.inf},
        {"feedback_threshold": math.nan},
        {"feedback_threshold": "0.5"},
        {"min_calls": True},
    ],
)
def test_a_canary_policy_refuses_settings_that_disable_its_test(setting: Any) -> None:
    """``ratio=inf`` made every log likelihood ratio NaN (a failing candidate was never
    rolled back); a NaN threshold counted no score as low; ``min_calls=True`` promoted a
    stage after one call."""
    with pytest.raises(ConfigurationError):
        CanaryPolicy(**setting)


@pytest.mark.parametrize("setting", [{"hooks": print}, {"warn_days": "30"}, {"retirements": None}])
def test_a_release_plan_refuses_settings_of_the_wrong_kind(setting: Any) -> None:
    """A single hook raised TypeError; ``retirements=None`` made the Guard raise
    AttributeError at its start, and a text ``warn_days`` TypeError once a model retired."""
    with pytest.raises(ConfigurationError):
        ReleasePlan(Release("bot", "v1", ROUTE), **setting)


def test_a_canary_stage_at_full_share_is_promoted() -> None:
    """At a share of 1.0 the candidate serves every call on the control arm, so the canary
    arm never reaches ``min_calls``: a stage there (``stages=(1.0,)``, or a CLI whose
    ``--stages`` differ from the Guard's) stayed ``canary`` for good and never resolved."""
    from llmguard_sdk.releases.policy import decide

    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=10)
    control = {"calls": 100.0}
    decision = decide(Stage(index=1, candidate="c"), control, {}, policy)
    assert decision is not None
    assert decision.action == "promote"
    assert decide(Stage(index=0, candidate="c"), control, {}, policy) is None  # 0.5: wait


def test_a_single_full_stage_canary_ends_promoted() -> None:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        current = Release("bot", "v1", _route(a, "a", "fake-a-2025-01-01"))
        candidate = Release("bot", "v2", _route(b, "b", "fake-b-2025-02-01"))
        policy = CanaryPolicy(stages=(1.0,), flush_interval=60.0, min_calls=5)
        plan = ReleasePlan(current, candidate=candidate, canary=policy)
        guard = Guard(release=plan, environ={}, telemetry=False)
        try:
            controls = guard.releases
            assert controls is not None
            controls.start_now()
            routes = [guard.chat(USER, user=f"u{i}").route for i in range(10)]
            stage = controls.flush()
        finally:
            guard.close()
    assert routes == ["b"] * 10
    assert stage is not None
    assert stage.status == "promoted"


def test_a_user_id_with_a_lone_surrogate_is_served_under_a_canary() -> None:
    """A plain Guard serves ``user="\\ud800"`` (JSON can decode one); a canary's sticky hash
    encoded the id strictly and the call failed with UnicodeEncodeError."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        current = Release("bot", "v1", _route(a, "a", "fake-a-2025-01-01"))
        candidate = Release("bot", "v2", _route(b, "b", "fake-b-2025-02-01"))
        policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0)
        plan = ReleasePlan(current, candidate=candidate, canary=policy)
        guard = Guard(release=plan, environ={}, telemetry=False)
        try:
            assert guard.releases is not None
            guard.releases.start_now()
            routes = {guard.chat(USER, user="\ud800").route for _ in range(5)}
        finally:
            guard.close()
    assert len(routes) == 1  # sticky: one arm, every time


@pytest.mark.parametrize(
    "setting",
    [
        {"alpha": "0.01"},
        {"ratio": None},
        {"min_control": "5"},
        {"min_control": 0.5},
        {"latency_tolerance": "2"},
        {"cost_tolerance": None},
        {"latency_quantile": math.nan},
        {"flush_interval": "1"},
        {"stages": 0.5},
        {"stages": "1"},
        {"stages": (0.5, "1")},
        {"auto": "no"},
    ],
)
def test_a_canary_policy_names_a_setting_of_the_wrong_kind(setting: Any) -> None:
    """A text or None number raised TypeError ('<' not supported ...), ``stages=0.5``
    TypeError ('float' object is not iterable); ``stages="1"`` was taken as one stage and
    ``auto="no"`` as true (the canary decided by itself)."""
    name = next(iter(setting))
    with pytest.raises(ConfigurationError, match=name):
        CanaryPolicy(**setting)


@pytest.mark.parametrize(
    "setting",
    [
        {"share": "0.1"},
        {"share": None},
        {"max_queue": 2.5},
        {"rate_per_s": "5"},
        {"max_cost_usd": math.nan},
        {"max_cost_usd": "1"},
        {"comparators": [len]},
        {"segment": "feature"},
        {"seed": "s"},
    ],
)
def test_a_shadow_policy_names_a_setting_of_the_wrong_kind(setting: Any) -> None:
    """``max_cost_usd=nan`` turned the spend cap off (no spend compares above NaN); text
    numbers raised TypeError, a list of comparators AttributeError, and a text ``segment``
    was accepted (each shadowed call then failed calling it)."""
    name = next(iter(setting))
    with pytest.raises(ConfigurationError, match=name):
        ShadowPolicy(**setting)


def test_a_release_plan_refuses_a_canary_or_shadow_that_is_no_policy() -> None:
    """``canary="x"`` (or a shadow given as a dict) built a Guard whose first call raised
    AttributeError deep in the call path; a bad key or clock failed only later as well."""
    release, candidate = Release("bot", "v1", ROUTE), Release("bot", "v2", ROUTE)
    bad: list[dict[str, Any]] = [
        {"canary": "x"},
        {"shadow": {"share": 0.1}},
        {"canary": CanaryPolicy(), "key": 5},
        {"canary": CanaryPolicy(), "key": ""},
        {"clock": 5},
    ]
    for setting in bad:
        name = next(iter(setting)) if "key" not in setting else "key"
        with pytest.raises(ConfigurationError, match=name):
            ReleasePlan(release, candidate=candidate, **setting)


@pytest.mark.parametrize("setting", [{"system_prompt": 5}, {"prompt_version": ["v1"]}])
def test_a_release_refuses_a_system_prompt_or_prompt_version_that_is_no_text(
    setting: Any,
) -> None:
    """A number as the system prompt was accepted, and every call of the release then failed
    validating its system message; a list as the prompt version went to telemetry."""
    with pytest.raises(ConfigurationError, match=next(iter(setting))):
        Release("bot", "v1", ROUTE, **setting)


def test_retirement_warnings_keep_no_mark_of_earlier_days() -> None:
    """A model retiring soon was warned about once a day, and each day's mark was kept for
    good (a long-lived process gathered one per model per day)."""
    import datetime as dt

    from llmguard_sdk.budget.prices import Price, PriceTable
    from llmguard_sdk.releases import ReleaseEvent

    events: list[ReleaseEvent] = []
    model = "fake-a-2025-01-01"
    table = PriceTable().with_prices({model: Price(1.0, 1.0, retires_on=dt.date(2026, 3, 1))})
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model=model, name="a")
    start = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc).timestamp()
    now = [start]
    plan = ReleasePlan(
        Release("bot", "v1", route), hooks=[events.append], prices=table, clock=lambda: now[0],
        warn_days=90,
    )  # fmt: skip
    guard = Guard(release=plan, environ={}, telemetry=False)
    try:
        controls = guard.releases
        assert controls is not None
        for day in range(40):
            now[0] = start + day * 86400
            controls.check_retirements()
            controls.check_retirements()  # the same day: no second warning
        assert len(controls._warned) == 1  # today's mark only
    finally:
        guard.close()
    assert len(events) == 40  # once a day, every day
    assert {e.day for e in events} == {dt.date(2026, 3, 1)}


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        ({"retirements": {"m-2025-01-01": "2026-01-01"}}, "retirements"),
        ({"retirements": {5: dt.date(2026, 1, 1)}}, "retirements"),
        ({"prices": "table"}, "prices"),
    ],
)
def test_a_release_plan_refuses_retirements_and_prices_of_the_wrong_kind(
    setting: Any, name: str
) -> None:
    """A retirement day given as text made ``Guard(release=...)`` raise TypeError as it
    checked for retiring models; a price table that is none, AttributeError."""
    with pytest.raises(ConfigurationError, match=name):
        ReleasePlan(Release("bot", "v1", ROUTE), **setting)


def test_a_retirement_given_as_a_datetime_is_warned_about_on_its_day() -> None:
    """A ``datetime`` (a ``date`` too) made the Guard raise TypeError subtracting a date."""
    events: list[Any] = []
    plan = ReleasePlan(
        Release("bot", "v1", ROUTE),
        retirements={"m-2025-01-01": dt.datetime(2026, 1, 10, 15, 30)},
        hooks=[events.append],
        clock=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp(),
    )
    with Guard(release=plan, environ={}, telemetry=False):
        pass
    assert [(e.kind, e.day) for e in events] == [("retiring", dt.date(2026, 1, 10))]


def test_a_release_refuses_an_allow_alias_that_is_no_bool() -> None:
    """``allow_alias="no"`` was true: a moving alias was let through."""
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model="gpt-4o", name="openai")
    with pytest.raises(ConfigurationError, match="allow_alias"):
        Release("bot", "v1", route, allow_alias="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("call_id", [["a-call"], None, 7])
def test_a_feedback_call_id_that_is_no_string_is_refused_with_telemetry_off(
    call_id: Any,
) -> None:
    """With telemetry on, ``guard.feedback()`` refused a call id that is no string with a
    RequestValidationError; off, the canary looked it up as it was: a list raised a bare
    TypeError (unhashable), None or a number read as an unknown call."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        plan = ReleasePlan(
            Release("bot", "v1", _route(a, "a", "fake-a-2025-01-01")),
            candidate=Release("bot", "v2", _route(b, "b", "fake-b-2025-02-01")),
            canary=CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0),
        )
        guard = Guard(release=plan, environ={}, telemetry=False)
        with guard, pytest.raises(RequestValidationError, match="call_id"):
            guard.feedback(call_id, 1.0)


@pytest.mark.parametrize("now", ["now", math.nan, math.inf, None, True, 1.8e12])
@pytest.mark.parametrize("canary", [False, True])
def test_a_guard_names_a_release_clock_that_tells_no_time(now: Any, canary: bool) -> None:
    """A ``ReleasePlan(clock=...)`` returning text raised a bare TypeError as the Guard was
    built (reading the day for retirement warnings), NaN a ValueError, infinity an
    OverflowError, milliseconds (``time.time() * 1000``, 1.8e12) a ValueError about year 55000."""
    current = Release("bot", "v1", ROUTE)
    plan = (
        ReleasePlan(current, Release("bot", "v2", ROUTE), canary=CanaryPolicy(), clock=lambda: now)
        if canary
        else ReleasePlan(current, clock=lambda: now)
    )
    with pytest.raises(ConfigurationError, match=r"clock must return Unix seconds.*got"):
        Guard(release=plan, environ={}, telemetry=False)


def test_a_memory_release_backend_refuses_a_clock_that_is_no_callable() -> None:
    from llmguard_sdk.releases import MemoryReleaseBackend

    with pytest.raises(ConfigurationError, match="clock"):
        MemoryReleaseBackend(clock=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "given"),
    [
        (lambda: CanaryPolicy(stages=(5, 25, 100)), "(5.0, 25.0, 100.0)"),
        (lambda: CanaryPolicy(stages=(0.05, 1.5)), "(0.05, 1.5)"),
        (lambda: ShadowPolicy(share=5), "share 5"),
    ],
)
def test_shares_given_as_percents_are_refused_naming_them(build: Any, given: str) -> None:
    """``stages=(5, 25, 100)`` ("5 % -> 25 % -> 100 %") and ``ShadowPolicy(share=5)`` were
    refused without the value given (the shadow's message listed three settings at once); the
    message names it and says a share is a fraction."""
    with pytest.raises(ConfigurationError) as raised:
        build()
    assert given in str(raised.value)
    assert "5 % is 0.05" in str(raised.value)


def test_a_canary_that_cannot_price_its_candidate_says_its_cost_check_is_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A candidate's model without a price gave its calls no cost: the canary's ``costly``
    check had nothing to compare and never tripped, however dear the candidate, and nothing
    said so. The Guard says so as it is built, naming the route and model (the control's
    too: without its median cost there is nothing to compare with)."""
    priced = OpenAICompatibleProvider("http://127.0.0.1:9", model="a-2025-01-01", name="a")
    also = OpenAICompatibleProvider("http://127.0.0.1:9", model="a-2025-01-01", name="c")
    unpriced = OpenAICompatibleProvider("http://127.0.0.1:9", model="b-2025-01-01", name="b")
    table = PriceTable({"a-2025-01-01": Price(input=1.0, output=1.0)})

    def build(current: OpenAICompatibleProvider, candidate: OpenAICompatibleProvider) -> list[str]:
        caplog.clear()
        plan = ReleasePlan(
            Release("bot", "v1", current),
            candidate=Release("bot", "v2", candidate),
            canary=CanaryPolicy(),
        )
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            Guard(release=plan, environ={}, prices=table, telemetry=False).close()
        return [r.getMessage() for r in caplog.records if "cost_tolerance" in r.getMessage()]

    (said,) = build(priced, unpriced)
    assert "b/b-2025-01-01" in said
    (said,) = build(unpriced, priced)
    assert "b/b-2025-01-01" in said
    assert build(priced, also) == []
