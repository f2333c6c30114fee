"""Releases: pinned model ids, retirement warnings, the canary's sequential test and stages
(memory and a real Redis shared by two Guards), telemetry labels, shadow traffic, the CLI."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.cli import main
from llmguard_sdk.errors import ConfigurationError, MovingModelAliasError
from llmguard_sdk.releases import (
    CanaryPolicy,
    Release,
    ReleaseControl,
    ReleaseEvent,
    ReleasePlan,
    ShadowPolicy,
    Stage,
    is_moving_alias,
)
from llmguard_sdk.releases.backends import Exchange, MemoryReleaseBackend
from llmguard_sdk.releases.policy import Counters, decide, in_canary, observation
from llmguard_sdk.testing import FakeProvider, Fault

from .test_telemetry import Exported, call_span, exporting

otel = pytest.fixture(exporting, name="otel")

USER = [{"role": "user", "content": "hello"}]
PRICES = PriceTable.default_table().with_prices(
    {"fake-a-2025-01-01": Price(input=1.0, output=1.0), "fake-b-2025-02-01": Price(1.0, 1.0)}
)


def provider(fake: FakeProvider, name: str, model: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, model=model, name=name)


@pytest.fixture
def pair() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        yield a, b


def releases(a: FakeProvider, b: FakeProvider) -> tuple[Release, Release]:
    current = Release("bot", "v1", provider(a, "a", "fake-a-2025-01-01"))
    candidate = Release(
        "bot", "v2", provider(b, "b", "fake-b-2025-02-01"), parameters={"temperature": 0.0}
    )
    return current, candidate


# -- releases: pinned ids ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "moving"),
    [
        ("gpt-4o", True),
        ("gpt-4o-latest", True),
        ("claude-sonnet-4-5", True),
        ("gpt-4o-2024-08-06", False),
        ("claude-sonnet-4-5-20250929", False),
        ("gemini-2.0-flash-001", False),
        ("anthropic.claude-3-haiku-20240307-v1:0", False),
        ("mistralai/Mistral-7B-Instruct-v0.3", False),  # a dotted version suffix
        ("qwen2.5-0.5b-instruct-q4_k_m.gguf", False),
        ("gpt-4-0613", False),  # OpenAI's MMDD snapshots were taken for aliases
        ("gpt-3.5-turbo-0125", False),
        ("gpt-4-1106-preview", False),
        ("mistral-large-2407", False),  # Mistral's YYMM versions
        ("gpt-4-turbo-preview", True),
        ("mistral-large-latest", True),
    ],
)
def test_moving_aliases_are_told_from_pinned_ids(model: str, moving: bool) -> None:
    assert is_moving_alias(model) is moving


def test_a_release_refuses_a_moving_alias_unless_allowed() -> None:
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model="gpt-4o", name="openai")
    with pytest.raises(MovingModelAliasError) as caught:
        Release("bot", "v1", route)
    assert (caught.value.model, caught.value.route) == ("gpt-4o", "openai")
    assert isinstance(caught.value, ConfigurationError)
    assert Release("bot", "v1", route, allow_alias=True).id == "bot@v1"
    with pytest.raises(ConfigurationError, match="unknown parameters"):
        Release("bot", "v1", route, allow_alias=True, parameters={"temprature": 0})


def test_a_release_applies_its_prompt_and_parameters(pair: Any) -> None:
    a, _ = pair
    release = Release(
        "bot", "v1", provider(a, "a", "fake-a-2025-01-01"),
        system_prompt="Be brief.", parameters={"max_tokens": 7}, prompt_version="p3",
    )  # fmt: skip
    guard = Guard(release=release, environ={}, telemetry=False)
    try:
        guard.chat(USER)
        guard.chat([{"role": "system", "content": "old"}, *USER], max_tokens=3)
    finally:
        guard.close()
    first, second = (r.body for r in a.requests)
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["max_tokens"] == 7
    assert second["messages"][0]["content"] == "Be brief."
    assert len(second["messages"]) == 2
    assert second["max_tokens"] == 3  # the call's own value wins


# -- retirement ----------------------------------------------------------------------------------


def _day(text: str) -> float:
    return dt.datetime.fromisoformat(text + "T12:00:00+00:00").timestamp()


def test_a_retiring_pinned_model_is_warned_about_before_its_day(
    caplog: pytest.LogCaptureFixture, otel: Exported
) -> None:
    """The shipped table's claude-3-5-sonnet retires 2025-10-22; a user's price may carry
    its own date. The clock is driven: no event 60 days before, one event 20 days before."""
    now = [_day("2025-08-23")]
    events: list[ReleaseEvent] = []
    route = OpenAICompatibleProvider(
        "http://127.0.0.1:9", model="claude-3-5-sonnet-20241022", name="anthropic"
    )
    plan = ReleasePlan(
        Release("bot", "v1", route), hooks=[events.append], warn_days=30, clock=lambda: now[0]
    )
    guard = Guard(release=plan, environ={}, telemetry=otel.telemetry)
    try:
        assert events == []
        now[0] = _day("2025-10-02")
        guard.releases.check_retirements()  # type: ignore[union-attr]
        guard.releases.check_retirements()  # type: ignore[union-attr]  # once a day
    finally:
        guard.close()
    (event,) = events
    assert (event.kind, event.model, event.day) == (
        "retiring", "claude-3-5-sonnet-20241022", dt.date(2025, 10, 22)
    )  # fmt: skip
    assert "in 20 days" in event.detail
    assert any("retires 2025-10-22" in r.getMessage() for r in caplog.records)
    assert sum(p.value for p in otel.points("llmguard.release.events")) == 1


def test_user_supplied_retirements_are_warned_about_at_once() -> None:
    events: list[ReleaseEvent] = []
    table = PriceTable().with_prices(
        {"fake-a-2025-01-01": Price(1.0, 1.0, retires_on=dt.date(2026, 1, 10))}
    )
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model="fake-a-2025-01-01", name="a")
    plan = ReleasePlan(
        Release("bot", "v1", route), hooks=[events.append], prices=table,
        clock=lambda: _day("2026-01-01"),
    )  # fmt: skip
    Guard(release=plan, environ={}, telemetry=False).close()
    assert [e.day for e in events] == [dt.date(2026, 1, 10)]


# -- the policy ----------------------------------------------------------------------------------


def test_canary_membership_is_sticky_and_grows_with_the_share() -> None:
    keys = [f"user-{i}" for i in range(4000)]
    inside = {share: {k for k in keys if in_canary(k, share)} for share in (0.05, 0.25, 1.0)}
    assert inside[0.05] <= inside[0.25] <= inside[1.0] == set(keys)
    assert 0.03 < len(inside[0.05]) / len(keys) < 0.07


def _simulate(rng: random.Random, policy: CanaryPolicy, canary_error: float) -> str:
    """Calls at the stage's share until a decision: errors 1 % on the control."""
    stage, control, canary = Stage(candidate="c"), {}, {}  # type: ignore[var-annotated]
    for _ in range(200_000):
        arm = canary if rng.random() < stage.share(policy) else control
        rate = canary_error if arm is canary else 0.01
        latency = 0.05 * (1 + rng.random())
        for k, v in observation(latency, 1e-4, failed=rng.random() < rate, rejected=False).items():
            arm[k] = arm.get(k, 0.0) + v
        decision = decide(stage, control, canary, policy)
        if decision is None:
            continue
        if decision.action == "rollback":
            return "rolled_back"
        index = stage.index + 1
        if index == len(policy.stages) - 1:
            return "promoted"
        stage, control, canary = Stage(index=index, candidate="c"), {}, {}
    return "undecided"


def test_seeded_healthy_candidates_are_promoted_and_bad_ones_rolled_back() -> None:
    policy = CanaryPolicy(stages=(0.2, 0.5, 1.0), min_calls=300)
    healthy = [_simulate(random.Random(seed), policy, 0.01) for seed in range(20)]
    assert healthy.count("rolled_back") <= 1
    assert healthy.count("promoted") >= 19
    bad = [_simulate(random.Random(seed), policy, 0.2) for seed in range(10)]
    assert bad == ["rolled_back"] * 10


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10**6),
    st.floats(0.0, 0.3),
    st.integers(1, 400),
)
def test_equal_arms_never_breach_on_a_few_calls(seed: int, rate: float, calls: int) -> None:
    """Identical arms stay far from the bound: no breach from chance over a few hundred calls
    (the bound is log(1000); a breach needs a canary that is clearly worse)."""
    rng = random.Random(seed)
    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=10**6)
    arms: list[dict[str, float]] = [{}, {}]
    for _ in range(calls):
        arm = arms[rng.random() < 0.5]
        for k, v in observation(0.01, None, failed=rng.random() < rate, rejected=False).items():
            arm[k] = arm.get(k, 0.0) + v
    decision = decide(Stage(candidate="c"), arms[0], arms[1], policy)
    assert decision is None or decision.metric != "errors" or rate == 0


def test_policy_refuses_bad_settings() -> None:
    with pytest.raises(ConfigurationError):
        CanaryPolicy(stages=(0.5, 0.2, 1.0))
    with pytest.raises(ConfigurationError):
        CanaryPolicy(stages=(0.1, 0.5))
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model="m-2025-01-01", name="r")
    with pytest.raises(ConfigurationError):
        ReleasePlan(Release("a", "v1", route), canary=CanaryPolicy())


# -- the canary in a Guard ------------------------------------------------------------------------


def _canary_guard(
    a: FakeProvider, b: FakeProvider, hooks: Any = (), *, min_calls: int = 40, **options: Any
) -> Guard:
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=min_calls, flush_interval=60.0)
    plan = ReleasePlan(current, candidate=candidate, canary=policy, hooks=hooks)
    # no breaker: its background probes of the failing candidate would add requests to it
    options = {
        "environ": {},
        "prices": PRICES,
        "retry": None,
        "telemetry": False,
        "breaker": None,
        **options,
    }
    return Guard(release=plan, **options)


def _traffic(guard: Guard, calls: int, start: int = 0) -> None:
    for i in range(start, start + calls):
        with contextlib.suppress(Exception):
            guard.chat(USER, user=f"u{i}")


# with ``degraded``, the Guard's answer stood in for the candidate's failures and counted as
# a healthy call (fast, cheap): the candidate was promoted
@pytest.mark.parametrize("options", [{}, {"degraded": "Answers are limited right now."}])
def test_a_failing_candidate_is_rolled_back_and_serves_nothing_after(
    pair: Any, options: dict[str, Any]
) -> None:
    a, b = pair
    b.always(Fault(status=500))
    events: list[ReleaseEvent] = []
    guard = _canary_guard(a, b, hooks=[events.append], **options)
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        _traffic(guard, 60)
        stage = controls.flush()
        assert stage is not None
        assert stage.status == "rolled_back"
        assert "errors breached" in stage.reason
        served_before = len(b.requests)
        assert 10 <= served_before < 60
        _traffic(guard, 40, start=100)
        assert len(b.requests) == served_before  # every call back on the release
    finally:
        guard.close()
    assert [e.kind for e in events] == ["rolled_back"]


def test_a_healthy_candidate_is_promoted_and_the_previous_release_stays_warm(pair: Any) -> None:
    a, b = pair
    guard = _canary_guard(a, b)
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        _traffic(guard, 120)
        stage = controls.flush()
        assert stage is not None
        assert stage.status == "promoted"
        b_before = len(b.requests)
        _traffic(guard, 20, start=500)
        assert len(b.requests) == b_before + 20  # the candidate serves everything
        assert all(r.body.get("temperature") == 0.0 for r in b.requests)
        assert [route.name for route in guard.routes] == ["a", "b"]  # a still a route
        assert controls.rollback().status == "rolled_back"
        a_before = len(a.requests)
        _traffic(guard, 5, start=900)
        assert len(a.requests) == a_before + 5
    finally:
        guard.close()


def test_calls_carry_their_release_and_arm_in_telemetry(pair: Any, otel: Exported) -> None:
    a, b = pair
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=otel.telemetry)
    try:
        assert guard.releases is not None
        guard.releases.start_now()
        user = next(f"u{i}" for i in range(100) if in_canary(f"bot:u{i}", 0.5))
        answer = guard.chat(USER, user=user)
    finally:
        guard.close()
    attributes = dict(call_span(otel).attributes or {})
    assert attributes["llmguard.release"] == "bot@v2"
    assert attributes["llmguard.release.arm"] == "canary"
    assert answer.route == "b"
    labels = [p.attributes for p in otel.points("gen_ai.client.operation.duration")]
    assert any(lab.get("llmguard.release.arm") == "canary" for lab in labels)


def test_feedback_counts_on_the_calls_arm(pair: Any, otel: Exported) -> None:
    a, b = pair
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=otel.telemetry)
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        for i in range(40):
            answer = guard.chat(USER, user=f"u{i}")
            guard.feedback(answer.metadata["call_id"], 0.0 if answer.route == "b" else 1.0)
        controls.flush()
        status = controls.status()
    finally:
        guard.close()
    assert status["candidate"]["low_feedback"] == status["candidate"]["feedback_scores"] > 0
    assert status["control"]["low_feedback"] == 0 < status["control"]["feedback_scores"]


# -- Redis: every process agrees ------------------------------------------------------------


def test_two_guards_sharing_redis_agree_on_the_stage_and_the_cli_moves_it(
    pair: Any, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = pair
    b.always(Fault(status=500))
    guards = [
        _canary_guard(a, b, store=redis_url, key_prefix=redis_prefix, breaker=None)
        for _ in range(2)
    ]
    try:
        first, second = (g.releases for g in guards)
        assert first is not None
        assert second is not None
        first.start_now()
        second.start_now()
        for i in range(100):  # half the traffic each: neither alone has the evidence
            _traffic(guards[i % 2], 1, start=i)
            if i % 10 == 9:
                first.flush()
                second.flush()
        stage = second.flush()
        assert stage is not None
        assert stage.status == "rolled_back"
        assert first.flush().status == "rolled_back"  # type: ignore[union-attr]
        args = ["bot", "--store", redis_url, "--prefix", redis_prefix, "--stages", "0.5,1"]
        assert main(["release", "status", *args, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["canary"]["status"] == "rolled_back"
        assert report["candidate"]["error_rate"] == 1.0
        assert main(["release", "promote", *args]) == 0  # started again, at its stage
        assert "canary at share 0.5 (stage 0): started again by hand" in capsys.readouterr().out
        assert first.flush().status == "canary"  # type: ignore[union-attr]
        assert main(["release", "promote", *args]) == 0
        assert "promoted" in capsys.readouterr().out
        assert first.flush().status == "promoted"  # type: ignore[union-attr]
        assert main(["release", "status", "nobody", "--store", redis_url]) == 1
    finally:
        for guard in guards:
            guard.close()


def test_counters_wait_out_a_redis_outage_instead_of_being_dropped(
    pair: Any, redis_url: str, redis_prefix: str
) -> None:
    """An exchange during a Redis pause dropped the calls counted since the last one: their
    evidence never reached the canary's counters."""
    import time

    from llmguard_sdk import RedisStore

    a, b = pair
    store = RedisStore(redis_url, key_prefix=redis_prefix, retry_pause=0.2)
    guard = _canary_guard(a, b, store=store)
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        _traffic(guard, 10)
        store.health.failed()  # Redis paused: the exchange waits for it
        assert controls.flush() is not None
        deadline = time.monotonic() + 10.0
        while not store.health.up() and time.monotonic() < deadline:
            time.sleep(0.05)
        controls.flush()
        status = controls.status()
    finally:
        guard.close()
    assert status["control"]["calls"] + status["candidate"]["calls"] == 10


@pytest.mark.parametrize("action", ["status", "promote", "rollback"])
def test_moving_a_canary_by_hand_without_redis_raises_a_typed_error(
    pair: Any, redis_server: Any, action: str
) -> None:
    """``guard.releases.rollback()`` (and ``promote()``, ``status()``) with Redis down raised
    redis-py's own ``ConnectionError``: outside the SDK's error tree, nothing saying whether
    the canary was moved."""
    from llmguard_sdk.errors import StoreUnavailableError

    a, b = pair
    guard = _canary_guard(a, b, store=redis_server.url)
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        redis_server.kill()
        with pytest.raises(StoreUnavailableError, match="Redis"):
            getattr(controls, action)()
        redis_server.start()
        assert controls.status()["canary"]["status"] == "canary"  # nothing was moved
    finally:
        guard.close()


# -- shadow ---------------------------------------------------------------------------------------


def _shadowed(
    a: FakeProvider, b: FakeProvider, policy: ShadowPolicy, calls: int, telemetry: Any
) -> tuple[list[str], dict[str, Any]]:
    """``calls`` calls served by ``a``'s release, shadowed to ``b``'s: (answers, report)."""
    current, candidate = releases(a, b)
    plan = ReleasePlan(current, candidate=candidate, shadow=policy)
    guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=telemetry)
    try:
        texts = [guard.chat([{"role": "user", "content": f"q {i}"}]).text for i in range(calls)]
        shadow = guard.releases.shadow  # type: ignore[union-attr]
        assert shadow is not None
        assert shadow.drain(30.0)
        return texts, shadow.report()
    finally:
        guard.close()


def test_shadow_measures_agreement_and_never_changes_the_answer(otel: Exported) -> None:
    def differs(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        return "other" if int(text.split()[-1]) % 4 == 0 else "same " + text

    with (
        FakeProvider(name="a", reply=lambda b: "same " + b["messages"][-1]["content"]) as a,
        FakeProvider(name="b", reply=differs) as b,
    ):
        policy = ShadowPolicy(share=1.0, rate_per_s=1000, max_queue=1000, max_cost_usd=None)
        texts, report = _shadowed(a, b, policy, 40, otel.telemetry)
    assert texts == [f"same q {i}" for i in range(40)]  # users get the release's answers
    assert report["pairs"] == 40
    assert report["agreement"]["exact"] == pytest.approx(0.75)
    assert report["segments"]["-"]["pairs"] == 40
    assert len(b.requests) == 40
    arms = [
        (span.attributes or {}).get("llmguard.release.arm")
        for span in otel.finished()
        if "llmguard.kind" in (span.attributes or {})
    ]
    assert (arms.count("control"), arms.count("shadow")) == (40, 40)


def _canary_and_shadow(pair: Any, stages: tuple[float, ...]) -> tuple[Guard, ReleaseControl]:
    """A Guard canarying ``pair``'s candidate by hand (``stages``), every call shadowed."""
    current, candidate = releases(*pair)
    canary = CanaryPolicy(stages=stages, flush_interval=60.0, min_calls=10**6)
    shadow = ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=None)
    plan = ReleasePlan(current, candidate=candidate, canary=canary, shadow=shadow)
    guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=False)
    controls = guard.releases
    assert controls is not None
    assert controls.shadow is not None
    controls.start_now()
    return guard, controls


def test_a_promoted_candidate_is_not_shadowed_to_itself(pair: Any) -> None:
    """Once the canary promoted the candidate (it serves every call, on the control arm),
    the shadow copied the candidate's own calls to the candidate: each call paid twice and
    the report compared the candidate with itself."""
    b = pair[1]
    guard, controls = _canary_and_shadow(pair, (0.5, 1.0))
    try:
        assert controls.shadow is not None
        assert controls.promote().status == "promoted"
        served = [guard.chat(USER, user=f"u{i}").route for i in range(5)]
        assert controls.shadow.drain(30.0)
        report = controls.shadow.report()
    finally:
        guard.close()
    assert served == ["b"] * 5
    assert len(b.requests) == 5  # each call once: none copied to the candidate again
    assert (report["offered"], report["pairs"]) == (0, 0)


def test_a_rolled_back_candidate_is_no_longer_shadowed(pair: Any) -> None:
    """A rollback sent every call back to the release, yet the shadow went on copying calls
    to the candidate the canary had just found bad (paying for them up to its cap); a hand
    promotion after the rollback starts it again."""
    guard, controls = _canary_and_shadow(pair, (0.25, 0.5, 1.0))
    try:
        assert controls.shadow is not None
        assert controls.rollback().status == "rolled_back"
        served = [guard.chat(USER, user=f"u{i}").route for i in range(5)]
        assert controls.shadow.drain(30.0)
        after_rollback = controls.shadow.report()["offered"]
        assert controls.promote().status == "canary"
        served_after = [guard.chat(USER, user=f"u{i}") for i in range(40)]
        assert controls.shadow.drain(30.0)
        report = controls.shadow.report()
    finally:
        guard.close()
    assert served == ["a"] * 5
    assert after_rollback == 0
    control_calls = sum(1 for r in served_after if r.route == "a")
    assert 0 < report["offered"] == control_calls  # the release's calls shadowed again


# -- streams, async calls, output filters -------------------------------------------------------


def test_streams_and_async_calls_follow_their_arm(pair: Any) -> None:
    import anyio

    a, b = pair
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=False)
    try:
        assert guard.releases is not None
        guard.releases.start_now()
        inside = next(f"u{i}" for i in range(100) if in_canary(f"bot:u{i}", 0.5))
        outside = next(f"u{i}" for i in range(100) if not in_canary(f"bot:u{i}", 0.5))
        with guard.chat(USER, user=inside, stream=True) as stream:
            "".join(chunk.text for chunk in stream)
        assert stream.response is not None
        assert stream.response.route == "b"

        async def ask() -> str | None:
            answer = await guard.achat(USER, user=outside)
            return answer.route

        assert anyio.run(ask) == "a"
        guard.releases.flush()
        figures = guard.releases.status()
    finally:
        guard.close()
    assert (figures["candidate"]["calls"], figures["control"]["calls"]) == (1, 1)


def test_a_candidate_whose_calls_callers_cut_short_is_rolled_back(pair: Any) -> None:
    """A caller's own timeout (``anyio.fail_after``, ``asyncio.wait_for``, a web server
    cancelling a request) cancels a call that hangs on the candidate: a cancelled call was
    not counted at all, so a candidate that never answered in time was never rolled back.
    Such a call counts as one that took at least as long as it ran.

    The callers' timeout is three times the control's median answer, not a fixed 0.3 s: on
    a loaded machine the control's answers (20 at once) took as long as that (a median of
    0.35 s, a third of them cut too), the canary's were no slower, and it was promoted. Each
    arm has 100 calls: at most half the control's can be slow (above 1.5 times its median),
    and 100 slow canary calls breach whatever the control's spread (81 would; with 60 a
    side, 26 slow control answers on a loaded machine kept the test under its bound). And
    nothing is promoted here (``min_calls`` above the canary's calls): only a breach ends it."""
    import anyio

    a, b = pair
    b.always(Fault(hang=True))  # the candidate never answers (until its server stops)
    events: list[ReleaseEvent] = []
    guard = _canary_guard(a, b, hooks=[events.append], min_calls=1000)
    controls = guard.releases
    assert controls is not None
    users = [f"u{i}" for i in range(200)]
    canary = [user for user in users if in_canary(f"bot:{user}", 0.5)]
    cut_short: list[anyio.CancelScope] = []

    async def hangs(user: str) -> None:
        with anyio.CancelScope() as scope:
            cut_short.append(scope)
            await guard.achat(USER, user=user)

    async def traffic() -> None:
        took: list[float] = []  # the control's answers, one at a time (none waits behind another)
        for user in (user for user in users if user not in canary):
            started = time.monotonic()
            with anyio.fail_after(5):
                await guard.achat(USER, user=user)
            took.append(time.monotonic() - started)
        async with anyio.create_task_group() as group:
            for user in canary:
                group.start_soon(hangs, user)
            with anyio.fail_after(10):  # every canary call under way (at the candidate)
                while b.stats.requests < len(canary):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            # the callers' timeout: slow past doubt (``latency_tolerance`` times the
            # control's median, its buckets 10 % wide: 1.82 times would do)
            await anyio.sleep(max(0.3, 3 * statistics.median(took)))
            for scope in cut_short:
                scope.cancel()

    try:
        controls.start_now()
        anyio.run(traffic)
        stage = controls.flush()
    finally:
        guard.close()
    assert len(cut_short) == len(canary) == 100
    assert all(scope.cancelled_caught for scope in cut_short)  # none answered
    assert stage is not None
    assert stage.status == "rolled_back"
    assert "slow breached" in stage.reason
    assert [e.kind for e in events] == ["rolled_back"]


def test_output_filter_rejections_count_on_the_arm(pair: Any) -> None:
    from llmguard_sdk.errors import GuardrailRejectedError
    from llmguard_sdk.models import ChatResponse

    def no_b(response: ChatResponse) -> None:
        if response.route == "b":
            raise GuardrailRejectedError("not from b")

    a, b = pair
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=40, flush_interval=60.0)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=False, output_filters=[no_b])
    try:
        assert guard.releases is not None
        guard.releases.start_now()
        _traffic(guard, 100)
        stage = guard.releases.flush()
    finally:
        guard.close()
    assert stage is not None
    assert stage.status == "rolled_back"
    assert "rejected breached" in stage.reason


@pytest.mark.parametrize(
    ("policy", "reason", "sent"),
    [
        (ShadowPolicy(share=1.0, max_cost_usd=0.0), "skipped_budget", 0),
        (ShadowPolicy(share=1.0, rate_per_s=0.001, max_cost_usd=None), "skipped_rate", 1),
    ],
)
def test_a_shadow_keeps_to_its_own_spend_and_rate_caps(
    pair: Any, policy: ShadowPolicy, reason: str, sent: int
) -> None:
    a, b = pair
    _, report = _shadowed(a, b, policy, 10, False)
    assert report[reason] == 10 - sent
    assert len(b.requests) == sent


# -- a release of a deployment group; Redis Cluster -----------------------------------------------


def test_a_release_may_be_a_deployment_group(pair: Any) -> None:
    from llmguard_sdk import DeploymentGroup

    a, b = pair
    group = DeploymentGroup(
        "pinned",
        [provider(a, "east", "fake-a-2025-01-01"), provider(b, "west", "fake-a-2025-01-01")],
        strategy="round_robin",
    )
    guard = Guard(release=Release("bot", "v1", group), environ={}, telemetry=False)
    try:
        served = [guard.chat(USER).route for _ in range(4)]
    finally:
        guard.close()
    assert sorted(served) == ["east", "east", "west", "west"]


@pytest.mark.parametrize("strategy", ["ordered", "cheapest"])
def test_a_budget_counts_the_releases_system_prompt_whatever_the_strategy(
    pair: Any, strategy: Literal["ordered", "cheapest"]
) -> None:
    """A ``cheapest`` group counted the call's input tokens while ranking, before the
    release's system prompt went in, and that count stayed the call's: the budget reserved
    for "hi" and a $4 call went through a $1 budget."""
    from llmguard_sdk import DeploymentGroup
    from llmguard_sdk.budget import Budget
    from llmguard_sdk.errors import BudgetExceededError

    a, _ = pair
    group = DeploymentGroup("g", [provider(a, "a", "fake-a-2025-01-01")], strategy=strategy)
    release = Release("bot", "v1", group, system_prompt="word " * 4000)
    prices = PriceTable({"fake-a-2025-01-01": Price(input=1000.0, output=1000.0)})
    options: dict[str, Any] = {"environ": {}, "prices": prices, "telemetry": False}
    guard = Guard(release=release, budgets=[Budget(limit_usd=1.0)], **options)
    try:
        with pytest.raises(BudgetExceededError):
            guard.chat(USER, max_tokens=10)
    finally:
        guard.close()
    assert a.requests == []


def test_max_input_tokens_counts_the_releases_system_prompt(pair: Any) -> None:
    """The size check read the request before the release's system prompt went in: a
    4,000-word system prompt passed max_input_tokens=500 and was sent."""
    from llmguard_sdk.errors import InputTooLargeError

    a, _ = pair
    release = Release(
        "bot", "v1", provider(a, "a", "fake-a-2025-01-01"), system_prompt="word " * 4000
    )
    guard = Guard(release=release, max_input_tokens=500, environ={}, telemetry=False)
    try:
        with pytest.raises(InputTooLargeError):
            guard.chat(USER, max_tokens=10)
    finally:
        guard.close()
    assert a.requests == []


def test_the_stage_scripts_work_on_redis_cluster(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    from llmguard_sdk.releases import RedisReleaseBackend
    from llmguard_sdk.store import RedisClusterStore

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    try:
        backend = RedisReleaseBackend(store)
        found = backend.exchange("bot", "bot@v2", 0, {}, {})
        assert found.stage is not None
        version = found.stage.version
        found = backend.exchange("bot", "bot@v2", version, {"calls": 3.0}, {"calls": 1.0})
        assert (found.control, found.canary) == ({"calls": 3.0}, {"calls": 1.0})
        moved, stage = backend.transition("bot", version, 1, "canary", "stage passed")
        assert moved
        assert (stage.index, stage.version) == (1, version + 1)
        again, _ = backend.transition("bot", version, 1, "canary", "late")  # compare and set
        assert not again
        assert backend.exchange("bot", "", 0, {}, {}).control == {}  # a new stage starts empty
    finally:
        store.close()


def test_the_cli_reads_and_moves_a_canary_on_redis_cluster(
    redis_cluster_url: str, cluster_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llmguard release`` opened every ``--store`` as a single Redis: a Guard's
    ``redis+cluster://`` URL was refused ("store must be ... or a redis+cluster:// URL")."""
    from llmguard_sdk.releases import RedisReleaseBackend
    from llmguard_sdk.store import RedisClusterStore

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    try:
        RedisReleaseBackend(store).exchange("bot", "bot@v2", 0, {}, {})
    finally:
        store.close()
    where = ["--store", redis_cluster_url, "--prefix", cluster_prefix, "--json"]
    assert main(["release", "rollback", "bot", *where]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["canary"]["status"] == "rolled_back"
    assert main(["release", "status", "bot", "--store", "memory"]) == 2  # not a Redis
    assert "Redis" in capsys.readouterr().err


# -- races -----------------------------------------------------------------------------------------


class _RivalBackend(MemoryReleaseBackend):
    """A canary another process moves right after each read (a promote by hand never wins)."""

    def exchange(
        self,
        key: str,
        candidate: str,
        version: int,
        control: Counters,
        canary: Counters,
        stages: Sequence[float] = (),
        hold: float = 0.0,
        min_calls: int = 0,
    ) -> Exchange:
        found = super().exchange(key, candidate, version, control, canary, stages, hold, min_calls)
        if found.stage is not None and not candidate:
            self.transition(key, found.stage.version, found.stage.index, "canary", "rival")
        return found


def test_a_move_by_hand_that_keeps_losing_races_raises_a_typed_error() -> None:
    """It raised a bare RuntimeError; now a ReleaseConflictError naming the key and action."""
    from llmguard_sdk.errors import LLMGuardError, ReleaseConflictError
    from llmguard_sdk.releases.stored import move_by_hand

    backend = _RivalBackend()
    backend.exchange("bot", "bot@v2", 0, {}, {})
    with pytest.raises(ReleaseConflictError, match="promote") as raised:
        move_by_hand(backend, "bot", CanaryPolicy(stages=(0.5, 1.0)), "promote")
    assert isinstance(raised.value, LLMGuardError)
    assert isinstance(raised.value, RuntimeError)  # what callers caught before
    assert raised.value.key == "bot"


class _Rendezvous(set[Any]):
    """A set whose membership check waits (a little) for a second thread's: both threads
    look before either adds, the interleaving a race needs."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=0.5)

    def __contains__(self, item: object) -> bool:
        found = super().__contains__(item)
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()  # a lock around the check: the other thread never comes
        return found


def test_two_threads_checking_retirements_warn_once() -> None:
    events: list[ReleaseEvent] = []
    table = PriceTable().with_prices(
        {"fake-a-2025-01-01": Price(1.0, 1.0, retires_on=dt.date(2026, 1, 10))}
    )
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model="fake-a-2025-01-01", name="a")
    now = [_day("2025-06-01")]  # nothing to warn about yet
    plan = ReleasePlan(
        Release("bot", "v1", route), hooks=[events.append], prices=table, clock=lambda: now[0]
    )
    guard = Guard(release=plan, environ={}, telemetry=False)
    try:
        controls = guard.releases
        assert controls is not None
        controls._warned = _Rendezvous()
        now[0] = _day("2026-01-01")
        threads = [threading.Thread(target=controls.check_retirements) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        guard.close()
    assert [e.day for e in events] == [dt.date(2026, 1, 10)]


@pytest.mark.parametrize("max_tokens", [None, 5])
def test_a_shadow_never_spends_past_its_cap(pair: Any, max_tokens: int | None) -> None:
    """The cap was checked against what had been spent, so the call that crossed it went
    out: 2.5 calls' worth of cap paid for 3 calls. Each call is reserved before it goes (its
    worst case: its prompt for each of its Guard's 3 attempts, its output limit once; a call
    without ``max_tokens`` is sent with the served answer's length and 64 tokens more)."""
    a, b = pair
    parameters = {"temperature": 0.0} if max_tokens is None else {"max_tokens": max_tokens}
    current = Release("bot", "v1", provider(a, "a", "fake-a-2025-01-01"))
    candidate = Release("bot", "v2", provider(b, "b", "fake-b-2025-02-01"), parameters=parameters)

    def shadow(cap: float | None, calls: int) -> dict[str, Any]:
        policy = ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=cap)
        plan = ReleasePlan(current, candidate=candidate, shadow=policy)
        guard = Guard(release=plan, environ={}, prices=PRICES, telemetry=False)
        try:
            for _ in range(calls):
                guard.chat(USER)
            assert guard.releases is not None
            assert guard.releases.shadow is not None
            assert guard.releases.shadow.drain(30.0)
            return guard.releases.shadow.report()
        finally:
            guard.close()

    one = shadow(None, 1)["spent_usd"]  # what one shadow call of USER costs
    assert one > 0
    reserved = 3 * one  # (at least: three prompts, and the output once)
    if max_tokens is None:  # reserved with the answer's length and 64 tokens at $1 per million
        reserved += 64 / 1e6
    report = shadow(2.5 * reserved, 10)
    assert report["spent_usd"] <= 2.5 * reserved
    assert report["pairs"] >= 1
    assert report["skipped_budget"] == 10 - report["pairs"]


def test_a_shadows_failed_calls_count_against_its_cap(pair: Any) -> None:
    """A candidate call that timed out after its request went out (billed its input) counted
    nothing: a candidate timing out on every call was sent every call, past the cap."""
    a, b = pair
    b.always(Fault(hang=True))

    def shadow(cap: float | None, calls: int) -> dict[str, Any]:
        policy = ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=cap, timeout=0.3)
        return _shadowed(a, b, policy, calls, False)[1]

    one = shadow(None, 1)
    assert one["candidate_errors"] == 1
    assert one["spent_usd"] > 0  # its input, as its budgets would have charged it
    # room for 2.5 failed calls and a reservation: the prompt (with its 10 % margin) of each
    # of its Guard's 3 attempts, and its output limit (the served answer's length + 64 tokens)
    cap = 2.5 * one["spent_usd"] + 3.3 * one["spent_usd"] + 70 / 1e6
    report = shadow(cap, 6)
    assert report["spent_usd"] <= cap
    assert 1 <= report["candidate_errors"] < 6
    assert report["skipped_budget"] == 6 - report["candidate_errors"]


def _tenant_canary(
    a: FakeProvider, b: FakeProvider, *, fallback_to_current: bool = True, **options: Any
) -> Guard:
    """A Guard at its canary's first stage (half the tenants), its arms a and b, no retries."""
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), sticky_by="tenant", flush_interval=60.0)
    plan = ReleasePlan(
        current, candidate=candidate, canary=policy, fallback_to_current=fallback_to_current
    )
    guard = Guard(release=plan, environ={}, retry=None, telemetry=False, **options)
    assert guard.releases is not None
    guard.releases.start_now()
    return guard


def test_a_stale_answer_standing_in_for_the_candidate_counts_as_its_failure(pair: Any) -> None:
    """A stale cached answer served because the candidate's routes failed was taken for a
    cache hit and not counted at all: the canary never saw the failure."""
    from llmguard_sdk import ResponseCache

    a, b = pair
    cache = ResponseCache(ttl=0.05, semantic=False)  # (a call with a user id is not cached)
    guard = _tenant_canary(a, b, cache=cache, fallback_to_current=False)  # (else a serves)
    try:
        controls = guard.releases
        assert controls is not None
        tenant = next(f"t{i}" for i in range(100) if in_canary(f"bot:t{i}", 0.5))
        guard.chat(USER, tenant=tenant)  # answered by the candidate, cached
        time.sleep(0.1)  # (expired: served again only when the routes fail)
        b.always(Fault(status=500))
        answer = guard.chat(USER, tenant=tenant)
        controls.flush()
        figures = controls.status()["candidate"]
    finally:
        guard.close()
    assert answer.metadata.get("cache")  # the stale answer stood in
    assert (figures["calls"], figures["error_rate"]) == (2, 0.5)


def test_task_tiers_keep_each_call_on_its_arms_routes(pair: Any) -> None:
    """A tier naming routes of both releases served every call from its first route,
    whichever arm the call was on: the canary's calls were the release's (and counted on
    the canary arm). A tier naming none of the arm's routes gives the arm's own."""
    from llmguard_sdk import TaskRouter

    a, b = pair
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0, min_calls=10**6)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    tasks = TaskRouter({"all": ["a", "b"]})
    with Guard(release=plan, environ={}, prices=PRICES, telemetry=False, tasks=tasks) as guard:
        assert guard.releases is not None
        guard.releases.start_now()
        inside = next(f"u{i}" for i in range(100) if in_canary(f"bot:u{i}", 0.5))
        outside = next(f"u{i}" for i in range(100) if not in_canary(f"bot:u{i}", 0.5))
        served = [guard.chat(USER, user=user).route for user in (inside, outside)]
        small = TaskRouter({"small": ["a"]})
    assert served == ["b", "a"]
    with Guard(release=plan, environ={}, prices=PRICES, telemetry=False, tasks=small) as guard:
        assert guard.releases is not None
        guard.releases.start_now()
        assert guard.chat(USER, user=inside).route == "b"


def test_the_guards_own_rate_limit_refusals_do_not_count_against_an_arm(pair: Any) -> None:
    """A per-tenant limit refusing one heavy tenant on the canary counted each refusal as a
    candidate failure: one user could roll back a healthy candidate. (Each refused call is
    served by the current release, its fallback; with none, each ends refused.)"""
    from llmguard_sdk.errors import AllRoutesFailedError, RateLimitExceededError
    from llmguard_sdk.ratelimit import RateLimit

    a, b = pair
    limits = {"b": RateLimit(rpm=1, per_tenant=True, period=3600, max_wait=0, batch_headroom=0)}
    for fallback in (True, False):
        guard = _tenant_canary(a, b, rate_limits=limits, fallback_to_current=fallback)
        try:
            controls = guard.releases
            assert controls is not None
            tenant = next(f"t{i}" for i in range(100) if in_canary(f"bot:t{i}", 0.5))
            guard.chat(USER, tenant=tenant)
            refused = 0
            for _ in range(5):
                if fallback:
                    refused += guard.chat(USER, tenant=tenant).route == "a"
                    continue
                with pytest.raises((RateLimitExceededError, AllRoutesFailedError)) as caught:
                    guard.chat(USER, tenant=tenant)
                errors = getattr(caught.value, "errors", {"b": caught.value})
                refused += all(isinstance(e, RateLimitExceededError) for e in errors.values())
            b.always(Fault(status=429))  # the provider's own 429: the candidate's route failing
            other = next(f"u{i}" for i in range(100) if in_canary(f"bot:u{i}", 0.5))
            with contextlib.suppress(Exception):  # (served by a, or whichever error wraps it)
                guard.chat(USER, tenant=other)
            controls.flush()
            figures = controls.status()["candidate"]
        finally:
            guard.close()
            b.always(None)
        assert refused == 5
        assert (figures["calls"], figures["error_rate"]) == (2, 0.5)


def test_status_has_one_shape_with_or_without_a_canary(pair: Any) -> None:
    """With no canary, status() answered {"release", "canary"}; with one not yet stored,
    {"key", "canary"}: a caller could not read both the same way."""
    a, b = pair
    current, candidate = releases(a, b)
    policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0)
    plans = (ReleasePlan(current), ReleasePlan(current, candidate=candidate, canary=policy))
    answers = []
    for plan in plans:
        guard = Guard(release=plan, environ={}, telemetry=False)
        try:
            assert guard.releases is not None
            answers.append(guard.releases.status())
        finally:
            guard.close()
    assert answers == [{"key": "bot", "release": current.id, "canary": None}] * 2


def test_max_input_tokens_counts_with_the_model_of_the_calls_arm(pair: Any) -> None:
    """The size check counted with the current release's model even for a call the canary's
    candidate served: here an estimate for "fake-a" instead of gpt-4's exact cl100k count."""
    from llmguard_sdk.errors import InputTooLargeError

    a, b = pair
    current = Release("bot", "v1", provider(a, "a", "fake-a-2025-01-01"))
    candidate = Release("bot", "v2", provider(b, "b", "gpt-4-0613"))
    policy = CanaryPolicy(stages=(0.5, 1.0), sticky_by="tenant", flush_interval=60.0)
    plan = ReleasePlan(current, candidate=candidate, canary=policy)
    guard = Guard(release=plan, max_input_tokens=50, environ={}, telemetry=False)
    tenants = [f"t{i}" for i in range(100)]
    big = [{"role": "user", "content": "hello world " * 100}]
    try:
        assert guard.releases is not None
        guard.releases.start_now()
        caught = []
        for arm in (True, False):
            tenant = next(t for t in tenants if in_canary(f"bot:{t}", 0.5) is arm)
            with pytest.raises(InputTooLargeError) as error:
                guard.chat(big, tenant=tenant)
            caught.append(error.value.estimated)
    finally:
        guard.close()
    assert caught == [False, True]  # the candidate's gpt-4 counts exactly, "fake-a" estimates
    assert a.requests == b.requests == []
