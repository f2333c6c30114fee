"""Releases: one canary key, several candidates over time (a rolling deploy, a redeploy): each
candidate's stage is kept when another takes the key, and taken up again when it comes back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, RedisStore
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.releases import (
    CanaryPolicy,
    MemoryReleaseBackend,
    RedisReleaseBackend,
    Release,
    ReleasePlan,
)
from llmguard_sdk.releases.backends import ReleaseBackend
from llmguard_sdk.testing import FakeProvider, Fault

USER = [{"role": "user", "content": "hello"}]
PRICES = PriceTable.default_table().with_prices(
    {f"fake-{v}-2025-01-01": Price(input=1.0, output=1.0) for v in ("a", "b", "c")}
)


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[ReleaseBackend]:
    if request.param == "memory":
        yield MemoryReleaseBackend()
        return
    url = request.getfixturevalue("redis_url")
    store = RedisStore(url, key_prefix=request.getfixturevalue("redis_prefix"))
    try:
        yield RedisReleaseBackend(store)
    finally:
        store.close()


def test_a_rolled_back_candidate_stays_rolled_back_when_it_comes_back(
    backend: ReleaseBackend,
) -> None:
    """Another candidate taking the key (a rolling deploy of a fix) wiped the rollback: the
    next exchange of a process still running the rolled-back candidate started its canary
    afresh at stage 0, and it served users again."""
    first = backend.exchange("bot", "bot@v2", 0, {}, {}).stage
    assert first is not None
    moved, stage = backend.transition("bot", first.version, 0, "rolled_back", "errors", "bot@v2")
    assert moved
    other = backend.exchange("bot", "bot@v3", stage.version, {}, {}).stage
    assert other is not None
    assert (other.candidate, other.status, other.index) == ("bot@v3", "canary", 0)
    back = backend.exchange("bot", "bot@v2", other.version, {"calls": 5.0}, {}).stage
    assert back is not None
    assert (back.candidate, back.status, back.reason) == ("bot@v2", "rolled_back", "errors")
    assert back.version > other.version  # a change every process sees


def test_a_candidate_that_comes_back_takes_up_its_stage_again(backend: ReleaseBackend) -> None:
    """A promoted candidate fell back to a 1 % canary when a process of the previous deploy
    exchanged once; a canary half-way through started its stages again."""
    stage = backend.exchange("bot", "bot@v3", 0, {}, {}).stage
    assert stage is not None
    for _ in range(2):
        _, stage = backend.transition("bot", stage.version, stage.index + 1, "canary", "passed")
    _, stage = backend.transition("bot", stage.version, 3, "promoted", "stage passed")
    old = backend.exchange("bot", "bot@v2", stage.version, {}, {}).stage  # a pod left behind
    assert old is not None
    assert (old.candidate, old.status, old.index) == ("bot@v2", "canary", 0)
    assert old.reason == "new candidate"
    found = backend.exchange("bot", "bot@v3", stage.version, {}, {})
    assert found.stage is not None
    assert (found.stage.status, found.stage.index) == ("promoted", 3)
    assert found.control == found.canary == {}  # the counters of another stage are not its
    _, half = backend.transition("bot", found.stage.version, 1, "canary", "by hand")
    backend.exchange("bot", "bot@v4", half.version, {}, {})
    again = backend.exchange("bot", "bot@v3", 0, {}, {}).stage
    assert again is not None
    assert (again.status, again.index) == ("canary", 1)


def test_a_key_remembers_a_bounded_number_of_candidates(backend: ReleaseBackend) -> None:
    for number in range(40):
        stage = backend.exchange("bot", f"bot@v{number}", 0, {}, {}).stage
        assert stage is not None
        backend.transition("bot", stage.version, 0, "rolled_back", "bad", f"bot@v{number}")
    recent = backend.exchange("bot", "bot@v30", 0, {}, {}).stage
    assert recent is not None
    assert recent.status == "rolled_back"
    oldest = backend.exchange("bot", "bot@v0", 0, {}, {}).stage  # forgotten: a new canary
    assert oldest is not None
    assert (oldest.status, oldest.reason) == ("canary", "new candidate")


def _route(fake: FakeProvider, name: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(fake.base_url, model=f"fake-{name}-2025-01-01", name=name)


def _guard(plan: ReleasePlan, url: str, prefix: str) -> Guard:
    """A Guard serving ``plan`` (its canary in the Redis at ``url``) without retries,
    breakers or telemetry: each call is one request, counted on its arm."""
    return Guard(
        release=plan, store=url, key_prefix=prefix, environ={}, prices=PRICES, retry=None,
        breaker=None, telemetry=False,
    )  # fmt: skip


def test_a_rollback_holds_while_a_fix_rolls_out_beside_the_old_processes(
    redis_url: str, redis_prefix: str
) -> None:
    """Two Guards sharing Redis: one still runs the candidate its canary rolled back, the
    other the next candidate. The rolled-back one served a share of the users again."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b, FakeProvider(name="c") as c:
        b.always(Fault(status=500))
        current = Release("bot", "v1", _route(a, "a"))
        policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=40, flush_interval=60.0)

        where = (redis_url, redis_prefix)
        old = _guard(ReleasePlan(current, Release("bot", "v2", _route(b, "b")), policy), *where)
        new = _guard(ReleasePlan(current, Release("bot", "v3", _route(c, "c")), policy), *where)
        try:
            controls: Any = old.releases
            controls.start_now()
            for i in range(60):
                with contextlib.suppress(Exception):
                    old.chat(USER, user=f"u{i}")
            assert controls.flush().status == "rolled_back"
            new.releases.start_now()  # type: ignore[union-attr]
            assert controls.flush().status == "rolled_back"
            served = len(b.requests)
            for i in range(40):
                old.chat(USER, user=f"w{i}")
            assert len(b.requests) == served
        finally:
            old.close()
            new.close()


def test_a_canary_keeps_the_stage_shares_of_its_guards(backend: ReleaseBackend) -> None:
    """What ``llmguard release`` moves and reports a canary by (it knew only ``--stages``)."""
    assert backend.exchange("bot", "", 0, {}, {}).stages == ()
    found = backend.exchange("bot", "bot@v2", 0, {}, {}, (0.1, 0.5, 1.0))
    assert found.stages == (0.1, 0.5, 1.0)
    assert backend.exchange("bot", "", 0, {}, {}).stages == (0.1, 0.5, 1.0)


def test_a_canary_under_way_holds_its_key_while_another_candidate_rolls_out(
    redis_url: str, redis_prefix: str
) -> None:
    """A rolling deploy: Guards of the candidate under way (failing every call) and Guards of
    the next one served side by side. Each exchange took the key for its own candidate,
    clearing the counters, so the other's were dropped: the stored stage changed at every
    exchange, neither canary gathered any evidence, and the failing one was never rolled back
    while both ran. The one under way keeps the key while its Guards exchange; the other's
    serve the release, count nothing, and wait."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b, FakeProvider(name="c") as c:
        b.always(Fault(status=500))
        current = Release("bot", "v1", _route(a, "a"))
        policy = CanaryPolicy(stages=(0.5, 1.0), min_calls=10**6, flush_interval=60.0)

        where = (redis_url, redis_prefix)
        old = _guard(ReleasePlan(current, Release("bot", "v2", _route(b, "b")), policy), *where)
        new = _guard(ReleasePlan(current, Release("bot", "v3", _route(c, "c")), policy), *where)
        try:
            first: Any = old.releases
            second: Any = new.releases
            first.start_now()
            second.start_now()
            versions = set()
            for i in range(120):
                with contextlib.suppress(Exception):
                    (old, new)[i % 2].chat(USER, user=f"u{i}")
                if i % 10 == 9:
                    versions.add(first.flush().version)
                    assert second.flush() is None  # not its canary: it waits
            stage = first.flush()
            assert stage.candidate == "bot@v2"
            assert stage.status == "rolled_back"
            assert "errors breached" in stage.reason
        finally:
            old.close()
            new.close()
    assert len(versions) <= 2  # the stage, then rolled back: no other exchange moved it
    assert len(c.requests) == 0  # the waiting candidate served nobody


def test_another_candidate_takes_the_key_once_the_holders_guards_are_gone(
    backend: ReleaseBackend,
) -> None:
    """The candidate under way holds the key for ``hold`` seconds after its Guards' last
    exchange; another candidate's exchange meanwhile reads its stage and adds nothing (nor
    stores its stage shares); once the hold lapses the other takes the key."""
    first = backend.exchange("bot", "bot@v2", 0, {}, {}, (0.5, 1.0), hold=0.4).stage
    assert first is not None
    waiting = backend.exchange("bot", "bot@v3", first.version, {"calls": 2.0}, {}, (0.1, 1.0))
    assert waiting.stage == first  # v2's, untouched
    assert waiting.control == {}  # the waiting Guard's counters are not v2's
    assert waiting.stages == (0.5, 1.0)
    time.sleep(0.5)
    taken = backend.exchange("bot", "bot@v3", 0, {}, {}, (0.1, 1.0)).stage
    assert taken is not None
    assert (taken.candidate, taken.reason) == ("bot@v3", "new candidate")
