"""Redis killed under traffic: do calls go on, and does every spend record reach Redis?

What is measured
----------------
A throwaway redis-server (append-only file, ``appendfsync always``; tools/redis_cluster.py
RedisServer) and a :class:`~llmguard_sdk.testing.FakeProvider` on loopback. ``processes``
worker processes (spawn), each after one call that reaches Redis (a process that never
reached Redis counts itself alone while it is away), send calls for ``duration_s`` seconds
through a Guard with every
Redis stage on and a global spend budget with ``fail_open=True`` (while Redis is unreachable
the processes together may spend ``local_share`` of the room the budget had left).
``kill_after_s`` into the run Redis is killed (SIGKILL); ``down_s`` later it is restarted from
its append-only file.
Each worker records the reservation id of every settle with a cost; at the end it replays its
spend journal (bounded) and reports.

The budget's limit (``limit_usd``, ``--limit-usd``: about 130 calls' cost, 40 with
``--quick``) is small enough that the run exhausts it before Redis is killed: calls after that
are refused (``BudgetExceededError``); while Redis is down the fail-open share of the room left
is what a process may spend on its own (nothing when none was left), which the overspend bound
below checks.

* ``decided_share``: calls answered or refused by the budget / calls sent (target 1.0: no
  call failed because Redis was down). ``answered_share``: calls answered / calls sent.
* ``refused``: calls refused by the budget, split into ``refused_by_phase`` (before the kill,
  while Redis was down, after the restart); ``exhausted``: the budget refused calls, its limit
  reached (target true: otherwise the overspend check below could not fail); ``utilisation``:
  settled spend / limit.
* ``lost_spend_records``: settles with a cost whose settled marker is missing in Redis at the
  end (target 0); ``spend_records`` how many there were.
* ``settled_usd`` / ``recorded_usd``: the budget's settled spend in Redis and the sum of the
  costs the workers were answered with (equal when nothing is lost or counted twice).
* ``overspend_usd``: ``max(0, settled_usd - limit_usd)``; ``overspend_bound_usd`` is what
  fail-open allows the whole fleet (``local_share`` of the room left when Redis went away,
  shared by the processes alive then: at most ``local_share * limit_usd``); target: overspend
  within it.
* ``resync_s``: from the restart until the last worker's journal was empty again.

The Redis server and the worker processes are stopped on every exit path (SIGTERM included;
a watchdog stops them if this process is killed outright).

Usage: python bench/redis_faults.py [--json] [--quick] [--limit-usd USD]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import redis_cluster
from _benchkit import (
    REAPER,
    delete_prefix,
    exit_on_signals,
    print_result,
    start_processes,
    stop_processes,
)

from llmguard_sdk import BudgetExceededError, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})
# A call costs about $0.000015 (7 input and 8 output tokens at $1 / $2 per million): the limits
# are about 130 and 40 calls, spent before Redis is killed even on a slow, busy machine.
LIMIT_USD = 0.002
LIMIT_USD_QUICK = 0.0006
SHARE = 0.25


def build(base_url: str, redis_url: str, prefix: str, journal: str, limit: float) -> Guard:
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
        budgets=Budgets([Budget(limit)], prices=PRICES, fail_open=True),
        cache=True,
        environ={},
    )


def worker(
    base_url: str, redis_url: str, prefix: str, journal: str, limit: float, go: Any, out: Any
) -> None:
    """Says it is ready, gets the end time (epoch s) and calls until then; reports counts,
    rids and when the journal emptied."""
    guard = build(base_url, redis_url, prefix, journal, limit)
    spend = guard._stages.spend
    assert spend is not None
    backend = spend.backend
    assert isinstance(backend, RedisBudgetBackend)
    rids: set[str] = set()
    settle, settle_steps = backend.settle, backend.settle_steps

    # Every settle with a cost, whichever entry point the pipeline uses (a blocking call or
    # a step of a batch); one may call the other, so rids are a set.
    def recording(rid: str, specs: Any, *, actual: int, ttl: float) -> Any:
        if actual > 0:
            rids.add(rid)
        return settle(rid, specs, actual=actual, ttl=ttl)

    def recording_steps(rid: str, specs: Any, *, actual: int, ttl: float) -> Any:
        if actual > 0:
            rids.add(rid)
        return settle_steps(rid, specs, actual=actual, ttl=ttl)

    backend.settle = recording  # type: ignore[method-assign]
    backend.settle_steps = recording_steps  # type: ignore[method-assign]
    # One call before the clock starts: its first call reaches Redis, so the process knows the
    # fleet (the processes alive, the room left) should Redis die early; a process that never
    # reached Redis counts itself alone and may spend the whole fleet's share (on a busy
    # machine a first call, loading the encodings, took longer than `kill_after_s`).
    warm_up = guard.chat([{"role": "user", "content": "warm up"}], max_tokens=8, timeout=30)
    out.put("ready")
    until = go.get(timeout=120)
    sent = answered = failed = 0
    refusals: list[float] = []
    recorded = warm_up.cost_usd or 0.0
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
        except BudgetExceededError:
            refusals.append(time.time())
        except Exception:
            failed += 1
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
            "failed": failed,
            "refusals": refusals,
            "recorded": recorded,
            "rids": sorted(rids),
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
    parser.add_argument("--limit-usd", type=float, default=None, help="the budget's limit")
    args = parser.parse_args(argv)
    exit_on_signals()
    kill_after, down, duration = (1.0, 1.5, 4.0) if args.quick else (3.0, 5.0, 14.0)
    limit = args.limit_usd or (LIMIT_USD_QUICK if args.quick else LIMIT_USD)
    prefix = f"bench-faults-{uuid.uuid4().hex[:8]}"
    server = redis_cluster.RedisServer(persist=True)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers: list[Any] = []
    finished = False
    try:
        server.start()
        assert server.process is not None
        REAPER.add(server.process.pid)
        with FakeProvider(model="fake-model", name="primary") as fake, TemporaryDirectory() as tmp:
            go = context.Queue()
            workers = [
                context.Process(
                    target=worker,
                    args=(fake.base_url, server.url, prefix, tmp, limit, go, out),
                    daemon=True,
                )
                for _ in range(args.processes)
            ]
            start_processes(workers)
            for _ in workers:  # they import, build their Guard and make one call first
                if out.get(timeout=120) != "ready":
                    raise RuntimeError("a worker did not get ready")
            start = time.time()
            until = start + duration
            for _ in workers:
                go.put(until)
            time.sleep(max(0.0, start + kill_after - time.time()))
            killed = time.time()
            server.kill()
            time.sleep(down)
            server.start()
            restarted = time.time()
            REAPER.add(server.process.pid)
            reports = [out.get(timeout=duration + 90) for _ in workers]
            finished = True
            stop_processes(workers, 30.0)
            store = RedisStore(server.url, key_prefix=prefix, journal_dir=tmp)
            try:
                backend = RedisBudgetBackend(store)
                backend.replay()
                from llmguard_sdk.budget.control import SpendControl

                control = SpendControl(Budgets([Budget(limit)], prices=PRICES), (), store)
                control.backend = backend
                (row,) = control.status()
                tag = backend._tag
                rids = [rid for report in reports for rid in report["rids"]]
                client = store.client
                lost = sum(
                    1 for rid in rids if not client.exists(store.key("budget", tag, "d", rid))
                )
            finally:
                delete_prefix(store.client, f"{prefix}:")
                store.close()
    finally:
        stop_processes(workers, 30.0 if finished else 0.5)
        server.stop()
    sent = sum(r["sent"] for r in reports)
    answered = sum(r["answered"] for r in reports)
    refusals = [t for r in reports for t in r["refusals"]]
    recorded = sum(r["recorded"] for r in reports)
    emptied = [r["emptied"] for r in reports if r["journaled"]]
    settled = float(row["spent_usd"])
    result = {
        "processes": args.processes,
        "down_s": down,
        "calls": sent,
        "decided_share": round((answered + len(refusals)) / sent, 4) if sent else 0.0,
        "answered_share": round(answered / sent, 4) if sent else 0.0,
        "failed": sum(r["failed"] for r in reports),
        "refused": len(refusals),
        "refused_by_phase": {
            "before_kill": sum(1 for t in refusals if t < killed),
            "redis_down": sum(1 for t in refusals if killed <= t < restarted),
            "after_restart": sum(1 for t in refusals if t >= restarted),
        },
        "spend_records": len(rids),
        "lost_spend_records": lost,
        "journaled_records": sum(r["journaled"] for r in reports),
        "recorded_usd": round(recorded, 9),
        "settled_usd": round(settled, 9),
        "limit_usd": limit,
        "utilisation": round(settled / limit, 4),
        "exhausted": bool(refusals),  # the budget refused calls: its limit was reached
        "overspend_usd": round(max(0.0, settled - limit), 9),
        "overspend_bound_usd": round(SHARE * limit, 9),
        "overspend_within_bound": settled - limit <= SHARE * limit + 1e-12,
        "resync_s": round(max(emptied) - restarted, 3) if emptied else 0.0,
    }
    print_result(result, args.json)
    return result


if __name__ == "__main__":
    main()
