"""Redis killed under traffic: do calls go on, and does every spend record reach Redis?

What is measured
----------------
A throwaway redis-server (append-only file, ``appendfsync always``; tools/redis_cluster.py
RedisServer) and a :class:`~llmguard_sdk.testing.FakeProvider` on loopback. ``processes``
worker processes (spawn) each send calls for ``duration_s`` seconds through a Guard with every
Redis stage on and a global spend budget with ``fail_open=True`` (each process may spend
``local_share`` of the limit on its own while Redis is unreachable). ``kill_after_s`` into the
run Redis is killed (SIGKILL); ``down_s`` later it is restarted from its append-only file.
Each worker records the reservation id of every settle with a cost; at the end it replays its
spend journal (bounded) and reports.

* ``answered_share``: calls answered / calls sent (target 1.0).
* ``lost_spend_records``: settles with a cost whose settled marker is missing in Redis at the
  end (target 0); ``spend_records`` how many there were.
* ``settled_usd`` / ``recorded_usd``: the budget's settled spend in Redis and the sum of the
  costs the workers were answered with (equal when nothing is lost or counted twice).
* ``overspend_usd``: ``max(0, settled_usd - limit_usd)``; ``overspend_bound_usd`` is what
  fail-open allows (``processes * local_share * limit_usd``); the limit here is set above
  the run's spend, so 0 is expected.
* ``resync_s``: from the restart until the last worker's journal was empty again.

Usage: python bench/redis_faults.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import redis_cluster

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})
LIMIT_USD = 100.0
SHARE = 0.25


def build(base_url: str, redis_url: str, prefix: str, journal: str) -> Guard:
    """The Guard every worker uses."""
    store = RedisStore(
        redis_url,
        key_prefix=prefix,
        socket_timeout=0.25,
        journal_dir=journal,
        local_share=SHARE,
        retry_pause=0.25,
    )
    return Guard(
        OpenAICompatibleProvider(base_url, model="fake-model", name="primary"),
        store=store,
        rate_limits={"primary": RateLimit(rpm=1_000_000, tpm=1_000_000_000)},
        budgets=Budgets([Budget(LIMIT_USD)], prices=PRICES, fail_open=True),
        cache=True,
        environ={},
    )


def worker(
    base_url: str, redis_url: str, prefix: str, journal: str, until: float, out: Any
) -> None:
    """Calls until ``until`` (epoch s); reports counts, rids and when the journal emptied."""
    guard = build(base_url, redis_url, prefix, journal)
    spend = guard._stages.spend
    assert spend is not None
    backend = spend.backend
    assert isinstance(backend, RedisBudgetBackend)
    rids: list[str] = []
    settle = backend.settle

    def recording(rid: str, specs: Any, *, actual: int, ttl: float) -> Any:
        if actual > 0:
            rids.append(rid)
        return settle(rid, specs, actual=actual, ttl=ttl)

    backend.settle = recording  # type: ignore[method-assign]
    sent = answered = 0
    recorded = 0.0
    emptied = 0.0
    tag = uuid.uuid4().hex[:6]
    while time.time() < until:
        sent += 1
        try:
            answer = guard.chat(
                [{"role": "user", "content": f"q {tag} {sent}"}], max_tokens=8, timeout=5
            )
            answered += 1
            recorded += answer.cost_usd or 0.0
        except Exception:
            pass
        journal_ = backend.journal
        if journal_.appended and journal_.pending == 0 and not emptied:
            emptied = time.time()
        time.sleep(0.01)
    deadline = time.monotonic() + 30
    while not backend.replay() and time.monotonic() < deadline:
        time.sleep(0.1)
    if backend.journal.appended and not emptied:
        emptied = time.time()
    out.put(
        {
            "sent": sent,
            "answered": answered,
            "recorded": recorded,
            "rids": rids,
            "emptied": emptied,
            "journaled": backend.journal.appended,
        }
    )
    guard.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test)")
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args(argv)
    kill_after, down, duration = (1.0, 1.5, 4.0) if args.quick else (3.0, 5.0, 14.0)
    prefix = f"bench-faults-{uuid.uuid4().hex[:8]}"
    server = redis_cluster.RedisServer(persist=True).start()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    try:
        with FakeProvider(model="fake-model", name="primary") as fake, TemporaryDirectory() as tmp:
            start = time.time() + 3.0  # workers import and connect first
            until = start + duration
            workers = [
                context.Process(
                    target=worker, args=(fake.base_url, server.url, prefix, tmp, until, out)
                )
                for _ in range(args.processes)
            ]
            for process in workers:
                process.start()
            time.sleep(max(0.0, start + kill_after - time.time()))
            server.kill()
            time.sleep(down)
            server.start()
            restarted = time.time()
            reports = [out.get(timeout=duration + 90) for _ in workers]
            for process in workers:
                process.join(timeout=30)
            store = RedisStore(server.url, key_prefix=prefix, journal_dir=tmp)
            backend = RedisBudgetBackend(store)
            backend.replay()
            from llmguard_sdk.budget.control import SpendControl

            control = SpendControl(Budgets([Budget(LIMIT_USD)], prices=PRICES), (), store)
            control.backend = backend
            (row,) = control.status()
            tag = backend._tag
            rids = [rid for report in reports for rid in report["rids"]]
            client = store.client
            lost = sum(1 for rid in rids if not client.exists(store.key("budget", tag, "d", rid)))
            for key in client.scan_iter(match=f"{prefix}:*", count=500):
                client.delete(key)
            store.close()
    finally:
        server.stop()
    sent = sum(r["sent"] for r in reports)
    answered = sum(r["answered"] for r in reports)
    recorded = sum(r["recorded"] for r in reports)
    emptied = [r["emptied"] for r in reports if r["journaled"]]
    settled = float(row["spent_usd"])
    result = {
        "processes": args.processes,
        "down_s": down,
        "calls": sent,
        "answered_share": round(answered / sent, 4) if sent else 0.0,
        "spend_records": len(rids),
        "lost_spend_records": lost,
        "journaled_records": sum(r["journaled"] for r in reports),
        "recorded_usd": round(recorded, 9),
        "settled_usd": round(settled, 9),
        "limit_usd": LIMIT_USD,
        "overspend_usd": round(max(0.0, settled - LIMIT_USD), 9),
        "overspend_bound_usd": args.processes * SHARE * LIMIT_USD,
        "resync_s": round(max(emptied) - restarted, 3) if emptied else 0.0,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return result


if __name__ == "__main__":
    main()
