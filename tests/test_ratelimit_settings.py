"""Rate limits as configured: a changed limit's Redis state, what a bad value's error says, a
token limit too small for a call's output reservation, a standalone limiter asked for a key it
has no limits for."""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import (
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    RateLimitConfigWarning,
)
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.testing import FakeProvider
from tests.conftest import USER, RedisTarget, redis_store

MakeGuard = Callable[..., Guard]

# -- a changed limit does not read the state of the old one ----------------------------------


@pytest.mark.parametrize(
    "changed",
    [
        RateLimit(rpm=6, period=6),  # the same rate over a shorter period: a 6 s burst
        RateLimit(rpm=60, burst=0.1),  # a smaller burst
        RateLimit(rpm=30),  # a lower rate
    ],
    ids=["period", "burst", "rpm"],
)
@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_a_changed_limit_starts_from_a_state_of_its_own(
    kind: str, changed: RateLimit, redis_target: RedisTarget
) -> None:
    """A redeploy that changed a route's limit read the old limit's state (its TATs a whole
    old burst ahead): the route was blocked for up to the old burst window (60 s)."""
    url, prefix = redis_target(kind)
    stores = [redis_store(url, prefix) for _ in range(3)]
    try:
        old = RedisRateLimiter(stores[0], {"r": RateLimit(rpm=60)})
        assert old.reserve("r", requests=60).allowed  # its whole burst, 60 s ahead
        assert not old.reserve("r").allowed
        # another process with the same limit (written otherwise) shares its state
        same = RedisRateLimiter(stores[1], {"r": RateLimit(rpm=60.0, period=60)})
        assert not same.reserve("r").allowed
        new = RedisRateLimiter(stores[2], {"r": changed})
        grant = new.reserve("r")
        assert grant.allowed, grant
    finally:
        for store in stores:
            store.close()


def test_a_changed_limit_still_counts_the_calls_in_flight(
    redis_url: str, redis_prefix: str
) -> None:
    """A concurrency cap counts every process's calls in flight, whatever the limit they
    were reserved under (a rolling deploy runs old and new limits at once)."""
    stores = [redis_store(redis_url, redis_prefix) for _ in range(2)]
    try:
        old = RedisRateLimiter(stores[0], {"r": RateLimit(rpm=60, concurrency=1)})
        held = old.reserve("r")
        assert held.allowed
        new = RedisRateLimiter(stores[1], {"r": RateLimit(rpm=30, concurrency=1)})
        refused = new.reserve("r")
        assert (refused.allowed, refused.reason) == (False, "concurrency")
        old.release("r", lease=held.lease or "")
        assert new.reserve("r").allowed
    finally:
        for store in stores:
            store.close()


# -- a bad value's error says what was given --------------------------------------------------


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"rpm": 0}, "RateLimit.rpm must be a positive number, got 0"),
        ({"tpm": -5.5}, "RateLimit.tpm must be a positive number, got -5.5"),
        ({"rpm": float("nan")}, "got nan"),
        ({"rpm": "100"}, "got '100'"),
        ({"concurrency": 1.5}, "RateLimit.concurrency must be a whole number >= 1, got 1.5"),
        ({"rpm": 10, "period": 0}, "RateLimit.period must be a positive number of seconds, got 0"),
        ({"rpm": 10, "burst": 1.5}, "RateLimit.burst must be in (0, 1], got 1.5"),
        ({"rpm": 10, "max_wait": -1}, "got -1"),
        ({"rpm": 10, "batch_headroom": 1}, "got 1"),
        ({"rpm": 10, "max_queue": -1}, "got -1"),
        ({"rpm": 10, "reserve_output_tokens": 10.5}, "got 10.5"),
        ({"rpm": 10, "per_tenant": "yes"}, "got 'yes'"),
        ({"rpm": 10, "lease_seconds": 0}, "got 0"),
        ({"rpm": 10, "max_wait": True}, "got True"),
    ],
)
def test_a_bad_value_is_named_in_its_error(given: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says) + "$"):
        RateLimit(**given)


# -- a token limit smaller than a call's output reservation ----------------------------------


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        (RateLimit(tpm=1000), r"reserve_output_tokens=1024.*tpm 1000 x burst 1"),
        (RateLimit(tpm=20_000, burst=0.05), r"reserve_output_tokens=1024.*tpm 20000 x burst"),
        (RateLimit(output_tpm=500, per_tenant=True), r"reserve_output_tokens=1024.*output_tpm"),
        (  # the largest reservation of the route's limits is the one made
            [RateLimit(tpm=100_000, reserve_output_tokens=4096), RateLimit(tpm=4000)],
            r"reserve_output_tokens=4096.*tpm 4000",
        ),
        (RateLimit(tpm=1200), r"batch call.*reserve_output_tokens=1024.*batch_headroom"),
    ],
    ids=["tpm", "burst", "output_tpm", "largest", "batch"],
)
def test_a_token_limit_smaller_than_the_output_reservation_warns(
    fake: FakeProvider, limits: Any, says: str
) -> None:
    """Every call without max_tokens reserves reserve_output_tokens of output: a tpm whose
    burst holds fewer refused every such call at call time, without a word before."""
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with pytest.warns(
        RateLimitConfigWarning, match=r"rate_limits\['primary'\]: .*" + says
    ) as found:
        guard = Guard([route], rate_limits={"primary": limits}, environ={})
    guard.close()
    assert len(found) == 1
    assert found[0].filename == __file__  # the caller's line: the Guard it built


def test_a_token_limit_with_room_for_the_output_reservation_is_quiet(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard = make_guard(
            fake,
            rate_limits={
                "primary": [
                    RateLimit(tpm=1300),  # a batch call's 80 %: 1,040 of room
                    RateLimit(output_tpm=2000, per_tenant=True),
                    # input tokens (no output reserved); batch_headroom=0: a batch call
                    # fits rpm=1 too (else it warns: see test_ratelimit_limits.py)
                    RateLimit(rpm=1, input_tpm=500, batch_headroom=0),
                ]
            },
        )
    assert guard.chat(USER, max_tokens=5).route == "primary"


# -- a request rate without room for a batch call ---------------------------------------------


@pytest.mark.parametrize(
    ("limit", "says", "fixed"),
    [
        (RateLimit(rpm=1), r"room for 0\.8 of a request.*batch_headroom=0,", 0.0),
        (
            RateLimit(rpm=6, burst=0.2),
            r"rpm=6 with burst=0\.2 .*room for 0\.96 .*batch_headroom=0\.166 or less",
            0.166,
        ),
        (RateLimit(rpm=10, burst=0.1, batch_headroom=0.5), r"room for 0\.5 of a", 0.0),
    ],
    ids=["rpm=1", "burst", "headroom"],
)
def test_a_request_rate_without_room_for_a_batch_call_warns(
    limit: RateLimit, says: str, fixed: float, redis_url: str, redis_prefix: str
) -> None:
    """rpm x burst x (1 - batch_headroom) < 1: every batch call was refused as never
    fitting, without a word before (interactive calls fit). Once per limiter (the Redis
    limiter's own share of it, for an outage, says nothing more), at the caller's line."""
    store = redis_store(redis_url, redis_prefix, local_share=1.0)
    try:
        for build in (MemoryRateLimiter, lambda limits: RedisRateLimiter(store, limits)):
            with pytest.warns(
                RateLimitConfigWarning, match=r"rate_limits\['r'\]: .*" + says
            ) as found:
                limiter = build({"r": limit})
            assert len(found) == 1
            assert found[0].filename == __file__
            assert limiter.reserve("r", priority="batch").reason == "never"
            assert limiter.reserve("r").allowed
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # what the warning suggests is quiet, and fits
            limiter = MemoryRateLimiter({"r": dataclasses.replace(limit, batch_headroom=fixed)})
        assert limiter.reserve("r", priority="batch").allowed
    finally:
        store.close()


def test_a_guards_route_without_room_for_a_batch_call_warns_when_it_is_built(
    fake: FakeProvider,
) -> None:
    """The output reservation's warning says nothing of such a limit (one request is already
    too many for a batch call): this one does."""
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with pytest.warns(RateLimitConfigWarning, match=r"rate_limits\['primary'\]: rpm=1 ") as found:
        guard = Guard([route], rate_limits={"primary": RateLimit(rpm=1, input_tpm=500)}, environ={})
    guard.close()
    assert len(found) == 1
    assert found[0].filename == __file__


def test_a_request_rate_with_room_for_a_batch_call_is_quiet(
    redis_url: str, redis_prefix: str
) -> None:
    store = redis_store(redis_url, redis_prefix, local_share=0.25)  # (shares of rpm=2: 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            limits = {"r": [RateLimit(rpm=2), RateLimit(rpm=60, burst=1 / 48)]}  # 1.6, 1.0
            MemoryRateLimiter(limits)
            limiter = RedisRateLimiter(store, limits)
        assert limiter.reserve("r", priority="batch").allowed
    finally:
        store.close()


# -- a standalone limiter asked for a key it has no limits for --------------------------------


def test_an_unknown_key_warns_once(redis_url: str, redis_prefix: str) -> None:
    """A misspelt key passed every call, silently: its limits never applied."""
    store = redis_store(redis_url, redis_prefix)
    limiters: list[MemoryRateLimiter | RedisRateLimiter] = [
        MemoryRateLimiter({"openai": RateLimit(rpm=1, batch_headroom=0)}),
        RedisRateLimiter(store, {"openai": RateLimit(rpm=1, batch_headroom=0)}),
    ]
    try:
        for limiter in limiters:
            with warnings.catch_warnings(record=True) as found:
                warnings.simplefilter("always")
                assert limiter.reserve("opnai").allowed
                assert limiter.reserve("opnai").allowed  # (once per key)
                limiter.settle("opnai", token_delta=-1)
                limiter.learn("opnai", remaining_requests=0)
            assert [w.category for w in found] == [RateLimitConfigWarning]
            assert re.search(r"'opnai'.*did you mean 'openai'.*\['openai'\]", str(found[0].message))
            assert found[0].filename == __file__  # the caller's line
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert limiter.reserve("openai").allowed  # a configured key: not a word
                assert not limiter.reserve("openai").allowed
    finally:
        store.close()


def test_an_unknown_key_warns_in_async_code_too() -> None:
    import anyio

    limiter = MemoryRateLimiter({"openai": RateLimit(rpm=1, batch_headroom=0)})

    async def reserve() -> bool:
        return (await limiter.areserve("opnai")).allowed

    with pytest.warns(RateLimitConfigWarning, match="'opnai'"):
        assert anyio.run(reserve)


def test_the_unknown_keys_remembered_are_bounded() -> None:
    """Keys made per call (a user id as a key) warn for the first few, not for ever."""
    limiter = MemoryRateLimiter({"openai": RateLimit(rpm=1, batch_headroom=0)})
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        for n in range(1000):
            limiter.reserve(f"user-{n}")
    assert {w.category for w in found} == {RateLimitConfigWarning}
    assert 1 < len(found) < 100
    assert "further" in str(found[-1].message)  # the last says no more will be reported
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        limiter.reserve("user-1000")


def test_the_guards_routes_without_limits_do_not_warn(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """The Guard asks its limiter only about routes with limits (and never through the
    public entry points): a route left unlimited is no misspelt key."""
    guard = make_guard(fake, fake2, rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert guard.chat(USER, max_tokens=5).route == "primary"
        assert guard.chat(USER, max_tokens=5).route == "backup"  # primary: no room
