"""Exploring (the ``latency`` strategy): a deployment due for it (neither answered nor led a
call for ``half_life_s``) is explored by one call, at most one call in ``EXPLORE_EVERY`` of
the group, the one due the longest first. Time is the group's clock, moved by the tests."""

from __future__ import annotations

import math

import pytest

from llmguard_sdk import DeploymentGroup, Guard
from llmguard_sdk.router.policy import EXPLORE_EVERY, explored
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_router import Clock, _group, _named

HALF_LIFE_S = 1.0


def _sparse(
    group: DeploymentGroup, clock: Clock, answers: dict[str, float], calls: int
) -> list[str]:
    """The leaders of ``calls`` calls, each two half-lives after the one before (every
    deployment is due for exploring at each), each answering as its deployment does now."""
    firsts = []
    for _ in range(calls):
        clock.now += 2 * HALF_LIFE_S
        first = group.ranked()[0].name
        firsts.append(first)
        group.observe(first, answers[first], failed=False)
    return firsts


def test_the_deployment_explored_is_the_one_due_the_longest_unless_it_leads_anyway() -> None:
    assert explored([0, 1, 2], [5.0, 9.0, 7.0]) == 1
    assert explored([0, 1, 2], [9.0, 5.0, None]) is None  # the ranking leads with it
    assert explored([0, 1, 2], [None, None, None]) is None  # none due
    assert explored([0, 1, 2], [3.0, 3.0, 3.0]) == 2  # equals: the one ranked last


def test_with_sparse_calls_a_recovered_deployment_is_explored_within_a_bound() -> None:
    """Calls further apart than ``half_life_s``: every deployment was due at each call, the
    cheapest due one was explored (the best), and ``c``, slow once and recovered since,
    never had a call again (0 of 60). The one due the longest is explored now: ``c`` within
    (deployments - 1) x ``EXPLORE_EVERY`` calls, and once measured fast it takes its share."""
    clock = Clock()
    group = DeploymentGroup(
        "g", _named("a", "b", "c"), seed=3, half_life_s=HALF_LIFE_S, clock=clock
    )
    for name, seconds in (("a", 0.02), ("b", 1.0), ("c", 1.0)) * 2:  # the first: cold
        group.observe(name, seconds, failed=False)
    firsts = _sparse(group, clock, {"a": 0.02, "b": 1.0, "c": 0.02}, 6 * EXPLORE_EVERY)
    assert "c" in firsts[: 2 * EXPLORE_EVERY]
    assert firsts.count("c") >= 2 * EXPLORE_EVERY  # back in the band: a share of the calls
    # b, still slow, is explored, and only as rationed
    assert 1 <= firsts.count("b") <= math.ceil(len(firsts) / EXPLORE_EVERY)


@pytest.mark.parametrize("spacing", [0.5, 2.0])  # calls apart, in half-lives
def test_a_hung_deployment_is_explored_by_one_call_in_explore_every_at_most(
    servers: list[FakeProvider], spacing: float
) -> None:
    """``dep-1`` hangs (each call it leads waits out ``attempt_timeout``, then fails over).
    With a call every half half-life it was due every other call and explored by each
    of those: 15 of 30 calls waited on it. At most one call in ``EXPLORE_EVERY`` explores
    now; every call is answered by ``dep-0``."""
    clock = Clock()
    group = _group(servers[:2], half_life_s=HALF_LIFE_S, clock=clock)
    group.observe("dep-0", 0.01, failed=False)  # (the first answer: not measured)
    group.observe("dep-0", 0.01, failed=False)
    group.observe("dep-1", 0.3, failed=True)  # it hung: a penalty keeps it out
    servers[1].always(Fault(hang=True))
    calls = 3 * EXPLORE_EVERY
    with Guard(group, environ={}, retry=None, breaker=None, attempt_timeout=0.2) as guard:
        routes = []
        for _ in range(calls):
            clock.now += spacing * HALF_LIFE_S
            routes.append(guard.chat(USER).route)
    assert routes == ["dep-0"] * calls
    assert 1 <= servers[1].stats.requests <= math.ceil(calls / EXPLORE_EVERY)
