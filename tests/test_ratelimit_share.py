"""A process's own share of a limit while Redis is down: a call that fits the whole limit
but not the share still runs (when the share's bucket is full, leaving it in debt), a call
larger than the whole limit never does, and the share's average rate holds.

Redis is down the way tests/test_redis_faults.py makes it: a store on a port where nothing
listens, so every limiter here falls back to its local share.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit
from llmguard_sdk.ratelimit.redis import RedisRateLimiter, share_of
from llmguard_sdk.store import RedisStore

pytestmark = pytest.mark.redis

DOWN = "redis://127.0.0.1:1/0"  # nothing listens there: an outage from the first call
# a tenant's limit of 4,000 tokens a minute: a quarter of it is 1,000 tokens a minute
TENANT_TPM = RateLimit(tpm=4000, per_tenant=True, max_wait=600.0)


@pytest.fixture
def store() -> Iterator[RedisStore]:
    store = RedisStore(DOWN, socket_timeout=0.2, local_share=0.25)
    yield store
    store.close()


def test_a_call_larger_than_the_share_but_within_the_limit_runs_in_an_outage(
    store: RedisStore,
) -> None:
    limiter = RedisRateLimiter(store, {"r": TENANT_TPM})
    grant = limiter.reserve("r", tenant="t", tokens=1224)
    assert grant.allowed, grant  # was: refused "never", retry_after inf
    assert grant.wait == 0.0  # the share's bucket was full
    assert grant.retry_after < math.inf


def test_a_call_larger_than_the_whole_limit_still_never_fits(store: RedisStore) -> None:
    limiter = RedisRateLimiter(store, {"r": TENANT_TPM})
    grant = limiter.reserve("r", tenant="t", tokens=4001)
    assert not grant.allowed
    assert grant.reason == "never"
    assert grant.retry_after == math.inf


def test_oversize_calls_leave_the_share_in_debt_so_its_rate_holds(store: RedisStore) -> None:
    """Each oversize call waits for the share's bucket to refill from the one before: the
    waits the grants schedule keep the tokens sent at the share's rate (1,000 a minute)."""
    limiter = RedisRateLimiter(store, {"r": TENANT_TPM})
    share_seconds_per_token = 60.0 / 1000.0
    sent = 0.0
    for _ in range(4):
        grant = limiter.reserve("r", tenant="t", tokens=1224)
        assert grant.allowed
        # sent tokens beyond one bucket (1,000) must be paid for before this call goes
        assert grant.wait >= (sent - 1000.0) * share_seconds_per_token - 0.5
        sent += 1224
    small = limiter.reserve("r", tenant="t", tokens=10)  # a small call waits for the debt too
    assert small.allowed
    assert small.wait >= (sent - 1000.0) * share_seconds_per_token - 0.5
    # another tenant's share is its own
    assert limiter.reserve("r", tenant="u", tokens=1224).wait == 0.0


def test_without_waiting_an_oversize_call_needs_a_full_bucket(store: RedisStore) -> None:
    limiter = RedisRateLimiter(store, {"r": RateLimit(tpm=4000)})
    assert limiter.reserve("r", tokens=100).allowed
    late = limiter.reserve("r", tokens=1224)  # the bucket is not full: wait for it
    assert not late.allowed
    assert late.reason == "rate"
    assert 0.0 < late.retry_after <= 100 * 60.0 / 1000.0 + 0.5


def test_input_output_and_request_limits_keep_one_call_of_the_whole_limit(
    store: RedisStore,
) -> None:
    limits = [
        RateLimit(input_tpm=2000, output_tpm=1000, max_wait=600.0),
        RateLimit(
            rpm=2, burst=0.5, max_wait=600.0, batch_headroom=0
        ),  # one request a burst; a quarter: 1/2
    ]
    limiter = RedisRateLimiter(store, {"r": limits})
    grant = limiter.reserve("r", input_tokens=1500, output_tokens=800)
    assert grant.allowed, grant
    over = limiter.reserve("r", input_tokens=2001, output_tokens=10)
    assert (over.allowed, over.reason) == (False, "never")


def test_the_share_of_a_limit_alone_admits_one_call_of_the_whole_burst() -> None:
    now = [0.0]
    limit = RateLimit(tpm=4000, burst=0.5)  # a burst of 2,000; a quarter: 500
    limiter = MemoryRateLimiter({"r": share_of(limit, 0.25)}, clock=lambda: now[0])
    assert limiter.reserve("r", tokens=2000).allowed
    assert limiter.reserve("r", tokens=2001).reason == "never"
    assert not limiter.reserve("r", tokens=1).allowed  # in debt: 2,000 tokens at 1,000/min
    now[0] = 120.0 - 15.0  # debt paid at 2 minutes; a 1-token call may borrow 15 s of burst
    assert limiter.reserve("r", tokens=1).allowed
    # the full limit itself (no share) keeps refusing what its burst cannot hold
    assert MemoryRateLimiter({"r": limit}).reserve("r", tokens=2001).reason == "never"


def test_in_flight_in_an_outage_counts_this_processs_calls(store: RedisStore) -> None:
    """``in_flight`` with Redis down raised redis-py's ConnectionError (outside the SDK's
    errors) where every other call of the limiter falls back: it counts the leases this
    process holds in its own share."""
    limiter = RedisRateLimiter(store, {"r": RateLimit(concurrency=8)})
    held = limiter.reserve("r")
    assert held.allowed
    assert limiter.in_flight("r") == 1  # the process's own share holds the lease
    limiter.release("r", lease=str(held.lease))
    assert limiter.in_flight("r") == 0


def test_a_batch_call_that_never_fits_with_redis_up_never_fits_in_an_outage(
    store: RedisStore, redis_url: str, redis_prefix: str
) -> None:
    """A batch call larger than the batch share of the whole burst (4,000 tokens less
    ``batch_headroom`` 0.2: 3,200) is refused as ``never`` with Redis up; the share's ceiling
    was the whole (interactive) burst, so with Redis down it ran, in debt."""
    limits = {"r": RateLimit(tpm=4000, max_wait=600.0)}
    up = RedisStore(redis_url, key_prefix=redis_prefix)
    try:
        shared = RedisRateLimiter(up, limits).reserve("r", tokens=3500, priority="batch")
    finally:
        up.close()
    alone = RedisRateLimiter(store, limits).reserve("r", tokens=3500, priority="batch")
    assert (shared.allowed, shared.reason, shared.retry_after) == (False, "never", math.inf)
    assert (alone.allowed, alone.reason, alone.retry_after) == (False, "never", math.inf)
    # as an interactive call it fits both ways (in the share: in debt)
    assert RedisRateLimiter(store, limits).reserve("r", tokens=3500).allowed
    # a batch call within the batch share of the whole burst still runs in an outage
    assert RedisRateLimiter(store, limits).reserve("r", tokens=3200, priority="batch").allowed
