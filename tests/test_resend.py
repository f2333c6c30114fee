"""A command sent again because its reply was lost: redis-py's cluster client re-sends it
(its retry, and its cluster pipeline whatever the retry), so a script that changes state ran
twice. Each such script now does its change once per command and answers the re-send as it
answered the first time: a budget hold, a rate-limit charge or refund, a breaker permit or
outcome, a deployment lease, a retry token, a canary's counters."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk._state.steps import Step, _execute
from llmguard_sdk.breaker import BreakerPolicy, RedisBreakerBackend
from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisClusterStore, RedisStore, hash_id
from tests.conftest import RawRedis, RedisTarget, redis_store

from .heldanswer import AnswerHeld


class ResendingStore(RedisStore):
    """A single Redis whose client sends a command again when its reply was lost, once (as
    redis-py's cluster client does): the standalone stand-in for a cluster store."""

    resends = True

    def _setup(self) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        super()._setup()
        self._options["retry"] = Retry(NoBackoff(), 1)
        self._pool = redis.BlockingConnectionPool.from_url(self.url, **self._pool_options())

    def _new_async_client(self) -> Any:
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        options = {**self._pool_options(), "retry": Retry(NoBackoff(), 1)}
        pool = redis.asyncio.BlockingConnectionPool.from_url(self.url, **options)
        client = redis.asyncio.Redis(connection_pool=pool)
        client.auto_close_connection_pool = True
        return client


@pytest.fixture(params=["redis", "cluster"])
def store(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[RedisStore]:
    url, prefix = redis_target(request.param)
    made = (
        redis_store(url, prefix)
        if request.param == "cluster"
        else ResendingStore(url, key_prefix=prefix)
    )
    yield made
    made.close()


def resent(store: RedisStore, step: Step[Any]) -> tuple[Any, list[tuple[Any, Any]]]:
    """Run ``step``, sending each of its commands twice, as a client does when the first
    reply was lost: (the step's value, each command's two replies)."""
    replies: list[tuple[Any, Any]] = []
    request = step.send(None)
    while True:
        first = _execute(store, [request])[0]
        again = _execute(store, [request])[0]
        replies.append((first, again))
        try:
            request = step.send(again)
        except StopIteration as finished:
            return finished.value, replies


def counter(
    key: str = "global", limit_usd: float = 1.0, alerts: tuple[float, ...] = ()
) -> CounterSpec:
    return CounterSpec(key, nano(limit_usd), "day", 3600.0, alerts, key, 0)


HOLD: dict[str, Any] = {"base": nano(0.3), "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}


def test_a_resent_budget_reserve_holds_once(store: RedisStore) -> None:
    backend = RedisBudgetBackend(store, name="resend")
    specs = [counter(), counter("tenant.acme")]
    result, replies = resent(store, backend.reserve_steps("r1", specs, **HOLD))
    assert result.allowed
    assert result.amount == nano(0.3)
    assert [first == again for first, again in replies] == [True]
    assert [reserved for _, reserved, _ in backend.status(specs)] == [nano(0.3)] * 2
    assert backend.settle("r1", specs, actual=0, ttl=60.0).applied  # the hold goes, all of it
    assert [reserved for _, reserved, _ in backend.status(specs)] == [0, 0]


def test_a_resent_budget_refusal_keeps_its_alert(store: RedisStore) -> None:
    """The refusal that fires the 100 % alert: the re-send answers it too (it found the alert
    already fired and said nothing)."""
    backend = RedisBudgetBackend(store, name="resend")
    specs = [counter(alerts=(1.0,))]
    assert backend.reserve("r0", specs, **HOLD).allowed
    assert backend.settle("r0", specs, actual=nano(0.8), ttl=60.0).applied
    result, replies = resent(store, backend.reserve_steps("r1", specs, **HOLD))
    assert not result.allowed
    assert result.alerted
    assert [first == again for first, again in replies] == [True]


def test_a_resent_budget_settle_spends_once_and_answers_alike(store: RedisStore) -> None:
    backend = RedisBudgetBackend(store, name="resend")
    specs = [counter(alerts=(0.5,))]
    assert backend.reserve("r1", specs, **HOLD).allowed
    result, replies = resent(store, backend.settle_steps("r1", specs, actual=nano(0.6), ttl=60.0))
    assert result.applied
    assert result.fired == ((0.5,),)
    assert [first == again for first, again in replies] == [True]
    assert backend.status(specs)[0][:2] == (nano(0.6), 0)


def rate_limiter(store: RedisStore) -> RedisRateLimiter:
    return RedisRateLimiter(store, {"route": [RateLimit(tpm=1000, concurrency=5)]})


def test_a_resent_rate_limit_reserve_charges_once(store: RedisStore) -> None:
    limiter = rate_limiter(store)
    grant, replies = resent(store, limiter.reserve_steps("route", tokens=400, lease="call-1"))
    assert grant.allowed
    assert grant.lease == "call-1"
    assert [first == again for first, again in replies] == [True]
    # 400 of the minute's 1000 tokens taken once: 500 more fit (taken twice, they would not)
    assert limiter.reserve("route", tokens=500).allowed
    assert limiter.in_flight("route") == 2


def test_a_resent_rate_limit_refund_refunds_once(store: RedisStore) -> None:
    limiter = rate_limiter(store)
    assert limiter.reserve("route", tokens=900, lease="call-1").allowed
    _, replies = resent(store, limiter.settle_steps("route", token_delta=-300, lease="call-1"))
    assert [first == again for first, again in replies] == [True]
    # 300 of 900 given back once leaves room for 400 of the 1000, not for 700
    assert not limiter.reserve("route", tokens=600).allowed
    assert limiter.reserve("route", tokens=300).allowed


POLICY = BreakerPolicy(minimum_calls=2, window=10, failure_rate=0.5, half_open_permits=2)


def opened(backend: RedisBreakerBackend) -> None:
    """Trip the breaker, then let its open wait pass: the next permit half-opens it."""
    for _ in range(2):
        backend.record("route", "fail")
    assert backend.state("route") == "open"
    backend.clock_offset += POLICY.open_seconds + 1


def test_a_resent_breaker_acquire_takes_one_probe_permit(store: RedisStore) -> None:
    backend = RedisBreakerBackend(store, POLICY)
    opened(backend)
    permit, replies = resent(store, backend.acquire_steps("route"))
    assert permit.allowed
    assert permit.state == "half_open"
    assert [first == again for first, again in replies] == [True]
    assert backend.acquire("route").allowed  # the second of two permits is still there


def test_a_resent_breaker_release_gives_one_permit_back(store: RedisStore) -> None:
    backend = RedisBreakerBackend(store, POLICY)
    opened(backend)
    assert backend.acquire("route").allowed
    assert backend.acquire("route").allowed
    resent(store, backend.release_steps("route"))
    assert backend.acquire("route").allowed
    assert not backend.acquire("route").allowed  # one given back, not two


def test_a_resent_breaker_record_counts_once(store: RedisStore) -> None:
    backend = RedisBreakerBackend(store, POLICY)
    backend.record("route", "ok")
    backend.record("route", "ok")
    state, replies = resent(store, backend.record_steps("route", "fail"))
    assert state == "closed"  # 1 of 3 failed (counted twice: 2 of 4, the rate that trips)
    assert [first == again for first, again in replies] == [True]
    assert backend.state("route") == "closed"


def test_a_resent_reserve_through_a_lost_answer_holds_once(
    redis_url: str, redis_prefix: str
) -> None:
    """End to end: the answer to the reserve is held back by a proxy, the client times out
    and sends the command again on a new connection, which the proxy lets through: the
    budget holds the call's worst case once and the call is granted."""
    specs = [counter()]
    direct = RedisBudgetBackend(RedisStore(redis_url, key_prefix=redis_prefix), name="e2e")

    async def reserve() -> Any:
        proxy = AnswerHeld(redis_url, f"{redis_prefix}:budget:".encode())
        async with proxy as url:
            store = ResendingStore(url, key_prefix=redis_prefix, socket_timeout=0.5)
            backend = RedisBudgetBackend(store, name="e2e")
            try:
                return await backend.areserve("r1", specs, **HOLD)
            finally:
                await store.aclose()

    result = asyncio.run(reserve())
    assert result.allowed
    assert result.amount == nano(0.3)
    assert [reserved for _, reserved, _ in direct.status(specs)] == [nano(0.3)]


def test_a_resent_lease_take_leases_one_deployment(store: RedisStore) -> None:
    """The re-send of a take to the least loaded deployment found the first one's lease and
    leased a second deployment, which nobody gave back until its lease ran out."""
    from llmguard_sdk._state.steps import run
    from llmguard_sdk.router.leases import LeaseAsk, RedisLeases

    leases, names = RedisLeases(store), ["a", "b", "c"]
    taken, replies = resent(store, leases.take_steps(LeaseAsk("g", names, None, 0, "call", 30.0)))
    assert taken == (0, [0, 0, 0])
    assert [first == again for first, again in replies] == [True]
    _, counts = run(leases.take_steps(LeaseAsk("g", names, None, 0, "other", 30.0)))
    assert counts == [1, 0, 0]


def test_a_resent_retry_spend_takes_one_retry(store: RedisStore) -> None:
    from llmguard_sdk.retry import RetryBudgetPolicy
    from llmguard_sdk.retry.redis import RedisRetryBudget

    # no ratio, a floor of two retries per window (a window too long to decay in the test)
    budget = RedisRetryBudget(store, RetryBudgetPolicy(0.0, 0.002, 1000.0))
    spent, replies = resent(store, budget.try_spend_steps("route"))
    assert spent
    assert [first == again for first, again in replies] == [True]
    assert budget.try_spend("route")  # the second of two
    assert not budget.try_spend("route")


def test_a_resent_canary_exchange_adds_its_counters_once(store: RedisStore) -> None:
    from llmguard_sdk.releases import RedisReleaseBackend

    backend = RedisReleaseBackend(store)
    found = backend.exchange("bot", "bot@v2", 0, {}, {})
    assert found.stage is not None
    version = found.stage.version
    step = backend.exchange_steps("bot", "bot@v2", version, {"calls": 3.0}, {"calls": 1.0})
    found, replies = resent(store, step)
    assert (found.control, found.canary) == ({"calls": 3.0}, {"calls": 1.0})
    assert [first == again for first, again in replies] == [True]
    again = backend.exchange("bot", "", version + 1, {}, {})  # read only
    assert (again.control, again.canary) == ({"calls": 3.0}, {"calls": 1.0})
    moved_step = backend.transition_steps("bot", version, 1, "canary", "stage passed")
    (moved, stage), replies = resent(store, moved_step)
    assert moved
    assert stage.version == version + 1
    assert [first == again for first, again in replies] == [True]


def test_what_a_marked_command_leaves_in_redis(redis_url: str, redis_prefix: str) -> None:
    """A key under the command's hash tag that expires after the store's ``resend_seconds``
    where the client re-sends; nothing where it sends each command once."""
    import redis

    client: RawRedis = redis.Redis.from_url(redis_url)
    for made, marked in ((RedisStore, 0), (ResendingStore, 1)):
        store = made(redis_url, key_prefix=redis_prefix)
        assert RedisBudgetBackend(store, name="cost").reserve("r1", [counter()], **HOLD).allowed
        keys = list(client.scan_iter(match=f"{redis_prefix}:once:*"))
        assert len(keys) == marked
        store.close()
    (key,) = keys
    assert 0 < client.ttl(key) <= 10  # the default timeouts: 10 attempts of 1 s at most
    assert key.split(b"{")[1].split(b"}")[0] == hash_id("cost").encode()  # the budget's tag
    client.close()
    assert RedisStore(redis_url).resend_seconds == 0
    cluster = RedisClusterStore("redis+cluster://127.0.0.1:1", socket_timeout=2.0)
    assert cluster.resend_seconds == 40  # 10 x (2 s to connect + 2 s to answer)


@contextlib.contextmanager
def held_node(
    cluster_url: str, prefix: str, specs: list[CounterSpec], holds: int = 1
) -> Iterator[tuple[AnswerHeld, type[RedisClusterStore]]]:
    """The node of the budget's slot reached through a proxy that holds back the answers of
    the first ``holds`` budget commands, and a store class that reaches it so."""
    import threading

    direct_store = RedisClusterStore(cluster_url, key_prefix=prefix)
    direct = RedisBudgetBackend(direct_store, name="e2e")
    node = direct_store.client.get_node_from_key(direct._keys(specs)[0])  # type: ignore[attr-defined]
    direct_store.close()
    held_at = (node.host, node.port)
    proxy = AnswerHeld(f"redis://{node.host}:{node.port}", f"{prefix}:budget:".encode(), holds)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    url = asyncio.run_coroutine_threadsafe(proxy.__aenter__(), loop).result(timeout=10)
    port = int(url.rpartition(":")[2].partition("/")[0])

    def remap(address: tuple[str, int]) -> tuple[str, int]:
        return ("127.0.0.1", port) if address == held_at else address

    class Proxied(RedisClusterStore):
        def _cluster_options(self) -> dict[str, Any]:
            return {**super()._cluster_options(), "address_remap": remap}

    try:
        yield proxy, Proxied
    finally:
        asyncio.run_coroutine_threadsafe(proxy.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def test_the_cluster_client_resends_a_reserve_whose_answer_was_lost_and_it_holds_once(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """End to end on Redis Cluster: the node of the budget's slot is reached through a proxy
    that holds the reserve's answer back; redis-py's (sync) cluster pipeline times out and
    sends the reserve again on a new connection, which the proxy lets through: one hold, and
    the call granted."""
    specs = [counter()]
    with held_node(redis_cluster_url, cluster_prefix, specs) as (proxy, proxied):
        store = proxied(redis_cluster_url, key_prefix=cluster_prefix, socket_timeout=0.5)
        try:
            result = RedisBudgetBackend(store, name="e2e").reserve("r1", specs, **HOLD)
            assert proxy.holding.is_set()  # the first answer was held back
        finally:
            store.close()
    assert result.allowed
    direct_store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    direct = RedisBudgetBackend(direct_store, name="e2e")
    assert [reserved for _, reserved, _ in direct.status(specs)] == [nano(0.3)]
    direct_store.close()


def test_the_cluster_client_sends_nothing_again_once_the_marker_may_have_expired(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """The answers of the reserve and of its first re-send are held back: redis-py's cluster
    client took a new slot map and sent the reserve a third time, after its once-marker (4 s
    here) had expired, and the reserve held the call's worst case twice. Re-sends now stop
    one attempt before ``resend_seconds`` run out: the call is refused (the budget fails
    closed, Redis unreachable), and the first reserve's hold is the only one."""

    specs = [counter()]
    with held_node(redis_cluster_url, cluster_prefix, specs, holds=2) as (proxy, proxied):

        class ShortMarkers(proxied):  # type: ignore[misc, valid-type]
            @property
            def resend_seconds(self) -> int:
                return 4  # between the 1st re-send (3 s on) and the 2nd (6 s on)

        url = f"{redis_cluster_url}?socket_connect_timeout=0.1"
        store = ShortMarkers(url, key_prefix=cluster_prefix, socket_timeout=3.0)
        try:
            result = RedisBudgetBackend(store, name="e2e").reserve("r1", specs, **HOLD)
            assert proxy.holding.is_set()
        finally:
            store.close()
    direct_store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    direct = RedisBudgetBackend(direct_store, name="e2e")
    assert [reserved for _, reserved, _ in direct.status(specs)] == [nano(0.3)]
    direct_store.close()
    assert not result.allowed
    assert proxy.forwarded == 1  # (before: sent 3 times, the 3rd past its marker's life)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_both_cluster_clients_write_nothing_past_the_resend_bound(
    redis_cluster_url: str, cluster_prefix: str, asynchronous: bool
) -> None:
    """The bound holds for the sync client's node pools and for the async client's nodes
    alike: with markers that would outlive no attempt at all, not even the first send goes
    out (the reserve fails closed, nothing is held)."""

    class NoTime(RedisClusterStore):
        @property
        def resend_seconds(self) -> int:
            return 1  # less than one attempt (2 x 1 s)

    specs = [counter()]
    store = NoTime(redis_cluster_url, key_prefix=cluster_prefix, socket_timeout=1.0)
    backend = RedisBudgetBackend(store, name="bound")
    if asynchronous:

        async def reserve() -> Any:
            try:
                return await backend.areserve("r1", specs, **HOLD)
            finally:
                await store.aclose()

        result = asyncio.run(reserve())
    else:
        result = backend.reserve("r1", specs, **HOLD)
        store.close()
    assert not result.allowed
    direct_store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix)
    assert [s[1] for s in RedisBudgetBackend(direct_store, name="bound").status(specs)] == [0]
    direct_store.close()
