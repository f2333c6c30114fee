"""Async throughput: calls per second at 50 and 500 concurrent calls, Guard beside bare clients.

Every side sends the same chat request to the same FakeProvider (its own process) from its own
process, ``concurrency`` tasks at a time on one event loop, until ``--calls`` calls are done:

* ``sdk``: the openai package's ``AsyncOpenAI(base_url=..., api_key=...)`` with its defaults,
  ``await client.chat.completions.create(...)``;
* ``httpx``: a plain ``httpx.AsyncClient`` POST and JSON parse (no pool limits set: httpx's
  defaults), what a hand-written integration does;
* ``guard``: ``await guard.achat(...)`` through a Guard with its default stages.

A round at a level has at least ``CALLS_PER_TASK`` calls per concurrent task (``--calls``
or more: 2,000 calls at 50 tasks, 8,000 at 500): with only 4 calls per task, a round at 500
tasks is mostly its ramp-up and its tail, and its rate swings with them rather than with the
client (``--quick`` keeps its 200 calls; the plain httpx side, which the targets do not
compare and which manages about 80 calls/s at 500 tasks, keeps ``--calls``). Each side's
process runs a warm-up round first (its first round is slower: connections, imports, code
paths), then the measured rounds; the sides take turns round by round (order rotated), so
load on a shared machine hits each alike. Per concurrency level (``calls_per_round`` and
``httpx_calls_per_round`` say how many calls a round had):
``sdk_calls_s``, ``httpx_calls_s``, ``guard_calls_s`` (means over the rounds), ``ratio``
(Guard over SDK; target >= 1.0), ``guard_round_min`` / ``guard_round_max`` (target: the
slowest round at least 0.8 of the fastest), every round's figure per side, and ``others_cpu``:
per side and round, the cores' worth of CPU the rest of the machine used meanwhile (other
jobs on a shared machine; the FakeProvider and the side's own process not counted).

Usage: python bench/throughput.py [--json] [--calls N] [--rounds R] [--quick]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _benchkit import (
    LOOPBACK_SERVERS,
    RoundCpu,
    popen_group,
    print_result,
    round_arguments,
    stop_group,
)
from overhead import start_server

SIDES = ("sdk", "httpx", "guard")
LEVELS = (50, 500)
CALLS_PER_TASK = 16  # at least, in a measured round
MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]


def _client(side: str, base_url: str) -> tuple[Callable[[], Awaitable[object]], Any]:
    """The side's call and the object to close at the end."""
    if side == "sdk":
        import openai

        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="bench")

        async def sdk_call() -> object:
            completion = await sdk.chat.completions.create(
                model="fake-model",
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=16,
            )
            return completion.choices[0].message.content

        return sdk_call, sdk
    if side == "httpx":
        import httpx

        http = httpx.AsyncClient(base_url=base_url, timeout=60)
        body = {"model": "fake-model", "messages": MESSAGES, "max_tokens": 16}

        async def httpx_call() -> object:
            response = await http.post("/chat/completions", json=body)
            response.raise_for_status()
            return response.json()["choices"][0]["message"]["content"]

        return httpx_call, http
    from llmguard_sdk import Guard, OpenAICompatibleProvider

    guard = Guard(OpenAICompatibleProvider(base_url, model="fake-model", name="fake"), environ={})

    async def guard_call() -> object:
        return (await guard.achat(MESSAGES, max_tokens=16)).text

    return guard_call, guard


async def _round(call: Callable[[], Awaitable[object]], concurrency: int, calls: int) -> float:
    """Calls per second for ``calls`` calls, ``concurrency`` at a time."""
    import anyio

    left = [calls]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await call()

    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(concurrency):
            tasks.start_soon(worker)
    return calls / (time.perf_counter() - start)


def worker_main(side: str, base_url: str, concurrency: int, calls: int) -> None:
    """A side's process: a warm-up round, then a round for each line read from stdin."""
    import anyio

    async def serve() -> None:
        call, client = _client(side, base_url)
        try:
            await _round(call, concurrency, calls)
            print("ready", flush=True)
            while await anyio.to_thread.run_sync(sys.stdin.readline):
                print(json.dumps(await _round(call, concurrency, calls)), flush=True)
        finally:
            await (client.close() if side == "sdk" else client.aclose())

    anyio.run(serve)


def _start(side: str, base_url: str, concurrency: int, calls: int) -> subprocess.Popen[str]:
    args = [__file__, "--worker", side, "--base-url", base_url]
    args += ["--concurrency", str(concurrency), "--calls", str(calls)]
    process = popen_group(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        stop_group(process)
        raise SystemExit(f"the {side} worker did not start")
    return process


def _ask(process: subprocess.Popen[str], server_pid: int) -> tuple[float, float]:
    """One measured round: calls/s and the rest of the machine's load (cores' worth)."""
    assert process.stdin is not None
    assert process.stdout is not None
    cpu = RoundCpu(server_pid, process.pid)
    process.stdin.write("go\n")
    process.stdin.flush()
    calls_s = float(json.loads(process.stdout.readline()))
    return calls_s, cpu.done()[2]


def _side_calls(side: str, calls: int, floor: int) -> int:
    """A round's calls for ``side``: plain httpx, a reference the targets do not compare
    (about 80 calls/s at 500 tasks), keeps ``floor`` (``--calls``) so a run stays minutes."""
    return floor if side == "httpx" else calls


def level(
    server_pid: int, base_url: str, concurrency: int, calls: int, rounds: int, floor: int
) -> dict[str, Any]:
    """Every side at one concurrency level, rounds taken in turns."""
    workers: dict[str, subprocess.Popen[str]] = {}
    per_round: dict[str, list[float]] = {side: [] for side in SIDES}
    others: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        for side in SIDES:
            workers[side] = _start(side, base_url, concurrency, _side_calls(side, calls, floor))
        for index in range(rounds):
            shift = index % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                calls_s, load = _ask(workers[side], server_pid)
                per_round[side].append(calls_s)
                others[side].append(round(load, 2))
    finally:
        for process in workers.values():
            stop_group(process)
    mean = {side: statistics.fmean(values) for side, values in per_round.items()}
    return {
        "sdk_calls_s": round(mean["sdk"], 1),
        "httpx_calls_s": round(mean["httpx"], 1),
        "guard_calls_s": round(mean["guard"], 1),
        "ratio": round(mean["guard"] / mean["sdk"], 3),
        "guard_round_min": round(min(per_round["guard"]), 1),
        "guard_round_max": round(max(per_round["guard"]), 1),
        "calls_per_round": calls,
        "httpx_calls_per_round": _side_calls("httpx", calls, floor),
        "rounds": {side: [round(v, 1) for v in values] for side, values in per_round.items()},
        "others_cpu": others,
    }


def calls_per_round(args: Any, concurrency: int) -> int:
    """``--calls``, raised to ``CALLS_PER_TASK`` calls per task (not with ``--quick``)."""
    return args.calls if args.quick else max(args.calls, CALLS_PER_TASK * concurrency)


def main() -> None:
    args = round_arguments(__doc__, SIDES, "side", worker_main)
    if args is None:
        return
    server, base_url = start_server(LOOPBACK_SERVERS[args.server])
    try:
        levels = {
            str(c): level(
                server.pid, base_url, c, calls_per_round(args, c), args.rounds, args.calls
            )
            for c in LEVELS
        }
    finally:
        stop_group(server)
    result = {"calls_per_round": args.calls, "server": args.server, "concurrency": levels}
    print_result(result, args.json)


if __name__ == "__main__":
    main()
