"""``Telemetry(propagate={...})`` names routes of the chain: a deployment group's name (what a
config file's ``[[routes]] group=`` and ``tasks.tiers`` name) stands for each of its
deployments, and a name that is no route or group of the Guard (a typo) is said, with a
:class:`~llmguard_sdk.TelemetryConfigWarning`, as the Guard is built, not silently never
matched.

Real OpenTelemetry SDK with in-memory exporters, FakeProviders on loopback whose recorded
requests show the headers that reached them."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import (
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
    TelemetryConfigWarning,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .routekinds import route_to
from .test_telemetry import Exported, attempts_of, call_span, exporters
from .test_telemetry_propagation import sent, traceparent


@pytest.fixture
def third() -> Iterator[FakeProvider]:
    with FakeProvider(name="third") as server:
        yield server


@pytest.fixture
def names() -> Iterator[Any]:
    """A Telemetry propagating to the names given (real SDK, in-memory exporters)."""
    made: list[Exported] = []
    meters: list[Any] = []

    def build(*wanted: str) -> Exported:
        exported, meter_provider = exporters(log_level=None, propagate=set(wanted))
        made.append(exported)
        meters.append(meter_provider)
        return exported

    yield build
    for meter_provider in meters:
        meter_provider.shutdown()
    for exported in made:
        exported.tracer_provider.shutdown()


def test_a_groups_name_stands_for_each_of_its_deployments(
    fake: FakeProvider, fake2: FakeProvider, third: FakeProvider, names: Any
) -> None:
    """The reviewer's case: ``propagate={"vllm"}``, vllm a group. Each deployment of the
    group that the call reaches sends its attempt's context; the route after it does not."""
    exported = names("vllm")
    group = DeploymentGroup("vllm", [route_to(fake), route_to(fake2)], strategy="ordered")
    fake.always(Fault(status=503))
    fake2.always(Fault(status=503))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TelemetryConfigWarning)
        guard = Guard(
            [group, route_to(third)], telemetry=exported.telemetry, retry=None, environ={}
        )
    try:
        assert guard.chat(USER).route == "third"
    finally:
        guard.close()
    first, second, last = attempts_of(exported, call_span(exported))
    assert sent(fake) == [traceparent(first)]
    assert sent(fake2) == [traceparent(second)]
    assert sent(third) == [None]
    assert last.attributes is not None
    assert last.attributes["llmguard.route"] == "third"


def test_a_config_files_group_is_named_as_the_file_names_it(
    fake: FakeProvider, fake2: FakeProvider, names: Any
) -> None:
    exported = names("pool")
    config = {
        "routes": [
            {
                "group": "pool",
                "strategy": "ordered",
                "deployments": [
                    {"model": f"vllm/{fake.model}", "name": "a", "base_url": fake.base_url}
                ],
            },
            {"model": f"vllm/{fake2.model}", "name": "b", "base_url": fake2.base_url},
        ]
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", TelemetryConfigWarning)
        guard = Guard.from_config(config, environ={}, telemetry=exported.telemetry)
    try:
        assert guard.chat(USER).route == "a"
    finally:
        guard.close()
    (attempt,) = attempts_of(exported, call_span(exported))
    assert sent(fake) == [traceparent(attempt)]


def test_a_deployments_own_name_still_names_it_alone(
    fake: FakeProvider, fake2: FakeProvider, names: Any
) -> None:
    exported = names("backup")
    group = DeploymentGroup("vllm", [route_to(fake), route_to(fake2)], strategy="ordered")
    fake.always(Fault(status=503))
    guard = Guard([group], telemetry=exported.telemetry, retry=None, environ={})
    try:
        assert guard.chat(USER).route == "backup"
    finally:
        guard.close()
    _primary, backup = attempts_of(exported, call_span(exported))
    assert sent(fake) == [None]
    assert sent(fake2) == [traceparent(backup)]


def test_a_name_of_no_route_or_group_is_said_as_the_guard_is_built(
    fake: FakeProvider, fake2: FakeProvider, names: Any
) -> None:
    """A typo matched nothing, silently: every request went without a trace context. It is
    a warning naming the unknown names and the Guard's routes and groups, pointing at the
    application's line; the names that match still work."""
    exported = names("vlm", "backup", "zzz")
    group = DeploymentGroup("vllm", [route_to(fake), route_to(fake2)])
    with pytest.warns(TelemetryConfigWarning) as caught:
        guard = Guard([group], telemetry=exported.telemetry, retry=None, environ={})
    try:
        (warning,) = caught
        message = str(warning.message)
        assert "'vlm', 'zzz'" in message
        assert "'backup', 'primary', 'vllm'" in message  # what the Guard has
        assert warning.filename == __file__
        fake.always(Fault(status=503))
        guard.chat(USER)
    finally:
        guard.close()
    assert sent(fake2) != [None]


def test_a_warning_is_said_once_per_telemetry_and_name(fake: FakeProvider, names: Any) -> None:
    exported = names("typo")
    with pytest.warns(TelemetryConfigWarning):
        Guard([route_to(fake)], telemetry=exported.telemetry, environ={}).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TelemetryConfigWarning)
        Guard([route_to(fake)], telemetry=exported.telemetry, environ={}).close()


def test_a_telemetry_shared_by_guards_with_other_routes(
    fake: FakeProvider, fake2: FakeProvider, names: Any
) -> None:
    """One Telemetry given to two Guards (as a release's shadow Guard shares its serving
    Guard's): a name a Guard built before has is no typo, and only that Guard's requests
    carry it."""
    exported = names("primary")
    first = Guard([route_to(fake)], telemetry=exported.telemetry, environ={})
    with warnings.catch_warnings():
        warnings.simplefilter("error", TelemetryConfigWarning)
        second = Guard([route_to(fake2)], telemetry=exported.telemetry, environ={})
    try:
        first.chat(USER)
        second.chat(USER)
    finally:
        first.close()
        second.close()
    assert sent(fake) != [None]
    assert sent(fake2) == [None]


@pytest.mark.parametrize("propagate", [True, False])
def test_true_and_false_name_nothing_to_check(fake: FakeProvider, propagate: bool) -> None:
    exported, meter_provider = exporters(log_level=None, propagate=propagate)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", TelemetryConfigWarning)
            guard = Guard([route_to(fake)], telemetry=exported.telemetry, environ={})
        guard.chat(USER)
        guard.close()
        assert (sent(fake) != [None]) is propagate
    finally:
        meter_provider.shutdown()
        exported.tracer_provider.shutdown()


def test_a_releases_shadow_guard_shares_the_telemetry_without_a_warning(names: Any) -> None:
    """The shadow Guard a release builds has the candidate's routes only, and the serving
    Guard's Telemetry: a name of the release's own route is no typo there."""
    from llmguard_sdk.releases import Release, ReleasePlan, ShadowPolicy

    exported = names("ra")
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        plan = ReleasePlan(
            Release(
                "bot", "v1", OpenAICompatibleProvider(a.base_url, model="m-2025-01-01", name="ra")
            ),
            candidate=Release(
                "bot", "v2", OpenAICompatibleProvider(b.base_url, model="m-2025-02-01", name="rb")
            ),
            shadow=ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=None),
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            guard = Guard(release=plan, environ={}, telemetry=exported.telemetry)
            try:
                guard.chat(USER)
                shadow = guard.releases.shadow  # type: ignore[union-attr]
                assert shadow is not None
                assert shadow.drain(30.0)
            finally:
                guard.close()
        assert not [w for w in caught if issubclass(w.category, TelemetryConfigWarning)]
        assert sent(a) != [None]
        assert sent(b) == [None]  # the shadow's call: rb is not named
