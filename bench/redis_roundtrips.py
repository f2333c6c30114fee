"""Round trips and commands a guarded call sends to Redis, and the latency Redis adds.

What is measured
----------------
A :class:`~llmguard_sdk.testing.FakeProvider` on loopback answers every call. A Guard with
every Redis stage on (rate limits with tokens, circuit breakers, the retry budget, a spend
budget per tenant and the response cache) sends ``calls`` calls, each with a new prompt, so
the exact cache misses and every stage does its work: cache lookup, budget reserve, breaker
permit, rate-limit reserve, the provider call, then the settles, records and the cache store.

Round trips are counted by wrapping redis-py's connections in this process
(tools/roundtrips.py): a round trip is a wait for Redis, one or more packed writes sent
before any answer is read (a pipeline to one node is one write; a Cluster pipeline writes to
each node it touches, then reads them all: one round trip, several writes); every command
packed is one command. Calls run after ``warmup`` calls, so scripts are loaded and the
cache's change stream is read; its periodic re-read (``sync_interval``) rides along with a
call's first round trip.

* ``round_trips_per_call`` / ``writes_per_call`` / ``commands_per_call``: per store kind
  (``standalone``, a local Redis; ``cluster``, a throwaway 3-master cluster from
  tools/redis_cluster.py; its writes are one per node a round trip touches).
* ``added_ms``: median latency of a call with that store minus the median with
  ``store="memory"`` (same provider, same stages); loopback Redis, so this is the SDK's
  client-side cost plus loopback latency, not a network's.
* ``memory_ms``: the median call latency in memory mode.

Usage: python bench/redis_roundtrips.py [--json] [--quick] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import redis_cluster
import with_redis
from _benchkit import print_result
from roundtrips import RoundTrips

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})


def guard_for(fake: FakeProvider, store: str, prefix: str) -> Guard:
    """A Guard with every stage that keeps state in the store."""
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        store=store,
        key_prefix=prefix,
        rate_limits={"primary": RateLimit(rpm=1_000_000, tpm=1_000_000_000)},
        budgets=Budgets([Budget(1_000_000.0, scope="tenant")], prices=PRICES),
        cache=True,
        environ={},
    )


def measure(fake: FakeProvider, store: str, calls: int, warmup: int) -> dict[str, float]:
    """Latency (ms, median) and Redis round trips, writes and commands per call for one
    store."""
    prefix = f"bench-rt-{uuid.uuid4().hex[:8]}"
    guard = guard_for(fake, store, prefix)
    run = uuid.uuid4().hex[:6]
    for index in range(warmup):
        guard.chat([{"role": "user", "content": f"warm {run} {index}"}], tenant="t", max_tokens=8)
    latencies = []
    rounds = writes = commands = 0
    for index in range(calls):
        with RoundTrips() as counted:
            started = time.perf_counter()
            guard.chat(
                [{"role": "user", "content": f"ask {run} {index}"}], tenant="t", max_tokens=8
            )
            latencies.append((time.perf_counter() - started) * 1000)
        rounds += counted.round_trips
        writes += counted.writes
        commands += counted.commands
    found = {
        "ms": statistics.median(latencies),
        "round_trips": rounds / calls,
        "writes": writes / calls,
        "commands": commands / calls,
    }
    if isinstance(guard.store, RedisStore):
        client = guard.store.client
        for key in client.scan_iter(match=f"{prefix}:*", count=500):
            client.delete(key)
    guard.close()
    return found


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="a few calls (a smoke test)")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    args = parser.parse_args(argv)
    calls, warmup = (20, 3) if args.quick else (300, 20)
    url = args.redis_url or with_redis.DEFAULT_URL
    result: dict[str, Any] = {"calls": calls}
    with contextlib.ExitStack() as stack:
        if not with_redis.answers(url):
            url = stack.enter_context(with_redis.throwaway())
        fake = stack.enter_context(FakeProvider(model="fake-model", name="primary"))
        cluster = stack.enter_context(redis_cluster.RedisCluster())
        memory = measure(fake, "memory", calls, warmup)
        standalone = measure(fake, url, calls, warmup)
        clustered = measure(fake, cluster.url, calls, warmup)
    result["round_trips_per_call"] = {
        "standalone": round(standalone["round_trips"], 2),
        "cluster": round(clustered["round_trips"], 2),
    }
    result["writes_per_call"] = {
        "standalone": round(standalone["writes"], 2),
        "cluster": round(clustered["writes"], 2),
    }
    result["commands_per_call"] = {
        "standalone": round(standalone["commands"], 2),
        "cluster": round(clustered["commands"], 2),
    }
    result["added_ms"] = {
        "standalone": round(standalone["ms"] - memory["ms"], 3),
        "cluster": round(clustered["ms"] - memory["ms"], 3),
    }
    result["memory_ms"] = round(memory["ms"], 3)
    result["target_round_trips"] = 2
    print_result(result, args.json)
    return result


if __name__ == "__main__":
    main()
