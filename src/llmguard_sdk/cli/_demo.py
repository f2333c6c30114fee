"""``llmguard demo``: needs no network and no configuration: it starts local fake providers,
sends a burst of traffic through a Guard and prints what happened.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from ..breaker import BreakerPolicy, BreakerTransition
from ..context import CallEvent
from ..errors import ConfigurationError, LLMGuardError
from ..guard import Guard
from ..providers.base import Provider
from ..providers.openai_compat import OpenAICompatibleProvider
from ..retry import RetryPolicy
from ..testing import FakeProvider, Fault
from ._command import Command, positive_int

if TYPE_CHECKING:
    from ..providers.local import LocalProvider

__all__ = ["DEMO", "DemoSummary", "run_demo"]


@dataclass
class DemoSummary:
    """What the demo saw; ``render()`` prints it as a table."""

    requests: int = 0
    concurrency: int = 0
    routes: list[str] = field(default_factory=list)
    served_by: Counter[str] = field(default_factory=Counter)
    route_failures: dict[str, Counter[str]] = field(default_factory=dict)
    retries: Counter[str] = field(default_factory=Counter)
    retry_causes: dict[str, Counter[str]] = field(default_factory=dict)
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    stream_first_token_ms: float | None = None
    stream_text: str = ""
    outage: list[dict[str, object]] = field(default_factory=list)
    recovery: list[dict[str, object]] = field(default_factory=list)
    transitions: list[dict[str, object]] = field(default_factory=list)
    local_note: str = ""
    local_placement: str = ""
    tokens_in: int = 0
    tokens_out: int = 0

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) of call latencies, in milliseconds."""
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        index = min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))
        return ordered[index]

    def as_dict(self) -> dict[str, object]:
        """The summary as plain JSON-able data."""
        return {
            "requests": self.requests,
            "concurrency": self.concurrency,
            "routes": self.routes,
            "served_by": dict(self.served_by),
            "route_failures": {r: dict(c) for r, c in self.route_failures.items()},
            "retries": dict(self.retries),
            "retry_causes": {r: dict(c) for r, c in self.retry_causes.items()},
            "failed": self.failed,
            "errors": dict(self.errors),
            "latency_ms": {
                "p50": round(self.percentile(50), 2),
                "p95": round(self.percentile(95), 2),
                "max": round(max(self.latencies_ms, default=0.0), 2),
            },
            "tokens": {"input": self.tokens_in, "output": self.tokens_out},
            "stream_first_token_ms": self.stream_first_token_ms,
            "outage": self.outage,
            "recovery": self.recovery,
            "breaker_transitions": self.transitions,
            "local_note": self.local_note,
            "local_placement": self.local_placement,
        }

    def render(self) -> str:
        """A human-readable table."""
        served = sum(self.served_by.values())
        lines = [
            f"llmguard demo: {self.requests} chat calls, {self.concurrency} at a time, "
            f"through a Guard with routes {' -> '.join(self.routes)} (in-memory state)",
            "",
            f"  {'route':<10} {'served':>7} {'retried':>8} {'moved on':>9}  why",
        ]
        for route in self.routes:
            failures = self.route_failures.get(route, Counter())
            causes = self.retry_causes.get(route, Counter())
            retried = ", ".join(f"{name} x{n}" for name, n in causes.most_common())
            moved = ", ".join(f"{name} x{n}" for name, n in failures.most_common())
            why = "; ".join(
                part
                for part in (
                    f"retried after {retried}" if retried else "",
                    f"moved on after {moved}" if moved else "",
                )
                if part
            )
            lines.append(
                f"  {route:<10} {self.served_by.get(route, 0):>7} {self.retries.get(route, 0):>8} "
                f"{sum(failures.values()):>9}  {why or '-'}"
            )
        lines += [
            "",
            f"  answered      {served} of {self.requests}"
            + (f"  (failed: {dict(self.errors)})" if self.failed else ""),
            f"  latency       p50 {self.percentile(50):.1f} ms   p95 {self.percentile(95):.1f} ms"
            f"   max {max(self.latencies_ms, default=0.0):.1f} ms",
            f"  tokens        {self.tokens_in} in, {self.tokens_out} out",
        ]
        if self.stream_first_token_ms is not None:
            lines.append(
                f"  one stream    first token after {self.stream_first_token_ms:.1f} ms: "
                f"{self.stream_text!r}"
            )
        lines += [
            "",
            "The primary route was made flaky on purpose: 503s and connection resets were "
            "retried with full-jitter",
            "backoff, 429s after the 50 ms their retry-after-ms asked for; a call whose retries "
            "ran out moved on to the backup.",
            "",
            "Outage: both remote providers down (503s, then connection resets).",
        ]
        lines += [_answer_line(answer) for answer in self.outage]
        if self.local_note:
            lines.append(f"  {self.local_note}")
        if self.local_placement:
            lines.append(f"  local model placed: {self.local_placement}")
        lines += ["", "Recovery: both providers back; the breakers probe and close."]
        lines += [_answer_line(answer) for answer in self.recovery]
        lines += [
            "",
            "Circuit breakers (seconds from the outage's start; before 0: the burst above):",
        ]
        lines += [
            f"  {t['t']:>6.2f} s  {t['route']:<8} {t['before']} -> {t['after']}"
            for t in self.transitions
        ]
        return "\n".join(lines)


OUTAGE_QUESTIONS = (
    "What is the capital of France?",
    "Give me one tip for better sleep.",
    "Name a primary colour.",
    "What is 2 + 2?",
)
RECOVERY_QUESTIONS = ("Are you back?", "Still there?")
# Quick to trip and quick to probe, so the demo shows a whole outage in a few seconds.
DEMO_BREAKER = BreakerPolicy(
    window=10, minimum_calls=5, failure_rate=0.8, open_seconds=1.0, half_open_permits=1
)


def _answer_line(answer: dict[str, object]) -> str:
    return (
        f"  {answer['question']!s:<34} -> {answer['route']} in {answer['ms']} ms: "
        f"{answer['text']!r}"
    )


def _ask(guard: Guard, question: str) -> dict[str, object]:
    """One short question through the Guard, as a summary row."""
    try:
        answer = guard.chat(
            [
                {"role": "system", "content": "Answer in one short sentence."},
                {"role": "user", "content": question},
            ],
            max_tokens=24,
            temperature=0,
        )
    except LLMGuardError as error:
        return {"question": question, "route": "-", "ms": 0, "text": type(error).__name__}
    return {
        "question": question,
        "route": answer.route,
        "ms": round(answer.timings.total_s * 1000),
        "text": answer.text.strip(),
    }


def _local_model() -> LocalProvider | str:
    """The bundled local model, warming up in the background; or why it is not there."""
    try:
        from ..providers.local import LocalProvider

        return LocalProvider(n_ctx=1024, warm_up=True)
    except ConfigurationError as missing:
        return f"no local fallback: {missing}"


class _TimedTransitions:
    """A breaker hook that keeps each transition with the time it was seen."""

    def __init__(self) -> None:
        self.timed: list[tuple[float, BreakerTransition]] = []

    def append(self, transition: BreakerTransition) -> None:
        self.timed.append((time.monotonic(), transition))

    def clear(self) -> None:
        self.timed.clear()


MAX_DEMO_REQUESTS = 100_000
"""The most calls a demo sends: each one's fault and call record is held to the end (a
drill is held to the same number of calls)."""

_FLAKY = (
    Fault(status=503),
    Fault(status=429, retry_after_ms=50),
    Fault(reset=True),
    Fault(latency=0.02),
)


def _flaky_script(count: int) -> list[Fault | None]:
    """The primary's faults for ``count`` calls (four shared faults, not one per call)."""
    faults: list[Fault | None] = []
    for i in range(count):
        if i % 7 == 3:
            faults.append(_FLAKY[0])
        elif i % 11 == 5:
            faults.append(_FLAKY[1])
        elif i % 13 == 8:
            faults.append(_FLAKY[2])
        elif i % 5 == 0:
            faults.append(_FLAKY[3])
        else:
            faults.append(None)
    return faults


def _wait_until_probing(guard: Guard, route: str) -> None:
    """Sleep until the route's breaker lets a probe through (bounded: a slow outage phase
    may have re-opened it for a grown open duration)."""
    breakers = guard.breakers
    give_up = time.monotonic() + 8 * DEMO_BREAKER.open_seconds
    while breakers is not None and time.monotonic() < give_up:
        permit = breakers.permit(route)
        if permit.allowed:
            breakers.release(route)  # only asked; the recovery call takes the probe
            return
        time.sleep(min(max(permit.retry_after or 0.0, 0.02), 1.0) + 0.02)


def _check_requests(requests: int) -> None:
    if requests > MAX_DEMO_REQUESTS:
        raise ConfigurationError(
            f"a demo of {requests:,} requests is more than {MAX_DEMO_REQUESTS:,}: lower --requests"
        )


def run_demo(*, requests: int = 60, concurrency: int = 8) -> DemoSummary:
    """Run the demo traffic and return its summary.

    Raises :class:`ConfigurationError` for more than :data:`MAX_DEMO_REQUESTS` requests
    (``requests=10**9`` built a billion-long fault script until memory ran out)."""
    _check_requests(requests)
    summary = DemoSummary(requests=requests, concurrency=concurrency)
    events: list[CallEvent] = []
    transitions = _TimedTransitions()
    with (
        FakeProvider(model="primary-model", name="primary") as primary,
        FakeProvider(model="backup-model", name="backup") as backup,
    ):
        primary.script(*_flaky_script(requests))
        backup.always(Fault(latency=0.005))
        routes: list[Provider] = [
            OpenAICompatibleProvider(primary.base_url, model="primary-model", name="primary"),
            OpenAICompatibleProvider(backup.base_url, model="backup-model", name="backup"),
        ]
        local = _local_model()
        if isinstance(local, str):
            summary.local_note = local
        else:
            summary.local_placement = local.placement.describe()
            routes.append(local)
        guard = Guard(
            routes,
            timeout=30,
            retry=RetryPolicy(attempts=3, base=0.02, cap=1.0),  # short waits for a quick demo
            breaker=DEMO_BREAKER,
            breaker_hooks=[transitions.append],
            hooks=[events.append],
            environ={},
        )
        summary.routes = [route.name for route in guard.routes]
        anyio.run(_burst, guard, requests, concurrency)
        primary.script(Fault(first_token_delay=0.05, inter_token_delay=0.01))
        with guard.chat(
            [{"role": "user", "content": "stream a short answer"}], stream=True
        ) as stream:
            summary.stream_text = "".join(chunk.text for chunk in stream)
        summary.stream_first_token_ms = (stream.response.timings.first_token_s or 0) * 1000
        primary.reset_faults()  # drop what is left of the flaky script
        primary.always(Fault(status=503))
        backup.always(Fault(reset=True))
        outage_started = time.monotonic()
        summary.outage = [_ask(guard, question) for question in OUTAGE_QUESTIONS]
        primary.always(None)
        backup.always(Fault(latency=0.005))
        _wait_until_probing(guard, "primary")
        summary.recovery = [_ask(guard, question) for question in RECOVERY_QUESTIONS]
        summary.transitions = [
            {
                "t": round(when - outage_started, 2),
                "route": t.route,
                "before": t.before,
                "after": t.after,
            }
            for when, t in transitions.timed
        ]
        guard.close()
    for event in events[:requests]:
        for retry in event.retries:
            summary.retries[retry.name] += 1
            summary.retry_causes.setdefault(retry.name, Counter())[type(retry.cause).__name__] += 1
        for route, error_type in event.route_errors:
            name = error_type.rpartition(".")[2]  # (as the retry causes: the class's name)
            summary.route_failures.setdefault(route, Counter())[name] += 1
        if event.outcome == "ok" and event.route:
            summary.served_by[event.route] += 1
            summary.latencies_ms.append(event.latency_s * 1000)
            if event.usage:
                summary.tokens_in += event.usage.input_tokens
                summary.tokens_out += event.usage.output_tokens
        else:
            summary.failed += 1
            summary.errors[type(event.error).__name__] += 1
    return summary


async def _burst(guard: Guard, requests: int, concurrency: int) -> None:
    limiter = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        try:
            with contextlib.suppress(LLMGuardError):  # failures are counted from the events
                await guard.achat(
                    [{"role": "user", "content": f"question number {i}"}],
                    tenant=f"tenant-{i % 3}",
                    feature="demo",
                )
        finally:
            limiter.release()

    async with anyio.create_task_group() as tasks:
        for i in range(requests):
            await limiter.acquire()  # a task only for a free slot: at most `concurrency` alive
            tasks.start_soon(one, i)
    for route in guard.routes:  # this event loop's connections; the local model stays loaded
        if isinstance(route, OpenAICompatibleProvider):
            await route.aclose()


def _arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument(
        "--requests", type=positive_int, default=60, help="calls to send (default: %(default)s)"
    )
    demo.add_argument(
        "--concurrency", type=positive_int, default=8, help="calls in flight (default: %(default)s)"
    )
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard demo``: 0 when every call was answered."""
    summary = run_demo(requests=args.requests, concurrency=args.concurrency)
    print(json.dumps(summary.as_dict(), indent=2) if args.json else summary.render())
    return 0 if summary.failed == 0 else 1


DEMO = Command(
    "demo",
    "send a burst of traffic through a Guard to local fake providers (no network)",
    _arguments,
    _run,
    description="Start two local fake providers, make the first one flaky, send a burst "
    "of chat calls through a Guard and print a summary.",
)
