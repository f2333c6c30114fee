"""Releases: a canary no Guard serves or moves for 30 days is forgotten, in Redis (its keys'
TTL) and in memory (a deadline per key), and moving a forgotten one by hand says that no
canary is under way, not that other processes moved it."""

from __future__ import annotations

import time

import pytest

from llmguard_sdk.cli import main
from llmguard_sdk.errors import CanaryNotFoundError, LLMGuardError, ReleaseConflictError
from llmguard_sdk.releases import CanaryPolicy, MemoryReleaseBackend, Stage
from llmguard_sdk.releases.stored import move_by_hand
from llmguard_sdk.testing import FakeProvider

from .conftest import RawRedis
from .test_releases import _canary_guard

_MONTH = 30 * 86400  # a canary lives this long after its last serving exchange or move


class _Clock:
    """Wall-clock seconds that a test moves on."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _held(backend: MemoryReleaseBackend) -> int:
    """Entries the backend holds for its canaries (stages, counters, remembered candidates,
    stage shares, deadlines)."""
    past = sum(len(kept) for kept in backend._past.values())
    tables = (backend._stages, backend._counters, backend._past, backend._shares)
    deadlines = len(backend._deadlines.at) + len(backend._deadlines._heap)
    return sum(len(table) for table in tables) + past + deadlines


@pytest.mark.parametrize("action", ["promote", "rollback"])
def test_moving_a_canary_whose_keys_expired_says_none_is_under_way(
    redis_url: str, redis_prefix: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moving by hand a canary whose Redis keys had expired raised a bare ``LookupError``
    through ``guard.releases`` (outside the SDK's error tree, no word of expiry); a
    :class:`CanaryNotFoundError` (an ``LLMGuardError``, still a ``LookupError``) says that no
    canary is under way there, and nothing is stored by the move."""
    import redis

    client: RawRedis = redis.Redis.from_url(redis_url)
    where = ["bot", "--store", redis_url, "--prefix", redis_prefix]
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        guard = _canary_guard(a, b, store=redis_url, key_prefix=redis_prefix)
        try:
            controls = guard.releases
            assert controls is not None
            assert controls.flush() is not None  # stored (no background exchange started)
            keys = list(client.scan_iter(match=f"{redis_prefix}:rel:*"))
            assert keys
            for key in keys:  # the canary's TTL passes
                client.pexpire(key, 1)
            deadline = time.monotonic() + 10.0
            while client.exists(*keys) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not client.exists(*keys)
            with pytest.raises(CanaryNotFoundError, match="no canary is under way") as raised:
                getattr(controls, action)()
            error = raised.value
            assert isinstance(error, LLMGuardError)
            assert isinstance(error, LookupError)  # what callers caught before
            assert not isinstance(error, ReleaseConflictError)
            assert (error.key, error.action) == ("bot", action)
            assert "expired" in str(error)
            assert controls.status()["canary"] is None
            assert main(["release", action, *where]) == 1
            printed = capsys.readouterr().err
            assert "no canary is under way" in printed
            assert "other processes" not in printed
            assert not client.exists(*keys)  # neither move stored anything
        finally:
            guard.close()
            client.close()


def test_a_memory_canary_no_guard_serves_or_moves_for_30_days_is_forgotten() -> None:
    """The memory backend kept every canary for good; it forgets one as Redis does: 30 days
    after the last exchange of a serving Guard (a candidate given) or the last move, a read
    (``status``) leaving its deadline as it is."""
    clock = _Clock()
    backend = MemoryReleaseBackend(clock)
    for key in ("served", "moved", "read"):
        assert backend.exchange(key, "bot@v2", 0, {}, {}).stage is not None
    clock.now += _MONTH - 60
    backend.exchange("served", "bot@v2", 1, {"calls": 1.0}, {})
    moved, _ = backend.transition("moved", 1, 1, "canary", "by hand")
    assert moved
    assert backend.exchange("read", "", 0, {}, {}).stage is not None
    clock.now += 120
    assert backend.exchange("read", "", 0, {}, {}).stage is None
    assert backend.transition("read", 1, 1, "canary", "late") == (False, Stage())
    with pytest.raises(CanaryNotFoundError, match="no canary is under way"):
        move_by_hand(backend, "read", CanaryPolicy(), "promote")
    served = backend.exchange("served", "", 0, {}, {})
    assert served.stage is not None
    assert served.control == {"calls": 1.0}
    still = backend.exchange("moved", "", 0, {}, {}).stage
    assert still is not None
    assert (still.index, still.reason) == (1, "by hand")
    back = backend.exchange("read", "bot@v2", 0, {}, {}).stage  # its Guard comes back
    assert back is not None
    assert (back.version, back.reason) == (1, "new candidate")


def test_a_long_running_memory_backend_holds_only_the_canaries_still_served() -> None:
    """A process running a canary for a new release (and candidate) each day kept every one
    it ever saw: its stages, counters, remembered candidates and shares grew for good."""
    clock = _Clock()
    backend = MemoryReleaseBackend(clock)
    at_40 = 0
    for day in range(120):
        for n in range(20):
            key = f"feature-{day}-{n}"
            for version in (1, 2):  # a candidate replaced: remembered beside the next
                found = backend.exchange(key, f"{key}@v{version}", 0, {}, {}, (0.5, 1.0))
                assert found.stage is not None
                backend.exchange(key, f"{key}@v{version}", found.stage.version, {"calls": 1}, {})
        clock.now += 86400
        if day == 40:
            at_40 = _held(backend)
    assert at_40 > 0
    assert _held(backend) <= at_40  # what 31 days of canaries hold, not 120
    assert backend.exchange("feature-0-0", "", 0, {}, {}).stage is None
    assert backend.exchange("feature-119-0", "", 0, {}, {}).stage is not None


def test_a_served_canary_remembers_its_rolled_back_candidate_past_30_days() -> None:
    """A key kept alive by the candidate it serves keeps the stages of those it replaced (the
    last 16): a rolled-back candidate coming back after months stays rolled back."""
    clock = _Clock()
    backend = MemoryReleaseBackend(clock)
    first = backend.exchange("bot", "bot@v2", 0, {}, {}).stage
    assert first is not None
    backend.transition("bot", first.version, 0, "rolled_back", "errors breached", "bot@v2")
    version = 0
    for _ in range(90):  # the fix serves for three months
        found = backend.exchange("bot", "bot@v3", version, {}, {})
        assert found.stage is not None
        version = found.stage.version
        clock.now += 86400
    back = backend.exchange("bot", "bot@v2", version, {}, {}).stage
    assert back is not None
    assert (back.status, back.reason) == ("rolled_back", "errors breached")


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_move_of_a_key_holding_no_canary_stores_nothing(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The memory backend took a move at version 0 of a key it held nothing under (none
    stored, or forgotten) and stored a canary of no candidate; Redis refuses it, and now both
    do."""
    from llmguard_sdk import RedisStore
    from llmguard_sdk.releases import RedisReleaseBackend
    from llmguard_sdk.releases.backends import ReleaseBackend

    store = None
    backend: ReleaseBackend = MemoryReleaseBackend()
    if kind == "redis":
        url, prefix = (request.getfixturevalue(n) for n in ("redis_url", "redis_prefix"))
        store = RedisStore(url, key_prefix=prefix)
        backend = RedisReleaseBackend(store)
    try:
        moved, stage = backend.transition("nobody", 0, 1, "promoted", "by hand")
        assert not moved
        assert (stage.version, stage.candidate) == (0, "")
        assert backend.exchange("nobody", "", 0, {}, {}).stage is None
    finally:
        if store is not None:
            store.close()
