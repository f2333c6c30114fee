"""Many processes race one tenant budget through Redis: reserve-then-settle against a naive
check-then-record budget.

What is measured
----------------
One :class:`~llmguard_sdk.testing.FakeProvider` runs in the parent; its ``reply`` callback
answers with a random number of words (seeded), so calls use varied output tokens, and each
call sends a random prompt (``min_words``..``max_words`` common one-token words) with a random
``max_tokens`` (``min_max_tokens``..``max_max_tokens``). Prices: the model costs
``input_per_m`` / ``output_per_m`` USD per million tokens.

Phase ``guard``: ``processes`` worker processes (multiprocessing, spawn), each running
``concurrency`` concurrent calls (asyncio tasks) through its own Guard with
``store=<redis url>`` and ``budgets=Budgets([Budget(limit_usd, scope="tenant")])``: every
call reserves its worst case (input counted + ``max_tokens`` at the output price) on the one
tenant budget in Redis before it is sent, and settles to its cost afterwards. A task whose call
is refused (``BudgetExceededError``) sleeps ``refusal_pause_s`` and tries again; after
``refusals_to_stop`` refusals in a row it stops.

Phase ``naive``: the same processes, tasks and draws with the budget done as LiteLLM's SDK
budgets do it: read the tenant's spend (one Redis ``GET``), send the call if it is under the
limit, add the call's cost afterwards (``INCRBYFLOAT``). Nothing is held while a call is in
flight, so concurrent calls all pass the check before any of them is recorded.

* ``settled_usd``: what the provider billed in the guard phase: its own token counters
  (``ProviderStats.input_tokens`` / ``output_tokens``) times the prices. ``budget_counter_usd``
  is what the budget's Redis counter settled to (the two agree when every cost is settled).
* ``overspend_usd``: ``max(0, settled_usd - limit_usd)``; target exactly 0.
* ``utilisation``: ``settled_usd / limit_usd``; target at least 0.95 when calls are refused.
* ``refused``: attempts refused for the limit (every retry of a refused task counts);
  ``refused_unavailable``: attempts refused because Redis did not answer in time (the budget
  fails closed; expected 0 on a quiet machine); ``refused_tasks`` the tasks that stopped
  because of refusals.
* ``naive_settled_usd`` / ``naive_overspend_usd``: the same for the naive phase.

Redis: ``--redis-url``, else ``REDIS_URL``, else a throwaway ``redis-server`` started for the
run; every key the run writes is under a random prefix that is deleted at the end, whatever the
end. The worker processes are stopped on every exit path (SIGTERM included; a watchdog stops
them if this process is killed outright).

Usage: python bench/budget_race.py [--json] [--quick] [--seed N] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis
from _benchkit import delete_prefix, exit_on_signals, given_redis, start_processes, stop_processes

from llmguard_sdk import (
    BudgetExceededError,
    BudgetUnavailableError,
    Guard,
    OpenAICompatibleProvider,
    RedisStore,
)
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider

MODEL = "bench-model"
TENANT = "race-tenant"
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
]


@dataclass(frozen=True)
class Config:
    """What one run does (see the module docstring)."""

    processes: int = 8
    concurrency: int = 50
    limit_usd: float = 1.0
    input_per_m: float = 2.5
    output_per_m: float = 10.0
    min_words: int = 20
    max_words: int = 400
    min_max_tokens: int = 50
    max_max_tokens: int = 400
    min_reply_words: int = 10
    max_reply_words: int = 500
    refusal_pause_s: float = 0.02
    refusals_to_stop: int = 3
    seed: int = 7
    timeout_s: float = 240.0


def prices(config: Config) -> PriceTable:
    """The price table every Guard of the run uses."""
    return PriceTable({MODEL: Price(input=config.input_per_m, output=config.output_per_m)})


def worker(
    mode: str, number: int, config: Config, base_url: str, redis_url: str, prefix: str, out: Any
) -> None:
    """One process: ``concurrency`` tasks calling until refused ``refusals_to_stop`` times."""
    result = asyncio.run(_process(mode, number, config, base_url, redis_url, prefix))
    out.put(result)


async def _process(
    mode: str, number: int, config: Config, base_url: str, redis_url: str, prefix: str
) -> dict[str, Any]:
    rng = random.Random(config.seed * 1000 + number)
    budgets = (
        Budgets(
            [Budget(limit_usd=config.limit_usd, scope="tenant")],
            prices=prices(config),
            runaway_factor=None,
            hold_seconds=30,
        )
        if mode == "guard"
        else None
    )
    journal = tempfile.mkdtemp(prefix="llmguard-bench-journal-")  # never the user's cache
    guard = Guard(
        OpenAICompatibleProvider(base_url, model=MODEL, name="fake"),
        store=RedisStore(redis_url, key_prefix=prefix, journal_dir=journal),
        budgets=budgets,
        prices=prices(config),
        retry=None,
        breaker=None,
        timeout=30,
        environ={},
    )
    naive = redis.asyncio.Redis.from_url(redis_url)
    naive_key = f"{prefix}:naive:{{spent}}"
    counts = {
        "served": 0,
        "refused": 0,
        "unavailable": 0,
        "refused_tasks": 0,
        "errors": 0,
        "cost_usd": 0.0,
    }

    async def task() -> None:
        refusals = 0
        while refusals < config.refusals_to_stop:
            words = rng.randint(config.min_words, config.max_words)
            messages = [{"role": "user", "content": " ".join(rng.choices(_WORDS, k=words))}]
            max_tokens = rng.randint(config.min_max_tokens, config.max_max_tokens)
            if mode == "naive" and float(await naive.get(naive_key) or 0) >= config.limit_usd:
                refusals += 1
                counts["refused"] += 1
                await asyncio.sleep(config.refusal_pause_s)
                continue
            try:
                answer = await guard.achat(messages, max_tokens=max_tokens, tenant=TENANT)
            except BudgetUnavailableError:  # Redis did not answer in time: not the limit
                refusals += 1
                counts["unavailable"] += 1
                await asyncio.sleep(config.refusal_pause_s)
                continue
            except BudgetExceededError:
                refusals += 1
                counts["refused"] += 1
                await asyncio.sleep(config.refusal_pause_s)
                continue
            except Exception:
                counts["errors"] += 1
                return
            refusals = 0
            counts["served"] += 1
            cost = answer.cost_usd or 0.0
            counts["cost_usd"] += cost
            if mode == "naive":
                await naive.incrbyfloat(naive_key, cost)
        counts["refused_tasks"] += 1

    try:
        await asyncio.gather(*(task() for _ in range(config.concurrency)))
    finally:
        await naive.aclose()
        await guard.aclose()  # replays spend journaled while Redis did not answer in time
        shutil.rmtree(journal, ignore_errors=True)
    return counts


def _reply(config: Config) -> Any:
    rng = random.Random(config.seed)
    lock = threading.Lock()

    def reply(body: dict[str, Any]) -> str:
        with lock:
            count = rng.randint(config.min_reply_words, config.max_reply_words)
        return " ".join(["word"] * count)

    return reply


def run_phase(mode: str, config: Config, redis_url: str) -> dict[str, Any]:
    """One phase: processes racing one budget; what the provider billed and each saw."""
    prefix = f"llmguard-bench-{secrets.token_hex(6)}"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    started = time.monotonic()
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    processes: list[Any] = []
    finished = False
    try:
        with FakeProvider(model=MODEL, name="fake", reply=_reply(config)) as api:
            try:
                processes = [
                    context.Process(
                        target=worker,
                        args=(mode, n, config, api.base_url, redis_url, prefix, out),
                        daemon=True,
                    )
                    for n in range(config.processes)
                ]
                start_processes(processes)
                results = []
                deadline = time.monotonic() + config.timeout_s
                for _ in processes:
                    results.append(out.get(timeout=max(1.0, deadline - time.monotonic())))
                finished = True
            finally:
                stop_processes(processes, 30.0 if finished else 0.5)
            stats = api.stats
        counter = None
        if mode == "guard":
            for key in client.scan_iter(match=f"{prefix}:budget:*:c:*"):
                counter = int(client.hget(key, "s") or 0) / 1e9
    finally:
        delete_prefix(client, f"{prefix}:")
        client.close()
    billed = stats.input_tokens * config.input_per_m + stats.output_tokens * config.output_per_m
    billed /= 1e6
    return {
        "settled_usd": billed,
        "budget_counter_usd": counter,
        "served": sum(r["served"] for r in results),
        "refused": sum(r["refused"] for r in results),
        "refused_unavailable": sum(r["unavailable"] for r in results),
        "refused_tasks": sum(r["refused_tasks"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "responses_cost_usd": sum(r["cost_usd"] for r in results),
        "provider_requests": stats.requests,
        "seconds": time.monotonic() - started,
    }


def run(config: Config, redis_url: str) -> dict[str, Any]:
    """Both phases, and the figures the README quotes."""
    guarded = run_phase("guard", config, redis_url)
    naive = run_phase("naive", config, redis_url)
    limit = config.limit_usd
    return {
        "limit_usd": limit,
        "settled_usd": round(guarded["settled_usd"], 6),
        "overspend_usd": round(max(0.0, guarded["settled_usd"] - limit), 6),
        "utilisation": round(guarded["settled_usd"] / limit, 4),
        "refused": guarded["refused"],
        "refused_unavailable": guarded["refused_unavailable"],
        "naive_settled_usd": round(naive["settled_usd"], 6),
        "naive_overspend_usd": round(max(0.0, naive["settled_usd"] - limit), 6),
        "guard": guarded,
        "naive": naive,
        "config": asdict(config),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench; print JSON (``--json``) or a short summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="2 processes x 10 calls, $0.10")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--redis-url", default=None, help="the Redis to use (default: REDIS_URL, else a throwaway)"
    )
    args = parser.parse_args(argv)
    exit_on_signals()
    config = Config(seed=args.seed)
    if args.quick:
        config = Config(processes=2, concurrency=10, limit_usd=0.1, seed=args.seed, timeout_s=90)
    with given_redis(args.redis_url) as redis_url:
        try:
            redis.Redis.from_url(redis_url, socket_timeout=1).ping()
        except redis.RedisError as exc:
            print(f"no Redis at {redis_url}: {exc}", file=sys.stderr)
            return 2
        result = run(config, redis_url)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"limit ${result['limit_usd']:.2f}: settled ${result['settled_usd']:.4f} "
            f"(overspend ${result['overspend_usd']:.4f}, {result['utilisation']:.1%} used, "
            f"{result['refused']} refused); naive check-then-record: settled "
            f"${result['naive_settled_usd']:.4f}, overspend ${result['naive_overspend_usd']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
