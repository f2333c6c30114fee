"""A guarded call's round trips to Redis within its deadline, for every stage: spend budgets
and rate limits wait for a Redis that does not answer no longer than the call's deadline leaves
them (as the response cache does, tests/test_cache_deadline.py), each then deciding as it does
with Redis away; a sync Redis Cluster client's waits for its nodes are bounded too; and a Redis
that no call's round trip reaches in time is paused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, RedisBudgetBackend
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import BudgetUnavailableError
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisClusterStore, RedisStore
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.tokens import count_request_tokens
from tests.test_budget_guard import PRICES
from tests.test_cache import FAQ, answer, ask
from tests.test_cache_construction import SilentServer

USER = [{"role": "user", "content": "hello"}]
SLACK = 0.25  # seconds a loaded test machine may add to a bound
TIMEOUT = 0.6  # the calls' deadline: much shorter than the store's socket timeout
SOCKET_TIMEOUT = 3.0


@pytest.fixture
def silent(fake: FakeProvider) -> Iterator[SilentServer]:
    """A Redis host that accepts connections and never answers; the token counter's first use
    done (it reads its encoding then, most of a second of CPU inside the first budgeted or
    rate-limited call's deadline)."""
    count_request_tokens(USER, fake.model)
    with SilentServer() as server:
        yield server


def _store(port: int, tmp_path: Path) -> RedisStore:
    return RedisStore(
        f"redis://127.0.0.1:{port}/0",
        key_prefix="deadline",
        socket_timeout=SOCKET_TIMEOUT,
        journal_dir=str(tmp_path),
    )


def _guard(fake: FakeProvider, store: RedisStore, **stages: object) -> Guard:
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    return Guard([provider], store=store, environ={}, timeout=TIMEOUT, **stages)  # type: ignore[arg-type]


def _timed(guard: Guard, mode: str) -> tuple[str, float]:
    """The route that answered one call (sync or async) and the seconds it took."""

    async def acall() -> str:
        return (await guard.achat(USER, max_tokens=3)).route

    started = time.monotonic()
    route = guard.chat(USER, max_tokens=3).route if mode == "sync" else anyio.run(acall)
    return route, time.monotonic() - started


def _journal(guard: Guard) -> int:
    spend = guard._stages.spend
    assert spend is not None
    assert isinstance(spend.backend, RedisBudgetBackend)
    return spend.backend.journal.pending


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stage", ["budget", "rate limit"])
def test_a_silent_redis_leaves_a_short_call_time_for_its_provider(
    fake: FakeProvider, silent: SilentServer, tmp_path: Path, stage: str, mode: str
) -> None:
    """``Guard(timeout=0.6)`` with a Redis spend budget (failing open), or a Redis rate limit,
    over a Redis that never answered: the reservation (and the breaker's permit beside it)
    waited the store's socket timeout (3 s) and the call raised ProviderTimeoutError without
    asking its provider. The opening round trip now waits half of what the deadline leaves
    (then the budget counts locally, the rate limit takes this process's share, as with Redis
    away), the settles after the answer what is left; the spend is journaled for Redis, not
    lost."""
    store = _store(silent.port, tmp_path)
    if stage == "budget":
        budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES, fail_open=True)
        guard = _guard(fake, store, budgets=budgets)
    else:
        guard = _guard(fake, store, rate_limits={"primary": RateLimit(rpm=600, concurrency=4)})
    try:
        route, took = _timed(guard, mode)
        assert route == "primary"
        assert took < TIMEOUT + SLACK
        assert silent.accepted >= 1  # (Redis was asked)
        assert fake.stats.requests == 1
        if stage == "budget":
            assert _journal(guard) == 1  # the settle that Redis did not answer in time
        assert store.health.failures == 0  # the call's time was up: Redis not paused
    finally:
        guard.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fail_closed_budget_over_a_silent_redis_refuses_within_the_deadline(
    fake: FakeProvider, silent: SilentServer, tmp_path: Path, mode: str
) -> None:
    """Failing closed, the call is refused as with Redis away, within its deadline (it waited
    3 s, then ran out of time), saying why."""
    store = _store(silent.port, tmp_path)
    guard = _guard(fake, store, budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES))
    try:
        started = time.monotonic()
        with pytest.raises(BudgetUnavailableError, match="deadline") as refused:
            _timed(guard, mode)
        assert time.monotonic() - started < TIMEOUT + SLACK
        assert refused.value.retry_after == 0  # (Redis not paused: the next call tries it)
        assert fake.stats.requests == 0
        assert store.health.failures == 0
    finally:
        guard.close()


def test_a_redis_that_no_call_reaches_in_time_is_paused(
    fake: FakeProvider, silent: SilentServer, tmp_path: Path
) -> None:
    """Short calls over a hung Redis each paid half their deadline for it, without end: none
    of their round trips failed for Redis (their time was up), so Redis was never paused.
    A few round trips in a row cut short, none answered, now pause it as a failure does: the
    next calls decide locally at once."""
    store = _store(silent.port, tmp_path)
    guard = _guard(fake, store, rate_limits={"primary": RateLimit(rpm=600)})
    try:
        for _ in range(3):
            assert _timed(guard, "sync")[0] == "primary"
        assert store.health.failures >= 1
        accepted = silent.accepted
        route, took = _timed(guard, "sync")
        assert route == "primary"
        assert took < TIMEOUT / 4  # (nothing waited for Redis)
        assert silent.accepted == accepted
    finally:
        guard.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_short_deadline_still_settles_in_a_redis_that_answers(
    fake: FakeProvider, redis_url: str, redis_prefix: str, tmp_path: Path, mode: str
) -> None:
    """The bounds are what the deadline leaves, not a refusal to wait: a Redis that answers
    in time holds and settles the spend as before (nothing journaled)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    guard = _guard(fake, store, budgets=budgets, rate_limits={"primary": RateLimit(rpm=600)})
    try:
        for _ in range(2):
            assert _timed(guard, mode)[0] == "primary"
        assert _journal(guard) == 0
        assert guard.budget_status()[0]["spent_usd"] > 0
        assert store.health.failures == 0
    finally:
        guard.close()


@pytest.mark.cluster
def test_a_sync_lookup_on_a_paused_cluster_keeps_to_its_deadline(
    redis_cluster_url: str, cluster_prefix: str
) -> None:
    """A sync cluster client waited its socket timeouts whatever the call's deadline (2 s
    here, then a slot map asked of each node in turn); its nodes' waits are now bounded as a
    single Redis's are: its masters hold every command back (``CLIENT PAUSE``)."""
    import redis

    store = RedisClusterStore(redis_cluster_url, key_prefix=cluster_prefix, socket_timeout=2.0)
    cache = ResponseCache(store, sync_interval=0.0)
    nodes = [n.rpartition(":") for n in urlsplit(redis_cluster_url).netloc.split(",")]
    masters = [redis.Redis(host=host, port=int(port)) for host, _, port in nodes]
    try:
        assert cache.store(ask(FAQ), answer("a"))  # (the slot map, the connections)
        for master in masters:
            master.client_pause(1500, all=True)
        started = time.monotonic()
        assert cache.lookup(ask(FAQ), deadline=started + 0.4) is None
        took = time.monotonic() - started
    finally:
        for master in masters:
            master.client_unpause()
            master.close()
    try:
        assert took < 0.2 + SLACK
        assert (store.health.failures, cache.stats.errors) == (0, 1)
    finally:
        cache.close()
