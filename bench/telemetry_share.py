"""What exporting one guarded call's telemetry costs, split into our share and the SDK's.

One call (``chat``, then a ``stream``) goes through a Guard over the loopback FakeProvider
and its ``Telemetry.record`` arguments are kept; ``record`` is then timed alone, three ways,
in alternating rounds (the median round is reported, CPU time of this process):

* ``sdk_us``: the real OpenTelemetry SDK (a ``TracerProvider`` with a ``SimpleSpanProcessor``
  whose exporter drops the spans, a ``MeterProvider`` with an in-memory reader), what
  ``telemetry_sdk`` in ``overhead.py`` measures inside a whole call;
* ``ours_us``: the same ``Telemetry`` code over a tracer whose spans record nothing and the
  API's no-op meter: every attribute, label and span our code builds, none of the SDK's work;
* ``no_sdk_us``: the default ``Telemetry()`` with no SDK configured (the early return).

``sdk_own_us`` (``sdk_us - ours_us``) is the SDK's own work on what we hand it (span
creation, cleaning each attribute value, hashing each label set, aggregation);
``ours_share`` is ``(ours_us - no_sdk_us) / (sdk_us - no_sdk_us)``. The stream's record
holds one ``time_per_output_chunk`` point per chunk gap (``chunk_gaps``).

Usage: python bench/telemetry_share.py [--json] [--quick] [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from _benchkit import exit_on_signals, stop_group
from opentelemetry import metrics, trace
from overhead import MESSAGES, QUESTION, _recording_telemetry, start_server

from llmguard_sdk import Guard, OpenAICompatibleProvider, Telemetry


class _Span(trace.NonRecordingSpan):
    """A span that says it records (so every attempt span is built) and keeps nothing."""

    def is_recording(self) -> bool:
        return True


class _Tracer(trace.NoOpTracer):
    def start_span(self, name: str, *args: Any, **kwargs: Any) -> trace.Span:
        return _Span(trace.INVALID_SPAN_CONTEXT)


class _TracerProvider(trace.NoOpTracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Tracer()


def _captured(kind: str, url: str) -> Callable[[Telemetry], None]:
    """``record`` of one real call of ``kind``, replayable on any Telemetry."""
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    telemetry = _recording_telemetry()
    real = telemetry.record

    def keep(*args: Any, **kwargs: Any) -> None:
        seen.append((args, kwargs))
        real(*args, **kwargs)

    telemetry.record = keep  # type: ignore[method-assign]
    guard = Guard(
        OpenAICompatibleProvider(url, model="fake-model", name="fake"),
        telemetry=telemetry,
        max_input_tokens=4000,
        environ={},
    )
    messages = [MESSAGES[0], {"role": "user", "content": f"{QUESTION} ({kind})"}]
    if kind == "stream":
        options: dict[str, Any] = {"max_tokens": 64, "tenant": "acme", "feature": "support"}
        with guard.chat(messages, stream=True, **options) as stream:
            list(stream)
    else:
        guard.chat(messages, max_tokens=64, tenant="acme", feature="support")
    guard.close()
    args, kwargs = seen[-1]
    return lambda target: target.record(*args, **kwargs)


def measure(replay: Callable[[Telemetry], None], calls: int, rounds: int) -> dict[str, float]:
    sides = {
        "sdk_us": _recording_telemetry(),
        "ours_us": Telemetry(
            tracer_provider=_TracerProvider(), meter_provider=metrics.NoOpMeterProvider()
        ),
        "no_sdk_us": Telemetry(),
    }
    found: dict[str, list[float]] = {side: [] for side in sides}
    for telemetry in sides.values():  # warm
        for _ in range(calls // 10 + 1):
            replay(telemetry)
    for _ in range(rounds):
        for side, telemetry in sides.items():
            start = time.process_time()
            for _ in range(calls):
                replay(telemetry)
            found[side].append((time.process_time() - start) / calls * 1e6)
    result = {side: round(statistics.median(values), 2) for side, values in found.items()}
    result["sdk_own_us"] = round(result["sdk_us"] - result["ours_us"], 2)
    added = result["sdk_us"] - result["no_sdk_us"]
    result["ours_share"] = round((result["ours_us"] - result["no_sdk_us"]) / added, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="50 records, one round (a smoke run)")
    for flag, default, what in (("--calls", 2000, "records per round"), ("--rounds", 9, "rounds")):
        parser.add_argument(flag, type=int, default=default, help=f"{what} ({default})")
    args = parser.parse_args()
    calls, rounds = (50, 1) if args.quick else (args.calls, args.rounds)
    exit_on_signals()
    process, url = start_server()
    try:
        replays = {kind: _captured(kind, url) for kind in ("chat", "stream")}
    finally:
        stop_group(process)
    report: dict[str, Any] = {}
    for kind, replay in replays.items():
        report[kind] = measure(replay, calls, rounds)
    report["stream"]["chunk_gaps"] = _chunk_gaps(replays["stream"])
    if args.json:
        print(json.dumps(report))
        return
    for kind, figures in report.items():
        print(kind, " ".join(f"{key}={value}" for key, value in figures.items()))


def _chunk_gaps(replay: Callable[[Telemetry], None]) -> int:
    """How many chunk gaps the captured stream's record exports."""
    gaps: list[int] = []

    class _Counting(Telemetry):
        def record(self, ctx: Any, *args: Any, **kwargs: Any) -> None:
            gaps.append(sum(len(attempt.chunk_gaps) for attempt in ctx.attempt_log))

    replay(_Counting())
    return gaps[0]


if __name__ == "__main__":
    main()
