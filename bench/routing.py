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

from _benchkit import P99_MIN_SAMPLES, exit_on_signals, nearest_rank, print_result

from llmguard_sdk import DeploymentGroup, Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]
PHASES = ("normal", "slow", "failing")
STRATEGIES = ("latency", "round_robin", "weighted")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=1200, help="calls per side (1,200)")
    parser.add_argument("--base-ms", type=float, default=20.0, help="a deployment's latency")
    parser.add_argument("--quick", action="store_true", help="90 calls per side")
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
    }
    print_result(result, args.json)


if __name__ == "__main__":
    main()
