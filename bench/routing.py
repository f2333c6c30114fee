"""Routing strategies: three deployments of one model, one turns slow (5x) and then fails.

Three FakeProviders serve the same model, each answering after ``--base-ms`` (20 ms). Every
side makes ``--calls`` sequential calls; after a third of them deployment ``dep-1`` turns
slow (five times the base latency), after two thirds it answers 503 to everything. Sides, each
with fresh deployments and state:

* the Guard with one :class:`~llmguard_sdk.DeploymentGroup` of the three, for each strategy
  (``latency``, ``round_robin``, ``weighted``), every other setting at its default (retries,
  breakers);
* LiteLLM's ``Router`` (the bench extra; never a dependency of the SDK) with the three
  deployments under one model name, as its docs configure it, with
  ``routing_strategy="latency-based-routing"`` and ``"least-busy"``, other settings at their
  defaults (``litellm_latency``, ``litellm_least_busy``). Skipped, and said so, when LiteLLM
  is not installed.

Per side: ``p50_ms``, ``p99_ms`` (nearest rank; ``p99_ms`` is ``null`` below 1,000 calls, where
``max_ms`` stands for the tail), ``errors`` (calls that raised), and ``served``: calls per
deployment in each phase (``normal``, ``slow``, ``failing``). ``latency_p99_over_round_robin``
is the target ratio (<= 0.5).

``cascade``: a cascade (small tier first, the large one when a JSON-schema check rejects the
answer) against every call on the large tier, on a labelled workload of ``--cascade-items``
questions, 30 % of them hard (see bench/_cascade.py): ``cost_saved_share``,
``accuracy_all_large``, ``accuracy_cascade`` and the figures behind them. Target: >= 0.5 saved
at equal accuracy.

Usage: python bench/routing.py [--json] [--calls N] [--base-ms MS] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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
from _cascade import cascade_bench

from llmguard_sdk import DeploymentGroup, Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]
PHASES = ("normal", "slow", "failing")
STRATEGIES = ("latency", "least_outstanding", "round_robin", "weighted")


@contextmanager
def deployments() -> Iterator[list[FakeProvider]]:
    """Three fresh FakeProviders (``dep-0`` .. ``dep-2``)."""
    with ExitStack() as stack:
        yield [stack.enter_context(FakeProvider(name=f"dep-{i}")) for i in range(3)]


def phase_of(index: int, calls: int) -> str:
    return PHASES[min(2, index * 3 // calls)]


def drive(
    call: Callable[[], str | None], fakes: list[FakeProvider], calls: int, base_s: float
) -> dict[str, Any]:
    """``calls`` sequential calls while ``dep-1`` turns slow, then fails."""
    for fake in fakes:
        fake.always(Fault(latency=base_s))
    seconds: list[float] = []
    errors = 0
    served: dict[str, dict[str, int]] = {phase: {} for phase in PHASES}
    for index in range(calls):
        phase = phase_of(index, calls)
        if index and phase != phase_of(index - 1, calls):
            turn = Fault(latency=5 * base_s) if phase == "slow" else Fault(status=503)
            fakes[1].always(turn)
        started = time.perf_counter()
        try:
            route = call()
        except Exception:
            errors += 1
            route = None
        seconds.append(time.perf_counter() - started)
        if route is not None:
            served[phase][route] = served[phase].get(route, 0) + 1
    ordered = sorted(seconds)
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 2),
        "p99_ms": round(nearest_rank(ordered, 99) * 1e3, 2)
        if len(ordered) >= P99_MIN_SAMPLES
        else None,
        "max_ms": round(ordered[-1] * 1e3, 2),
        "errors": errors,
        "served": served,
    }


def guard_side(strategy: str, calls: int, base_s: float) -> dict[str, Any]:
    with deployments() as fakes:
        group = DeploymentGroup(
            "fake-model",
            [OpenAICompatibleProvider(f.base_url, model="fake-model", name=f.name) for f in fakes],
            strategy=strategy,  # type: ignore[arg-type]
            seed=1,
        )
        with Guard(group, environ={}) as guard:
            return drive(lambda: guard.chat(MESSAGES, max_tokens=16).route, fakes, calls, base_s)


def litellm_side(strategy: str, calls: int, base_s: float) -> dict[str, Any]:
    from litellm import Router

    with deployments() as fakes:
        names = {f.base_url: f.name for f in fakes}
        router = Router(
            model_list=[
                {
                    "model_name": "fake-model",
                    "litellm_params": {
                        "model": "openai/fake-model",
                        "api_base": fake.base_url,
                        "api_key": "bench",
                    },
                }
                for fake in fakes
            ],
            routing_strategy=strategy,
        )

        def call() -> str | None:
            response = router.completion(model="fake-model", messages=MESSAGES, max_tokens=16)
            base = response._hidden_params.get("api_base") or ""
            return names.get(base.rstrip("/"), names.get(base))

        return drive(call, fakes, calls, base_s)


INFLIGHT_LATENCIES = (0.1, 0.15, 0.2)  # seconds: the three deployments answer at their own pace


def inflight_worker(
    urls: list[str],
    redis_url: str | None,
    prefix: str,
    rate: float,
    seconds: float,
    seed: int,
    sync: tuple[Any, Any, Any],
    out: Any,
) -> None:
    """One process of the spread test: once every process is ready (``sync``: a queue it
    says so on, an event that starts them, the shared start time), calls arriving at random
    (Poisson, ``rate`` a second) for ``seconds``, each on a thread of its own, through a
    ``least_outstanding`` group; puts ``(route, began, ended)`` of every call on ``out``."""
    import random
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from llmguard_sdk import RedisStore

    store = RedisStore(redis_url, key_prefix=prefix, max_connections=200) if redis_url else None
    routes = [
        OpenAICompatibleProvider(url, model="fake-model", name=f"dep-{i}")
        for i, url in enumerate(urls)
    ]
    group = DeploymentGroup("fake-model", routes, strategy="least_outstanding", seed=seed)
    spans: list[tuple[str | None, float, float]] = []
    lock = threading.Lock()
    rng = random.Random(seed)
    with Guard(group, environ={}, store=store) as guard:

        def one() -> None:
            began = time.time()
            try:
                route: str | None = guard.chat(MESSAGES, max_tokens=16).route
            except Exception:
                route = None
            with lock:
                spans.append((route, began, time.time()))

        ready, go, start = sync
        ready.put(seed)
        go.wait(timeout=120)
        with ThreadPoolExecutor(max_workers=64) as pool:
            due = start.value
            while due < start.value + seconds:
                time.sleep(max(0.0, due - time.time()))
                pool.submit(one)
                due += rng.expovariate(rate)
    out.put(spans)


def spread_of(
    spans: list[tuple[str | None, float, float]], window: tuple[float, float]
) -> dict[str, Any]:
    """Each deployment's calls in flight, sampled every 10 ms over the middle of ``window``:
    the mean over samples of the largest relative deviation from the mean count
    (``spread``), its 90th percentile, and each deployment's mean count."""
    names = [f"dep-{i}" for i in range(len(INFLIGHT_LATENCIES))]
    begin, end = window[0] + 1.0, window[1] - 0.5
    instants = [begin + k * 0.01 for k in range(int((end - begin) / 0.01))]
    deviations, totals = [], dict.fromkeys(names, 0)
    for t in instants:
        counts = [sum(1 for r, b, e in spans if r == n and b <= t < e) for n in names]
        mean = sum(counts) / len(counts)
        if mean > 0:
            deviations.append(max(abs(c - mean) for c in counts) / mean)
        for name, count in zip(names, counts, strict=True):
            totals[name] += count
    deviations.sort()
    return {
        "spread": round(statistics.fmean(deviations), 3) if deviations else None,
        "spread_p90": round(nearest_rank(deviations, 90), 3) if deviations else None,
        "mean_in_flight": {n: round(c / max(1, len(instants)), 2) for n, c in totals.items()},
        "calls": len(spans),
        "call_p50_ms": round(statistics.median(e - b for _, b, e in spans) * 1e3, 1),
        "errors": sum(1 for r, _, _ in spans if r is None),
    }


def inflight_side(
    redis_url: str | None, processes: int, rate: float, seconds: float
) -> dict[str, Any]:
    """``processes`` processes calling through ``least_outstanding`` groups on the same three
    deployments: sharing their counts through Redis (``redis_url``), or each its own."""
    import multiprocessing
    import uuid

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    prefix = f"llmguard-bench-{uuid.uuid4().hex[:10]}"
    with deployments() as fakes:
        for fake, seconds_each in zip(fakes, INFLIGHT_LATENCIES, strict=True):
            fake.always(Fault(latency=seconds_each))
        sync = (context.Queue(), context.Event(), context.Value("d", 0.0))
        urls = [f.base_url for f in fakes]
        workers = [
            context.Process(
                target=inflight_worker,
                args=(urls, redis_url, prefix, rate, seconds, n, sync, out),
            )
            for n in range(processes)
        ]
        start_processes(workers)
        try:
            for _ in workers:  # every process has started up (imports, its Guard)
                sync[0].get(timeout=120)
            sync[2].value = time.time() + 0.2
            window = (sync[2].value, sync[2].value + seconds)
            sync[1].set()
            spans = [span for _ in workers for span in out.get(timeout=seconds + 60)]
        finally:
            stop_processes(workers)
            if redis_url:
                import redis

                client = redis.Redis.from_url(redis_url)
                delete_prefix(client, prefix)
                client.close()
    return spread_of(spans, window)


def inflight_spread(redis_url: str | None, quick: bool) -> dict[str, Any]:
    """The spread of calls in flight with counts shared through Redis and per process."""
    processes, rate, seconds = (4, 10.0, 3.0) if quick else (4, 40.0, 8.0)
    result: dict[str, Any] = {"processes": processes, "calls_per_s_each": rate, "seconds": seconds}
    result["shared"] = inflight_side(redis_url, processes, rate, seconds)
    result["per_process"] = inflight_side(None, processes, rate, seconds)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=1200, help="calls per side (1,200)")
    parser.add_argument("--base-ms", type=float, default=20.0, help="a deployment's latency")
    parser.add_argument("--quick", action="store_true", help="90 calls per side")
    parser.add_argument(
        "--redis-url",
        help="the Redis the spread test shares (else REDIS_URL, else a throwaway one)",
    )
    parser.add_argument("--no-spread", action="store_true", help="skip the in-flight spread test")
    parser.add_argument("--cascade-items", type=int, default=400, help="cascade workload")
    args = parser.parse_args()
    exit_on_signals()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM: no fetch at import
    calls = 90 if args.quick else args.calls
    base_s = args.base_ms / 1e3
    strategies = {name: guard_side(name, calls, base_s) for name in STRATEGIES}
    skipped = None
    try:
        import litellm  # noqa: F401
    except ImportError:
        skipped = "litellm is not installed (pip install 'llmguard-sdk[bench]')"
    else:
        for name, strategy in (
            ("litellm_latency", "latency-based-routing"),
            ("litellm_least_busy", "least-busy"),
        ):
            strategies[name] = litellm_side(strategy, calls, base_s)
    tail = "p99_ms" if calls >= P99_MIN_SAMPLES else "max_ms"
    result = {
        "calls": calls,
        "base_ms": args.base_ms,
        "tail": tail,
        "strategies": strategies,
        "latency_p99_over_round_robin": round(
            strategies["latency"][tail] / strategies["round_robin"][tail], 3
        ),
        "litellm_skipped": skipped,
        "cascade": cascade_bench(40 if args.quick else args.cascade_items),
    }
    if not args.no_spread:
        with given_redis(args.redis_url) as redis_url:
            spread = inflight_spread(redis_url, args.quick)
        result["inflight_spread"] = spread["shared"]["spread"]
        result["inflight_spread_per_process"] = spread["per_process"]["spread"]
        result["inflight"] = spread
    print_result(result, args.json)


if __name__ == "__main__":
    main()
