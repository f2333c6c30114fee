"""Per-call overhead of a Guard against bare calls of the same loopback server.

Every side sends the same request to the same FakeProvider, which runs in a *separate process*
so that its CPU time is not counted. Three baselines:

* ``bare_us`` (also ``httpx_us``): a plain ``httpx.Client`` POSTing the JSON body and parsing
  the JSON answer (``client.post(...).json()``), what a hand-written integration does: the
  issue's "bare httpx", so ``overhead_us`` is what a Guard adds to an application's own
  httpx call;
* ``openai_sdk_us``: the ``openai`` package's client as its README shows it,
  ``OpenAI(base_url=..., api_key=...)`` with its defaults, and
  ``client.chat.completions.create(...)`` (the server answers every call, so its default
  retries never run);
* ``provider_us``: our own provider object called directly (the same HTTP path and parsing
  the Guard uses), so ``pipeline_us`` is the pipeline's stages alone (this bench's
  ``overhead_us`` up to session 11, when the provider object cost about what plain httpx
  does; since session 12 it sends to its transport directly and costs less; since session 13
  its sync transport is its own, over ``http.client``). ``provider_httpx_transport_us`` is the
  same provider object given httpx's ``HTTPTransport`` (httpcore and h11), measured in the
  same rounds: the share of the provider's own transport.

"guard" goes through ``Guard.chat`` with every stage that exists so far, state in memory.
``overhead_vs_openai_sdk_us`` is what a Guard costs against an application's own openai SDK
call. CPU time is this process's
``time.process_time()``; wall time is ``time.perf_counter()``. Rounds of every side
alternate (each round in a rotated order), and the median round is reported, so drift on a
shared machine hits every side alike.

The default Guard has telemetry on with no OpenTelemetry SDK configured (the API's no-op
providers, as in an application that does not export telemetry): ``overhead_us``. Variants,
measured in the same rounds, each over the provider object (the stages alone):
``telemetry_off_us`` (``telemetry=False``), ``telemetry_sdk_us``
(the real SDK recording every span and metric, exported to memory and dropped; each request
carrying its attempt span's trace context, ``Telemetry(propagate=True)``, the default), and
``all_stages_us``: telemetry with the SDK plus rate limits, a spend budget and the response
cache (every call a new question: an exact miss, a semantic search and a store);
``all_stages_overhead_us`` is that Guard's call over bare httpx (the name the issue checks),
and ``all_stages_no_sdk_us`` the same stages with the default telemetry (no SDK configured),
so the SDK's own share can be told apart. ``stage_us`` splits the every-stage cost: what
each stage that is off by default adds to the default Guard on its own (``telemetry_sdk``,
``rate_limits``, ``spend_budget``, ``cache``), measured in the same rounds.
``all_stages_sdk_us`` is the SDK's share of the every-stage Guard (``all_stages`` less
``all_stages_no_sdk``); ``otel_sdk_floor_us`` what the OpenTelemetry SDK alone costs for the
very spans and metric points one every-stage call exports (``otel_exported`` counts them),
handed to a fresh SDK configured alike with no llmguard code in between (``_otel_replay``):
the part of the SDK's share no Guard exporting those signals can save.
``seam_us``: the openai SDK over the Guard's transport seam,
``OpenAI(http_client=http_client(guard))``, through the default Guard (the SDK builds and
parses HTTP, the transport parses and answers it in process): ``seam_vs_guard_us`` is what the
seam adds to the direct ``Guard.chat`` call, ``seam_vs_openai_sdk_us`` what it costs against
the SDK pointed at the provider.
``count_long_system_prompt_us``: the input-token count of a call with a 2,000-token system
prompt, counted afresh each time against the SDK's remembered counts.

Usage: python bench/overhead.py [--json] [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from _benchkit import LOOPBACK_SERVERS, exit_on_signals, popen_group, stop_group
from _otel_replay import Replay, capture, recording_providers
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmguard_sdk import ChatRequest, Guard, OpenAICompatibleProvider, ResponseCache, Telemetry
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.models import Message
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.tokens import _remembered_count, count_request_tokens, count_text_tokens
from llmguard_sdk.transport import http_client

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant for an online shop."},
    {"role": "user", "content": "Where is my order 4417? It was due on Monday."},
]
QUESTION = "Where is my order 4417? It was due on Monday."
STAGES = [
    "validate",
    "input_guardrails",
    "max_input_tokens",
    "idempotency_key",
    "fallback_chain",
    "circuit_breaker",
    "retry",
    "retry_budget",
    "usage_accounting",
    "output_guardrails",
    "hooks",
]


class _Dropping(InMemorySpanExporter):
    """Receives every finished span (the SDK's whole path runs) and keeps none."""

    def export(self, spans: Any) -> Any:
        return super().export(())


def _recording_telemetry() -> Telemetry:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(_Dropping()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)


def extra_stages() -> dict[str, dict[str, Any]]:
    """The Guard's arguments of each stage that is off by default, state in memory: a rate
    limit per route, a spend budget per tenant, the response cache."""
    return {
        "rate_limits": {"rate_limits": {"fake": RateLimit(rpm=10_000_000, tpm=10_000_000_000)}},
        "spend_budget": {
            "budgets": Budgets(
                [Budget(limit_usd=1e6, scope="tenant")],
                prices=PriceTable.default_table().with_prices(
                    {"fake-model": Price(input=0.1, output=0.4)}
                ),
            )
        },
        "cache": {"cache": ResponseCache(max_entries=1_000_000)},
    }


def every_stage_guard(
    provider: OpenAICompatibleProvider, telemetry: Telemetry | None, common: dict[str, Any]
) -> Guard:
    """The Guard with every stage on, state in memory (``telemetry`` None: the default)."""
    stages: dict[str, Any] = {}
    for arguments in extra_stages().values():
        stages.update(arguments)
    return Guard(provider, telemetry=True if telemetry is None else telemetry, **stages, **common)


def start_server(
    command: Sequence[str] = LOOPBACK_SERVERS["fake"],
) -> tuple[subprocess.Popen[str], str]:
    """Start a loopback server (default: the FakeProvider; ``command``: the Python arguments
    of another that prints its base URL) in its own process group; return it and its URL.

    Its stdin is a pipe from this process: the server stops at the pipe's end, so it ends with
    this process however this process ends (and the bench's reaper stops its group too)."""
    process = popen_group(
        [sys.executable, *command],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    base_url = process.stdout.readline().strip()
    if not base_url.startswith("http://127.0.0.1:"):
        stop_group(process)
        raise SystemExit(f"the loopback server did not start: {base_url!r}")
    return process, base_url


def measure(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """Mean CPU and wall microseconds per call over ``calls`` calls."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        call()
    cpu1, wall1 = time.process_time(), time.perf_counter()
    return (cpu1 - cpu0) / calls * 1e6, (wall1 - wall0) / calls * 1e6


def count_long_system_prompt(calls: int = 500) -> dict[str, float]:
    """CPU time of the input-token count (``max_input_tokens``) for a call with a 2,000-token
    system prompt: ``fresh`` encodes every text, ``remembered`` is the system prompt sent
    again (the SDK keeps recent texts' counts), with a new user message each time."""
    system = "You are the support assistant of an online shop. Answer briefly and kindly. " * 130
    found: dict[str, float] = {}
    for name in ("fresh", "remembered"):
        start = time.process_time()
        for i in range(calls):
            if name == "fresh":
                _remembered_count.cache_clear()
            count_request_tokens(
                [Message(role="system", content=system), Message(role="user", content=f"#{i}")],
                "gpt-4o-mini",
            )
        found[name] = round((time.process_time() - start) / calls * 1e6, 1)
    found["system_prompt_tokens"] = count_text_tokens(system, "gpt-4o-mini").tokens
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=300, help="calls per round (300)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per side (7)")
    args = parser.parse_args()
    exit_on_signals()

    import openai  # the bench extra; imported here so --help works without it

    process, base_url = start_server()
    closers: list[Callable[[], object]] = []
    try:
        bare_provider = OpenAICompatibleProvider(base_url, model="fake-model", name="bare")
        closers.append(bare_provider.close)
        guard_provider = OpenAICompatibleProvider(base_url, model="fake-model", name="fake")
        httpx_transport_provider = OpenAICompatibleProvider(
            base_url, model="fake-model", name="httpx-transport", transport=httpx.HTTPTransport()
        )
        closers.append(httpx_transport_provider.close)
        http = httpx.Client(base_url=base_url, timeout=60)
        closers.append(http.close)
        sdk_client = openai.OpenAI(base_url=base_url, api_key="bench")
        closers.append(sdk_client.close)
        events: list[object] = []
        sdk = _recording_telemetry()
        common: dict[str, Any] = {
            "max_input_tokens": 4000,
            "input_filters": [lambda request: None],
            "output_filters": [lambda response: None],
            "hooks": [events.append],
            "environ": {},
        }
        guards = {
            "guard": Guard(guard_provider, **common),
            "telemetry_off": Guard(guard_provider, telemetry=False, **common),
            "telemetry_sdk": Guard(guard_provider, telemetry=sdk, **common),
            "all_stages": every_stage_guard(guard_provider, sdk, common),
            "all_stages_no_sdk": every_stage_guard(guard_provider, None, common),
        }
        for stage, arguments in extra_stages().items():  # each alone, over the default Guard
            guards[f"only_{stage}"] = Guard(guard_provider, **arguments, **common)
        tracer_provider, meter_provider, span_memory, metric_memory = recording_providers()
        recorded = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
        guards["recorded"] = every_stage_guard(guard_provider, recorded, common)
        closers.extend(guard.close for guard in guards.values())
        request = ChatRequest.model_validate({"messages": MESSAGES, "max_tokens": 64})
        body = {"model": "fake-model", "messages": MESSAGES, "max_tokens": 64}
        counter = iter(range(10**9))

        def bare() -> object:
            return bare_provider.complete(
                request, model="fake-model", deadline=time.monotonic() + 60
            )

        def bare_httpx_transport() -> object:
            return httpx_transport_provider.complete(
                request, model="fake-model", deadline=time.monotonic() + 60
            )

        def plain_httpx() -> object:
            response = http.post("/chat/completions", json=body)
            response.raise_for_status()
            return response.json()["choices"][0]["message"]["content"]

        def openai_sdk() -> object:
            completion = sdk_client.chat.completions.create(
                model="fake-model",
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=64,
            )
            return completion.choices[0].message.content

        def through(guard: Guard) -> Callable[[], object]:
            def call() -> object:
                events.clear()
                question = [
                    MESSAGES[0],
                    {"role": "user", "content": f"{QUESTION} #{next(counter)}"},
                ]
                return guard.chat(question, max_tokens=64, tenant="acme", feature="support")

            return call

        seam_client = openai.OpenAI(
            base_url="http://llmguard.invalid/v1",
            api_key="bench",
            http_client=http_client(guards["guard"]),
        )
        closers.append(seam_client.close)

        def seam() -> object:
            events.clear()
            question = f"{QUESTION} #{next(counter)}"
            completion = seam_client.chat.completions.create(
                model="fake-model",
                messages=[MESSAGES[0], {"role": "user", "content": question}],  # type: ignore[list-item]
                max_tokens=64,
                extra_headers={"x-llmguard-tenant": "acme", "x-llmguard-feature": "support"},
            )
            return completion.choices[0].message.content

        # what one every-stage call exports, handed to a bare SDK: the SDK's own floor
        exported = capture(through(guards.pop("recorded")), span_memory, metric_memory)
        sides: dict[str, Callable[[], object]] = {
            "otel_sdk_floor": Replay(exported),
            "httpx": plain_httpx,
            "openai_sdk": openai_sdk,
            "bare": bare,
            "provider_httpx_transport": bare_httpx_transport,
            "seam": seam,
        }
        sides.update({name: through(guard) for name, guard in guards.items()})
        for call in sides.values():  # warm up connections, encodings, code paths
            measure(call, 50)
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        wall: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for round_index in range(args.rounds):
            shift = round_index % len(names)  # no side always runs first or last
            for name in names[shift:] + names[:shift]:
                used, took = measure(sides[name], args.calls)
                cpu[name].append(used)
                wall[name].append(took)
    finally:
        for close in closers:
            close()
        stop_group(process)

    median = {name: statistics.median(values) for name, values in cpu.items()}
    wall_median = {name: statistics.median(values) for name, values in wall.items()}
    provider_us, guard_us = median["bare"], median["guard"]
    httpx_us, openai_us = median["httpx"], median["openai_sdk"]
    bare_us = httpx_us  # the "bare httpx"
    result = {
        "benchmark": "overhead",
        "what": (
            "client CPU time per non-streaming call, provider in another process; "
            "baselines: plain httpx (bare), the openai SDK, our provider object (provider)"
        ),
        "calls_per_side": args.calls * args.rounds,
        "rounds": args.rounds,
        "statistic": "median of per-round means",
        "httpx_us": round(httpx_us, 1),
        "openai_sdk_us": round(openai_us, 1),
        "openai_version": openai.__version__,
        "httpx_version": httpx.__version__,
        "bare_us": round(bare_us, 1),
        "provider_us": round(provider_us, 1),
        "provider_httpx_transport_us": round(median["provider_httpx_transport"], 1),
        "guard_us": round(guard_us, 1),
        "overhead_us": round(guard_us - bare_us, 1),
        "pipeline_us": round(guard_us - provider_us, 1),
        "overhead_vs_openai_sdk_us": round(guard_us - openai_us, 1),
        "ratio": round(guard_us / bare_us, 3),
        "pipeline_ratio": round(guard_us / provider_us, 3),
        "ratio_vs_openai_sdk": round(guard_us / openai_us, 3),
        "httpx_wall_us": round(wall_median["httpx"], 1),
        "openai_sdk_wall_us": round(wall_median["openai_sdk"], 1),
        "provider_wall_us": round(wall_median["bare"], 1),
        "guard_wall_us": round(wall_median["guard"], 1),
        "overhead_wall_us": round(wall_median["guard"] - wall_median["httpx"], 1),
        "telemetry_off_us": round(median["telemetry_off"] - provider_us, 1),
        "telemetry_sdk_us": round(median["telemetry_sdk"] - provider_us, 1),
        "all_stages_us": round(median["all_stages"] - provider_us, 1),
        "all_stages_overhead_us": round(median["all_stages"] - bare_us, 1),
        "all_stages_no_sdk_us": round(median["all_stages_no_sdk"] - provider_us, 1),
        "all_stages_sdk_us": round(median["all_stages"] - median["all_stages_no_sdk"], 1),
        "otel_sdk_floor_us": round(median["otel_sdk_floor"], 1),
        "otel_exported": exported.summary(),
        "stage_us": {  # what each stage adds to the default Guard (alone)
            "telemetry_sdk": round(median["telemetry_sdk"] - guard_us, 1),
            **{
                stage: round(median[f"only_{stage}"] - guard_us, 1)
                for stage in ("rate_limits", "spend_budget", "cache")
            },
        },
        "seam_us": round(median["seam"], 1),
        "seam_vs_guard_us": round(median["seam"] - guard_us, 1),
        "seam_vs_openai_sdk_us": round(median["seam"] - openai_us, 1),
        "seam_wall_us": round(wall_median["seam"], 1),
        "stages": STAGES,
        "all_stages": [*STAGES, "telemetry_sdk", "rate_limits", "spend_budget", "cache"],
        "state": "memory",
        "target_overhead_us": 50,
        "target_all_stages_overhead_us": 150,
        "count_long_system_prompt_us": count_long_system_prompt(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
