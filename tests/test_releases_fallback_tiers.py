"""Releases: a canary call whose candidate refused its request as wrong (400, 422) falls
back to the current release once when the releases' routes are deployment groups or task
tiers: the candidate group's other deployments and the cascade's later tiers are not sent
the refused request, the call counts as the candidate's failure once, and telemetry names
the current release. A cascade escalating after the fallback stays on the current release's
routes (they were sent the candidate's tier routes, with the current release's request)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import DeploymentGroup, TaskRouter
from llmguard_sdk.releases import Release
from llmguard_sdk.router.cascade import Cascade, validator
from llmguard_sdk.testing import FakeProvider, Fault

from .test_releases_fallback import INSIDE, USER, _candidate_figures, _guard, otel, route
from .test_telemetry import Exported, call_span

__all__ = ["otel"]


@pytest.fixture(name="fakes")
def _fakes() -> Iterator[tuple[FakeProvider, ...]]:
    with (
        FakeProvider(name="a") as a,
        FakeProvider(name="b") as b,
        FakeProvider(name="c") as c,
        FakeProvider(name="d") as d,
    ):
        yield a, b, c, d


def _sent(*fakes: FakeProvider) -> tuple[int, ...]:
    return tuple(len(fake.requests) for fake in fakes)


@pytest.mark.parametrize("status", [400, 422])
def test_a_candidate_groups_request_error_falls_back_once(
    fakes: Any, otel: Exported, status: int
) -> None:
    a, b, c, _ = fakes
    b.always(Fault(status=status))
    c.always(Fault(status=status))
    group = DeploymentGroup("g", [route(b), route(c)], strategy="ordered")
    current = Release("bot", "v1", route(a), system_prompt="v1 prompt")
    candidate = Release("bot", "v2", group, system_prompt="v2 prompt")
    with _guard(current, candidate, telemetry=otel.telemetry) as guard:
        assert guard.chat(USER, user=INSIDE).route == "a"
        figures = _candidate_figures(guard)
    assert _sent(b, c, a) == (1, 0, 1)  # the group's other deployment: not sent it
    assert a.requests[0].body["messages"][0]["content"] == "v1 prompt"
    assert figures == (1, 1.0)
    assert dict(call_span(otel).attributes or {})["llmguard.release"] == "bot@v1"


def _cascade(fakes: Any, checks: tuple[Any, ...] = ()) -> tuple[Release, Release, TaskRouter]:
    """The current release on a and d, the candidate on b and c; a cascade of a small tier
    (b, a) and a large one (c, d)."""
    a, b, c, d = fakes
    current = Release("bot", "v1", [route(a), route(d)], system_prompt="v1 prompt")
    candidate = Release("bot", "v2", [route(b), route(c)], system_prompt="v2 prompt")
    tiers = {"small": ["b", "a"], "large": ["c", "d"]}
    cascade = Cascade(["small", "large"], checks=checks)
    return current, candidate, TaskRouter(tiers, cascades={"cas": cascade}, default="cas")


@pytest.mark.parametrize("status", [400, 422])
def test_a_candidate_tiers_request_error_falls_back_without_escalating(
    fakes: Any, otel: Exported, status: int
) -> None:
    current, candidate, tasks = _cascade(fakes)
    a, b, c, d = fakes
    b.always(Fault(status=status))
    with _guard(current, candidate, otel.telemetry, {"tasks": tasks}) as guard:
        answer = guard.chat(USER, user=INSIDE)
        figures = _candidate_figures(guard)
    assert (answer.route, answer.metadata["cascade"]["tier"]) == ("a", "small")
    assert _sent(b, a, c, d) == (1, 1, 0, 0)
    assert figures == (1, 1.0)
    assert dict(call_span(otel).attributes or {})["llmguard.release"] == "bot@v1"


@pytest.mark.parametrize("fault", [400, 500])
def test_a_cascade_escalating_after_the_fallback_stays_on_the_current_release(
    fakes: Any, fault: int
) -> None:
    """The candidate's small tier failed (a 400, or a 500), the current release's small
    route answered and the cascade's check rejected it: the large tier sent the current
    release's request to the candidate's large route first."""
    a, b, c, d = fakes
    b.always(Fault(status=fault))
    current, candidate, tasks = _cascade(fakes, (validator(lambda r: r.route != "a"),))
    with _guard(current, candidate, guard_args={"tasks": tasks}) as guard:
        answer = guard.chat(USER, user=INSIDE)
        figures = _candidate_figures(guard)
    assert (answer.route, answer.metadata["cascade"]["tier"]) == ("d", "large")
    assert _sent(b, a, c, d) == (1, 1, 0, 1)
    assert d.requests[0].body["messages"][0]["content"] == "v1 prompt"
    assert figures == (1, 1.0)
