"""``llmguard release status --json``: one shape, that of ``ReleaseControl.status()``, whether
the canary's state lives in memory or in Redis, and whether a canary is stored or not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, RedisStore
from llmguard_sdk.cli import main
from llmguard_sdk.releases import CanaryPolicy, RedisReleaseBackend, Release, ReleasePlan
from llmguard_sdk.testing import FakeProvider

from .conftest import RawRedis
from .test_releases import _canary_guard, _traffic


@pytest.fixture
def pair() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        yield a, b


def _redis_guard(
    pair: tuple[FakeProvider, FakeProvider], policy: CanaryPolicy, url: str, prefix: str
) -> Guard:
    """A Guard canarying ``bot@v2`` (on ``pair``'s second) under ``policy``, in Redis."""
    a, b = pair
    plan = ReleasePlan(
        Release("bot", "v1", OpenAICompatibleProvider(a.base_url, model="m-2025-01-01")),
        candidate=Release("bot", "v2", OpenAICompatibleProvider(b.base_url, model="m-2025-02-01")),
        canary=policy,
    )
    return Guard(release=plan, store=url, key_prefix=prefix, environ={})


def _status(guard: Guard) -> dict[str, Any]:
    """``guard``'s canary after some traffic, as ``ReleaseControl.status()`` reads it."""
    controls = guard.releases
    assert controls is not None
    try:
        controls.start_now()
        _traffic(guard, 20)
        controls.flush()
        return controls.status()
    finally:
        guard.close()


def _cli(capsys: pytest.CaptureFixture[str], key: str, *where: str) -> tuple[int, Any]:
    code = main(["release", "status", key, *where, "--stages", "0.5,1", "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("state", ["memory", "redis"])
def test_release_status_json_has_the_shape_of_release_control_status(
    pair: Any, state: str, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's report had no ``release`` key (Redis stores the candidate only, not the
    current release's id): a reader of ``ReleaseControl.status()`` and of the CLI's JSON
    could not read both the same way. It is there, ``null``, as the CLI cannot know it."""
    a, b = pair
    where = ("--store", redis_url, "--prefix", redis_prefix)
    if state == "redis":
        status = _status(_canary_guard(a, b, store=redis_url, key_prefix=redis_prefix))
    else:  # the Guard's canary in memory; the CLI reads one stored in Redis by hand
        status = _status(_canary_guard(a, b))
        store = RedisStore(redis_url, key_prefix=redis_prefix)
        try:
            RedisReleaseBackend(store).exchange("bot", "bot@v2", 0, {}, {})
        finally:
            store.close()
    assert status["release"] == "bot@v1"
    assert status["canary"] is not None
    code, report = _cli(capsys, "bot", *where)
    assert code == 0
    assert list(report) == list(status)  # the same keys, in the same order
    assert report["release"] is None
    if state == "redis":  # the same canary read both ways: the same figures
        assert report == {**status, "release": None}
    code, report = _cli(capsys, "nobody", *where)
    assert code == 1
    assert report == {"key": "nobody", "release": None, "canary": None}


def test_the_cli_moves_a_canary_by_the_stages_its_guards_run(
    pair: Any, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI knew the stages only from ``--stages`` (default 1 % -> 5 % -> 25 % -> 100 %):
    without it, promoting by hand a canary of six stages marked it promoted at the fourth,
    every call then served by the candidate, and ``status`` printed other shares."""
    policy = CanaryPolicy(stages=(0.01, 0.02, 0.05, 0.1, 0.25, 1.0), min_calls=10**6)
    guard = _redis_guard(pair, policy, redis_url, redis_prefix)
    where = ["bot", "--store", redis_url, "--prefix", redis_prefix]
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        for _ in range(3):
            assert main(["release", "promote", *where]) == 0
        stage = controls.flush()
        assert stage is not None
        assert (stage.status, stage.index, stage.share(policy)) == ("canary", 3, 0.1)
        capsys.readouterr()
        assert main(["release", "status", *where, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert (report["canary"]["status"], report["canary"]["share"]) == ("canary", 0.1)
        # stages that are not the Guards' are refused, naming both
        assert main(["release", "promote", *where, "--stages", "0.5,1"]) == 1
        assert "0.01,0.02,0.05,0.1,0.25,1" in capsys.readouterr().err
        assert controls.flush().index == 3  # type: ignore[union-attr]
    finally:
        guard.close()


_MONTH = 30 * 86400  # the canary's keys live this long after the last exchange or move


def test_reading_a_canary_leaves_its_keys_to_expire(
    pair: Any, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llmguard release status`` and ``guard.releases.status()`` gave the canary's keys
    their 30 days again: a dashboard polling the status of a canary no Guard serves any more
    kept it stored for good. A read leaves their TTL as it is; an exchange from a serving
    Guard and a move by hand (a rollback keeps its counters: theirs too) renew it."""
    import redis

    a, b = pair
    guard = _canary_guard(a, b, store=redis_url, key_prefix=redis_prefix)
    client: RawRedis = redis.Redis.from_url(redis_url)
    where = ["bot", "--store", redis_url, "--prefix", redis_prefix]
    try:
        controls = guard.releases
        assert controls is not None
        store = RedisStore(redis_url, key_prefix=redis_prefix)
        try:  # a Guard of a deploy gone by served the canary, then stopped
            backend = RedisReleaseBackend(store)
            backend.exchange("bot", "bot@v2", 0, {}, {})
            backend.exchange("bot", "bot@v2", 1, {"calls": 3.0}, {"calls": 1.0})
        finally:
            store.close()
        keys = sorted(client.scan_iter(match=f"{redis_prefix}:rel:*"))
        assert len(keys) == 3  # the stage, the control's counters, the canary's
        for key in keys:
            client.expire(key, 100)
        for _ in range(3):
            assert controls.status()["canary"]["candidate"] == "bot@v2"
            assert main(["release", "status", *where, "--json"]) == 0
        assert all(0 < client.ttl(key) <= 100 for key in keys)
        assert main(["release", "rollback", *where]) == 0  # a move by hand
        assert all(client.ttl(key) > _MONTH - 60 for key in keys)
        for key in keys:
            client.expire(key, 100)
        controls.start_now()  # a serving Guard's exchange
        assert all(client.ttl(key) > _MONTH - 60 for key in keys)
    finally:
        guard.close()
        client.close()


def test_promoting_a_rolled_back_canary_starts_it_again_at_its_stage(
    pair: Any, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A canary rolled back at 25 % (its stage before the last) and started again by hand
    (``llmguard release promote``, as the README says: "start it again by hand") went to the
    stage after the one it failed at: promoted, the candidate the canary had just found bad
    serving every call. It takes up the stage it was rolled back from; a second promote moves
    it on."""
    policy = CanaryPolicy(stages=(0.05, 0.25, 1.0), min_calls=10**6)
    guard = _redis_guard(pair, policy, redis_url, redis_prefix)
    where = ["bot", "--store", redis_url, "--prefix", redis_prefix]
    try:
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        assert main(["release", "promote", *where]) == 0  # 5 % -> 25 %
        assert main(["release", "rollback", *where]) == 0
        capsys.readouterr()
        assert main(["release", "promote", *where]) == 0  # started again
        assert "canary at share 0.25 (stage 1)" in capsys.readouterr().out
        stage = controls.flush()
        assert stage is not None
        assert (stage.status, stage.index, stage.share(policy)) == ("canary", 1, 0.25)
        assert controls.promote().status == "promoted"  # the next stage, as ever
        assert controls.rollback().status == "rolled_back"
        assert controls.promote().status == "promoted"  # back where it was
    finally:
        guard.close()
