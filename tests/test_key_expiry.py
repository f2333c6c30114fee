"""Every key the Redis stages write expires (per-tenant state too, once idle): each path of
the budgets, rate limits, breakers, retry budget and leases is run once, then no key of the
prefix may be left without a TTL. (A breaker isolated by hand is the one key meant to stay:
until it is reset.)"""

from __future__ import annotations

from typing import Any

import redis

from llmguard_sdk._state.steps import run
from llmguard_sdk.breaker import BreakerPolicy, RedisBreakerBackend
from llmguard_sdk.budget import RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter
from llmguard_sdk.retry import RetryBudgetPolicy
from llmguard_sdk.retry.redis import RedisRetryBudget
from llmguard_sdk.router.leases import LeaseAsk, RedisLeases
from llmguard_sdk.store import RedisStore

from .conftest import RawRedis

SPECS = [
    CounterSpec("global", nano(1.0), "day", 3600.0, (0.5, 1.0), "global", 0),
    CounterSpec("tenant.t1", nano(0.5), "month", 3600.0, (1.0,), "tenant", 0),
    CounterSpec("user.u1", nano(0.5), "rolling", 3600.0, (0.5,), "user", 0),
]
FAQ = "How do I reset my password on the mobile app?"
HOLD: dict[str, Any] = {"per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}


def exercise(store: RedisStore) -> None:
    budgets = RedisBudgetBackend(store, name="expiry")
    assert budgets.reserve("r1", SPECS, base=nano(0.3), **HOLD).allowed
    budgets.settle("r1", SPECS, actual=nano(0.3), ttl=60.0)
    assert not budgets.reserve("r2", SPECS, base=nano(0.4), **HOLD).allowed  # refused
    budgets.reserve("r3", SPECS, base=nano(0.1), **HOLD)
    budgets.status(SPECS)
    limits = {
        "route": [
            RateLimit(rpm=100, tpm=10_000, per_tenant=True),
            RateLimit(concurrency=1, max_queue=3, max_wait=5.0),
        ],
        "split": [RateLimit(input_tpm=1000, output_tpm=1000, per_tenant=True)],
    }
    limiter = RedisRateLimiter(store, limits)
    assert limiter.reserve("route", tokens=100, tenant="t1", lease="c1").allowed
    limiter.reserve("route", tokens=100, tenant="t2", lease="c2")  # waits for the slot
    limiter.learn("route", remaining_requests=5, remaining_tokens=100, pause=2.0)
    limiter.settle("route", tenant="t1", token_delta=-50, lease="c1")
    limiter.release("route", tenant="t2", lease="c2")
    limiter.reserve("split", input_tokens=10, output_tokens=10, tenant="t3", lease="x")
    limiter.settle("split", tenant="t3", input_delta=5, output_delta=-5, lease="x")
    policy = BreakerPolicy(minimum_calls=2, window=10, failure_rate=0.5, half_open_permits=2)
    breakers = RedisBreakerBackend(store, policy)
    for outcome in ("ok", "fail", "fail"):
        breakers.record("a", outcome)
    breakers.clock_offset += policy.open_seconds + 1
    breakers.acquire("a")
    breakers.acquire("a")
    breakers.release("a")
    breakers.record("a", "ok")
    breakers.record("b", "rate_limited", 3.0)
    breakers.end_open_wait("b")
    RedisRetryBudget(store, RetryBudgetPolicy(0.1, 1.0, 10.0)).try_spend("route")
    run(RedisLeases(store).take_steps(LeaseAsk("g", ["a", "b"], None, 0, "call", 30.0)))


def test_every_key_the_stages_write_expires(redis_url: str, redis_prefix: str) -> None:
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    exercise(store)
    store.close()
    client = redis.Redis.from_url(redis_url)
    keys = [key.decode() for key in client.scan_iter(match=f"{redis_prefix}:*")]
    kinds = {key.split(":")[1] for key in keys}
    assert kinds >= {"budget", "rl", "cb", "rb", "rt"}  # each stage wrote
    assert [key for key in keys if client.ttl(key) == -1] == []
    client.close()


def exercise_cache(url: str, prefix: str, *, server: bool) -> None:
    """Every path of the response cache's scripts: stores, hits, an eviction, the read of an
    entry gone before its id left the LRU, another process's sync, a clear and a store after it."""
    from llmguard_sdk.cache import ResponseCache
    from llmguard_sdk.models import ChatRequest, ChatResponse, Message

    def ask(text: str) -> ChatRequest:
        return ChatRequest(messages=[Message(role="user", content=text)], model="m")

    mode = "server" if server else "local"
    options: dict[str, object] = {"key_prefix": prefix, "vector_search": mode, "max_entries": 2}
    cache = ResponseCache(url, sync_interval=0.0, **options)  # type: ignore[arg-type]
    other = ResponseCache(url, sync_interval=0.0, **options)  # type: ignore[arg-type]
    questions = ["Where is my parcel?", "Can I pay by card?", FAQ]
    for question in questions:
        assert cache.store(ask(question), ChatResponse(text="a", finish_reason="stop"))
    assert cache.lookup(ask(questions[-1])) is not None
    assert other.lookup(ask("How can I reset my password in the mobile app?")) is not None
    client = redis.Redis.from_url(url)
    (entry,) = client.scan_iter(match=f"{prefix}:cache:*:e:{cache.keys(ask(questions[1])).exact}")
    client.delete(entry)  # as if it expired: its id is still in the LRU
    assert cache.lookup(ask(questions[1])) is None
    client.close()
    cache.clear()
    assert other.lookup(ask(questions[-1])) is None
    assert cache.store(ask(questions[0]), ChatResponse(text="b", finish_reason="stop"))
    other.close()
    cache.close()


def test_every_key_the_response_cache_writes_expires(redis_url: str, redis_prefix: str) -> None:
    """The cache's LRU set, its use counter and its change stream had no expiry: a namespace
    left idle (a cache's namespace renamed, a service retired) kept them for good, the
    stream with up to ``2 x max_entries`` vectors of entries long dead. They now live as long
    as the namespace's longest-lived entry."""
    exercise_cache(redis_url, redis_prefix, server=False)
    client = redis.Redis.from_url(redis_url)
    keys = [key.decode() for key in client.scan_iter(match=f"{redis_prefix}:cache:*")]
    assert {key.rsplit(":", 1)[-1] for key in keys} >= {"lru", "uses", "log"}
    assert [key for key in keys if client.ttl(key) == -1] == []
    client.close()


def test_every_key_of_the_server_side_search_expires(redis8_url: str) -> None:
    """With server-side search the hash of entry ids to partitions too (``vix``)."""
    exercise_cache(redis8_url, "exp-vs", server=True)
    client = redis.Redis.from_url(redis8_url)
    keys = [key.decode() for key in client.scan_iter(match="exp-vs:cache:*")]
    assert {key.rsplit(":", 1)[-1] for key in keys} >= {"lru", "uses", "log", "vix"}
    assert [key for key in keys if client.ttl(key) == -1] == []
    client.close()


def test_a_reader_of_a_change_log_that_expired_loads_the_live_entries(
    redis_url: str, redis_prefix: str
) -> None:
    """The change log expires with the namespace's longest-lived entry; a process still
    holding its cursor into it sees a log written again after it as trimmed: it forgets
    what it indexed and loads the live entries (a stale index entry would never be dropped)."""
    from llmguard_sdk.cache import ResponseCache
    from llmguard_sdk.models import ChatRequest, ChatResponse, Message

    def ask(text: str) -> ChatRequest:
        return ChatRequest(messages=[Message(role="user", content=text)], model="m")

    writer = ResponseCache(redis_url, key_prefix=redis_prefix, guards=False)
    reader = ResponseCache(redis_url, key_prefix=redis_prefix, guards=False, sync_interval=0.0)
    assert writer.store(ask("Where is my parcel?"), ChatResponse(text="a", finish_reason="stop"))
    assert reader.lookup(ask("Where is my parcel now?")) is not None  # indexed from the log
    old = writer.keys(ask("Where is my parcel?")).exact
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{redis_prefix}:cache:*"):
        client.delete(key)  # as if every key expired
    client.close()
    assert writer.store(ask(FAQ), ChatResponse(text="b", finish_reason="stop"))
    reader._sync()  # (a lookup's own sync goes out beside its search, not before it)
    hit = reader.lookup(ask("How can I reset my password in the mobile app?"))
    assert hit is not None
    assert hit.response.text == "b"
    assert old not in reader._local.index_of
    writer.close()
    reader.close()


def test_a_long_rolling_windows_buckets_outlive_their_last_bucket(
    redis_url: str, redis_prefix: str
) -> None:
    """A 30-day rolling window's buckets are 12 h wide and its spend counts up to 30.5 days:
    the keys were kept 30 days and an hour from the last spend, and took it with them."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    month = CounterSpec("m", nano(1.0), "rolling", 30 * 86400.0, (), "global", 0)
    budgets = RedisBudgetBackend(store, name="long")
    assert budgets.reserve("r1", [month], base=nano(0.3), **HOLD).allowed
    budgets.settle("r1", [month], actual=nano(0.3), ttl=60.0)
    store.close()
    client: RawRedis = redis.Redis.from_url(redis_url)
    (buckets,) = client.scan_iter(match=f"{redis_prefix}:budget:*:b:m")
    assert client.ttl(buckets) >= 30.5 * 86400
    client.close()
