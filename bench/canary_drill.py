"""Canary drill: four candidate releases under steady traffic from two processes sharing Redis,
and a shadow run.

Per candidate (``errors``: 10 % of its calls answer 500; ``slow``: answers after twice the
control's latency, 60 ms beside 30 ms: the drill's latencies are scaled down to keep it short,
so its policy's ``latency_slack_s`` is 0.01 s, not the default 0.05 s; ``costly``: its
model's price is three times the control's; ``healthy``: as the control), two worker processes
each send steady traffic (``--threads`` threads, users drawn at random, so each user is sticky
to one arm) through a Guard with
``ReleasePlan(current, candidate=..., canary=CanaryPolicy(stages=..., min_calls=...))`` and one
Redis store (its own key prefix, deleted afterwards). Each worker counts the calls the canary
sent to the candidate before the worker saw the canary's decision, and among them those the
candidate failed (its route's error: the canary counts each as a candidate error, though the
plan's ``fallback_to_current`` has the current release answer it) and the errors the users got
(the current release failed them too). Reported per candidate: ``decision`` (``rolled_back``,
``promoted`` or ``undecided`` at the time limit), ``candidate_calls``,
``candidate_failed_calls``, ``user_errors``, ``bad_calls`` (what the candidate did badly: its
failed calls for ``errors`` and ``healthy``; every candidate call for ``slow`` and ``costly``,
which are all slow or dear), ``decide_s`` (from the start of traffic until the first worker saw
the decision).

``false_rollbacks`` out of ``runs``: the healthy candidate canaried ``--runs`` times (seeded) by
a fast in-memory simulation of two processes exchanging counters through the same backend code
and the same policy (``decide``) as the Guard, with identical arms (1 % errors, log-normal
latency, a cost that varies with the answer's length, feedback scores).

``shadow``: two FakeProvider releases whose answers differ on a known share of the prompts
(``true_disagreement``, over the prompts sent while the shadow was on); the current release
serves ``--shadow-calls`` calls, in blocks of 100 alternating shadow off and on; the shadow
copies half of the calls (seeded draws) to the candidate; ``measured_disagreement`` is 1 minus
the shadow report's exact agreement over those pairs; ``p99_ms_with`` / ``p99_ms_without``:
the users' latency in the blocks with and without the shadow (nearest rank; ``null`` below
1,000 calls, see ``max_ms_*``).

Usage: python bench/canary_drill.py [--json] [--quick] [--redis-url URL] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import random
import threading
import time
import uuid
from typing import Any

from _benchkit import (
    P99_MIN_SAMPLES,
    delete_prefix,
    exit_on_signals,
    given_redis,
    nearest_rank,
    print_result,
    start_processes,
    stop_processes,
)

from llmguard_sdk import CallEvent, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.releases import (
    CanaryPolicy,
    MemoryReleaseBackend,
    Release,
    ReleasePlan,
    ShadowPolicy,
    Stage,
)
from llmguard_sdk.releases.policy import decide, observation, promoted, rolled_back
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault

CONTROL, CANDIDATE = "control-2025-01-01", "candidate-2025-02-01"
SCENARIOS = ("errors", "slow", "costly", "healthy")
BASE_S = 0.03  # the control's latency


def prices(scenario: str) -> PriceTable:
    dear = 3.0 if scenario == "costly" else 1.0
    return PriceTable().with_prices(
        {CONTROL: Price(input=1.0, output=2.0), CANDIDATE: Price(input=dear, output=2 * dear)}
    )


def plan_for(control_url: str, candidate_url: str, policy: CanaryPolicy) -> ReleasePlan:
    current = Release(
        "drill", "v1", OpenAICompatibleProvider(control_url, model=CONTROL, name="ctl")
    )
    candidate = Release(
        "drill", "v2", OpenAICompatibleProvider(candidate_url, model=CANDIDATE, name="cand")
    )
    return ReleasePlan(current, candidate=candidate, canary=policy)


# -- the worker processes -------------------------------------------------------------------------


def worker(config: dict[str, Any], go: Any, out: Any) -> None:
    """Steady traffic through one Guard until the canary is decided (or time runs out)."""
    policy = CanaryPolicy(**config["policy"])
    events: list[tuple[float, bool, bool, bool]] = []  # (time, candidate call, the user's
    # error, the candidate's failure: the current release may have served it after)

    def hook(event: CallEvent) -> None:
        cand_failed = any(name == "cand" for name, _ in event.route_errors)
        cand = event.route == "cand" or cand_failed
        events.append((time.time(), cand, event.outcome == "error", cand_failed))

    guard = Guard(
        release=plan_for(config["control_url"], config["candidate_url"], policy),
        store=config["redis_url"], key_prefix=config["prefix"], prices=prices(config["scenario"]),
        retry=None, breaker=None, telemetry=False, hooks=[hook], environ={},
    )  # fmt: skip
    controls = guard.releases
    assert controls is not None
    out.put("ready")
    start, until = go.get(timeout=120)
    time.sleep(max(0.0, start - time.time()))
    controls.start_now()
    decided: list[float] = []
    stop = threading.Event()

    def traffic(seed: int) -> None:
        rng = random.Random(seed)
        interval = config["threads"] / config["rate"]
        next_at = time.monotonic()
        while not stop.is_set() and time.time() < until:
            prompt = [{"role": "user", "content": f"question {rng.randrange(10**6)}"}]
            with contextlib.suppress(Exception):  # the hook has counted it
                guard.chat(prompt, user=f"user-{rng.randrange(10**9)}", timeout=10)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    threads = [
        threading.Thread(target=traffic, args=(config["seed"] * 100 + i,), daemon=True)
        for i in range(config["threads"])
    ]
    for thread in threads:
        thread.start()
    while time.time() < until:
        stage = controls._stage
        if stage is not None and stage.status != "canary":
            decided.append(time.time())
            break
        time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join(timeout=15)
    status = controls._stage.status if controls._stage is not None else "undecided"
    guard.close()
    seen_at = decided[0] if decided else None
    before = [e for e in events if seen_at is None or e[0] <= seen_at]
    out.put(
        {
            "decision": status if seen_at is not None else "undecided",
            "decide_s": None if seen_at is None else seen_at - start,
            "calls": len(before),
            "candidate_calls": sum(1 for e in before if e[1]),
            "failed_candidate_calls": sum(1 for e in before if e[1] and e[3]),
            "user_errors": sum(1 for e in before if e[1] and e[2]),
        }
    )


def run_candidate(
    scenario: str, redis_url: str, policy: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    prefix = f"bench-canary-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    go, out = context.Queue(), context.Queue()
    workers: list[Any] = []
    with (
        FakeProvider(name="ctl", model=CONTROL) as ctl,
        FakeProvider(name="cand", model=CANDIDATE) as cand,
    ):
        ctl.always(Fault(latency=BASE_S))
        if scenario == "errors":
            rng = random.Random(7)
            cand.script(*(
                Fault(status=500, latency=BASE_S) if rng.random() < 0.1 else Fault(latency=BASE_S)
                for _ in range(20_000)
            ))  # fmt: skip
        cand.always(Fault(latency=2 * BASE_S if scenario == "slow" else BASE_S))
        try:
            configs = [
                {
                    "scenario": scenario,
                    "control_url": ctl.base_url,
                    "candidate_url": cand.base_url,
                    "redis_url": redis_url,
                    "prefix": prefix,
                    "policy": policy,
                    "threads": args.threads,
                    "rate": args.rate,
                    "seed": index,
                }
                for index in range(2)
            ]
            workers = [
                context.Process(target=worker, args=(config, go, out), daemon=True)
                for config in configs
            ]
            start_processes(workers)
            for _ in workers:
                if out.get(timeout=120) != "ready":
                    raise RuntimeError("a worker did not get ready")
            start = time.time() + 0.2
            for _ in workers:
                go.put((start, start + args.limit_s))
            reports = [out.get(timeout=args.limit_s + 120) for _ in workers]
        finally:
            stop_processes(workers, 30.0)
            store = RedisStore(redis_url, key_prefix=prefix)
            delete_prefix(store.client, f"{prefix}:")
            store.close()
    decisions = {r["decision"] for r in reports}
    candidate_calls = sum(r["candidate_calls"] for r in reports)
    failed = sum(r["failed_candidate_calls"] for r in reports)
    times = [r["decide_s"] for r in reports if r["decide_s"] is not None]
    return {
        "decision": decisions.pop() if len(decisions) == 1 else "disagreed",
        "candidate_calls": candidate_calls,
        "bad_calls": candidate_calls if scenario in ("slow", "costly") else failed,
        "candidate_failed_calls": failed,
        "user_errors": sum(r["user_errors"] for r in reports),
        "decide_s": round(min(times), 3) if times else None,
        "calls": sum(r["calls"] for r in reports),
    }


# -- the seeded simulation of healthy candidates ---------------------------------------------------


def simulate(seed: int, policy: CanaryPolicy, max_calls: int = 400_000) -> str:
    """Two simulated processes, identical arms, exchanging through the memory backend."""
    rng = random.Random(seed)
    backend = MemoryReleaseBackend()
    stages: list[Stage | None] = [None, None]
    pending: list[tuple[dict[str, float], dict[str, float]]] = [({}, {}), ({}, {})]
    backend.exchange("sim", "v2", 0, {}, {})
    for call in range(max_calls):
        process = call % 2
        stage = stages[process] or Stage(candidate="v2")
        arm = 1 if rng.random() < stage.share(policy) else 0
        latency = BASE_S * rng.lognormvariate(0.0, 0.3)
        cost = 1e-5 * (1 + rng.randrange(40) / 10)
        delta = observation(latency, cost, failed=rng.random() < 0.01, rejected=False)
        if rng.random() < 0.1:
            delta.update(fb=1.0, fb_low=float(rng.random() < 0.2))
        for name, value in delta.items():
            pending[process][arm][name] = pending[process][arm].get(name, 0.0) + value
        if call % 50 >= 2:  # each process exchanges every 50 calls
            continue
        version = stage.version if stages[process] is not None else 0
        found = backend.exchange("sim", "v2", version, *pending[process])
        pending[process] = ({}, {})
        assert found.stage is not None
        current = found.stage
        decision = decide(current, found.control, found.canary, policy)
        if decision is not None:
            new = (
                rolled_back(current, decision.reason, 0.0)
                if decision.action == "rollback"
                else promoted(current, policy, decision.reason, 0.0)
            )
            _, current = backend.transition("sim", current.version, new.index, new.status, "")
        stages[process] = current
        if current.status != "canary":
            return current.status
    return "undecided"


# -- the shadow run -------------------------------------------------------------------------------


def differs(text: str, share: float) -> bool:
    digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") / 2**32 < share


def run_shadow(calls: int, share: float) -> dict[str, Any]:
    def candidate_reply(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        return f"other answer to {text}" if differs(text, share) else f"answer to {text}"

    def control_reply(body: dict[str, Any]) -> str:
        return "answer to " + body["messages"][-1]["content"]

    with (
        FakeProvider(name="ctl", model=CONTROL, reply=control_reply) as ctl,
        FakeProvider(name="cand", model=CANDIDATE, reply=candidate_reply) as cand,
    ):
        ctl.always(Fault(latency=0.005))
        cand.always(Fault(latency=0.005))
        plan = plan_for(ctl.base_url, cand.base_url, CanaryPolicy())
        plan = ReleasePlan(
            plan.release, candidate=plan.candidate,
            shadow=ShadowPolicy(
                share=0.5, rate_per_s=10_000, max_queue=10_000, max_cost_usd=None, seed=3
            ),
        )  # fmt: skip
        guard = Guard(release=plan, prices=prices("healthy"), telemetry=False, environ={})
        shadow = guard.releases.shadow  # type: ignore[union-attr]
        assert shadow is not None
        with_ms: list[float] = []
        without_ms: list[float] = []
        prompts = []
        try:
            for i in range(calls):
                on = (i // 100) % 2 == 1  # blocks of 100 calls, shadow off then on
                shadow.enabled = on
                text = f"prompt {i}"
                if on:
                    prompts.append(text)
                began = time.perf_counter()
                guard.chat([{"role": "user", "content": text}])
                (with_ms if on else without_ms).append((time.perf_counter() - began) * 1000)
            shadow.drain(120.0)
            report = shadow.report()
        finally:
            guard.close()
    true = sum(differs(p, share) for p in prompts) / len(prompts)
    result: dict[str, Any] = {
        "true_disagreement": round(true, 4),
        "measured_disagreement": round(1 - report["agreement"]["exact"], 4),
        "pairs": report["pairs"],
        "dropped": report["dropped_queue"] + report["skipped_rate"] + report["skipped_budget"],
    }
    for label, values in (("with", with_ms), ("without", without_ms)):
        ordered = sorted(values)
        enough = len(ordered) >= P99_MIN_SAMPLES
        result[f"p99_ms_{label}"] = round(nearest_rank(ordered, 99), 3) if enough else None
        result[f"max_ms_{label}"] = round(ordered[-1], 3)
        result[f"p50_ms_{label}"] = round(nearest_rank(ordered, 50), 3)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test)")
    parser.add_argument("--redis-url", help="the Redis to use (default: REDIS_URL, else own)")
    parser.add_argument("--runs", type=int, default=20, help="seeded healthy simulations")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker process")
    parser.add_argument("--rate", type=float, default=150.0, help="calls/s per worker process")
    parser.add_argument("--limit-s", type=float, default=90.0, help="time limit per candidate")
    parser.add_argument("--shadow-calls", type=int, default=4000)
    args = parser.parse_args(argv)
    exit_on_signals()
    stages, min_calls = ((0.2, 0.5, 1.0), 250) if args.quick else ((0.1, 0.25, 0.5, 1.0), 300)
    if args.quick:
        args.runs, args.shadow_calls, args.limit_s = min(args.runs, 5), 1000, 60.0
    policy = {
        "stages": stages, "min_calls": min_calls, "flush_interval": 0.25,
        "latency_slack_s": 0.01,  # the slow candidate is 30 ms slower (the default slack: 50 ms)
    }  # fmt: skip
    with given_redis(args.redis_url) as redis_url:
        candidates = {s: run_candidate(s, redis_url, policy, args) for s in SCENARIOS}
    outcomes = [simulate(seed, CanaryPolicy(**policy)) for seed in range(args.runs)]
    result = {
        "candidates": candidates,
        "false_rollbacks": outcomes.count("rolled_back"),
        "runs": args.runs,
        "simulated_promoted": outcomes.count("promoted"),
        "policy": {**policy, "alpha": CanaryPolicy().alpha, "ratio": CanaryPolicy().ratio},
        "shadow": run_shadow(args.shadow_calls, 0.2),
        "targets": {
            "bad_candidates_rolled_back": all(
                candidates[s]["decision"] == "rolled_back" for s in ("errors", "slow", "costly")
            ),
            "bad_calls_under_50": all(
                candidates[s]["bad_calls"] < 50 for s in ("errors", "slow", "costly")
            ),
            "healthy_promoted": candidates["healthy"]["decision"] == "promoted",
            "no_user_errors": all(found["user_errors"] == 0 for found in candidates.values()),
        },
    }
    result["targets"]["no_false_rollback"] = result["false_rollbacks"] == 0
    print_result(result, args.json)
    return result


if __name__ == "__main__":
    main()
