"""Async HTTP clients side by side: calls/s at 50 and 500 concurrent calls, with what moves them.

The same chat request POSTed to the same FakeProvider (its own process) and its JSON answer
parsed, ``concurrency`` tasks at a time on one event loop, by each client in a process of its
own:

* ``httpx_default``: ``httpx.AsyncClient()`` with httpx's default pool (100 connections, of which
  20 are kept alive between calls);
* ``httpx_sized``: ``httpx.AsyncClient`` with ``max_connections`` and
  ``max_keepalive_connections`` both set to the concurrency;
* ``httpx2_default`` / ``httpx2_sized``: the same with ``httpx2`` (what openai 3.x uses);
* ``ours_sized``: ``httpx2.AsyncClient`` over the provider's own transport (anyio streams, a
  stack of idle connections per origin: what a Guard's async calls use), sized likewise;
* ``aiohttp``: an ``aiohttp.ClientSession`` whose connector's ``limit`` is the concurrency
  (skipped, and named in ``skipped``, when aiohttp is not installed).

Each process runs a warm-up round, then the measured rounds; the clients take turns round by
round (order rotated). Per client and level: ``calls_s`` (mean over rounds), ``round_min`` /
``round_max``, and per round: ``calls_s``, ``connects`` (TCP connections the client opened in
the round: ``socket.connect`` calls), ``errors`` (failed calls: counted, not retried),
``client_cpu_us`` and ``server_cpu_us`` (CPU per call of
the client's and the FakeProvider's process), ``gc_ms`` (time in the client's garbage
collector) and ``others_cpu`` (cores' worth of CPU the rest of the machine used during the
round: a shared machine's load). ``first_round_calls_s``, ``first_round_connects`` and
``first_round_errors`` are the warm-up round's: it opens the pool's connections, up to
``concurrency`` of them at once.

Usage: python bench/http_clients.py [--json] [--calls N] [--rounds R] [--quick]
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import socket
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

CLIENTS = (
    "httpx_default",
    "httpx_sized",
    "httpx2_default",
    "httpx2_sized",
    "ours_sized",
    "aiohttp",
)
MODULES = {"httpx": "httpx", "httpx2": "httpx2", "ours": "llmguard_sdk", "aiohttp": "aiohttp"}
LEVELS = (50, 500)
BODY = {
    "model": "fake-model",
    "messages": [{"role": "user", "content": "Where is my parcel?"}],
    "max_tokens": 16,
}


# ----------------------------------------------------------------------- the clients


def _installed(name: str) -> bool:
    return importlib.util.find_spec(MODULES[name.split("_")[0]]) is not None


def _httpx_like(
    module: Any, base_url: str, concurrency: int | None, ours: bool = False
) -> tuple[Any, Any]:
    options: dict[str, Any] = {}
    if concurrency is not None:
        size = module.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        options = {"limits": size}
        if ours:
            from llmguard_sdk.providers._ahttp11 import AnyioTransport

            options["transport"] = AnyioTransport(module, size)
    http = module.AsyncClient(base_url=base_url, timeout=60, **options)

    async def call() -> object:
        response = await http.post("/chat/completions", json=BODY)
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]

    return call, http.aclose


def _aiohttp(base_url: str, concurrency: int) -> tuple[Any, Any]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=60),
    )
    url = base_url + "/chat/completions"

    async def call() -> object:
        async with session.post(url, json=BODY) as response:
            response.raise_for_status()
            return (await response.json())["choices"][0]["message"]["content"]

    return call, session.close


def _client(name: str, base_url: str, concurrency: int) -> tuple[Any, Any]:
    """The client's call and its async close."""
    if name == "aiohttp":
        return _aiohttp(base_url, concurrency)
    if name == "ours_sized":
        import httpx2

        return _httpx_like(httpx2, base_url, concurrency, ours=True)
    module = __import__(name.split("_")[0])
    return _httpx_like(module, base_url, concurrency if name.endswith("_sized") else None)


# ----------------------------------------------------------------------- a worker


class _Counters:
    """Connections opened (``socket.connect`` calls), failed calls and time in the garbage
    collector."""

    def __init__(self) -> None:
        self.connects = 0
        self.errors = 0
        self.gc_s = 0.0
        self._gc_start = 0.0
        original = socket.socket.connect

        def counting_connect(sock: socket.socket, address: Any) -> None:
            self.connects += 1
            return original(sock, address)

        socket.socket.connect = counting_connect  # type: ignore[method-assign]
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_start


async def _round(
    call: Callable[[], Awaitable[object]], concurrency: int, calls: int, counters: _Counters
) -> dict[str, float]:
    """Calls/s for ``calls`` calls, ``concurrency`` at a time, with the round's counters."""
    import anyio

    left = [calls]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            try:
                await call()
            except Exception:  # counted: a reset connection, an error answer
                counters.errors += 1

    connects, gc_s, cpu = counters.connects, counters.gc_s, time.process_time()
    errors = counters.errors
    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(concurrency):
            tasks.start_soon(worker)
    elapsed = time.perf_counter() - start
    return {
        "calls_s": calls / elapsed,
        "connects": counters.connects - connects,
        "errors": counters.errors - errors,
        "client_cpu_us": (time.process_time() - cpu) / calls * 1e6,
        "gc_ms": (counters.gc_s - gc_s) * 1e3,
    }


def worker_main(name: str, base_url: str, concurrency: int, calls: int) -> None:
    """A client's process: a warm-up round, then a round for each line read from stdin."""
    import anyio

    counters = _Counters()

    async def serve() -> None:
        call, close = _client(name, base_url, concurrency)
        try:
            first = await _round(call, concurrency, calls, counters)
            print(json.dumps(first), flush=True)
            while await anyio.to_thread.run_sync(sys.stdin.readline):
                print(json.dumps(await _round(call, concurrency, calls, counters)), flush=True)
        finally:
            await close()

    anyio.run(serve)


# ----------------------------------------------------------------------- the driver


def _start(name: str, base_url: str, concurrency: int, calls: int) -> tuple[Any, dict[str, float]]:
    args = [__file__, "--worker", name, "--base-url", base_url]
    args += ["--concurrency", str(concurrency), "--calls", str(calls)]
    process = popen_group(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    line = process.stdout.readline()
    if not line.strip():
        stop_group(process)
        raise SystemExit(f"the {name} worker did not start")
    return process, json.loads(line)


def _ask(process: Any, server_pid: int, calls: int) -> dict[str, float]:
    """One measured round of a worker, with the server's and the machine's CPU beside it."""
    cpu = RoundCpu(server_pid, process.pid)
    process.stdin.write("go\n")
    process.stdin.flush()
    found: dict[str, float] = json.loads(process.stdout.readline())
    server_s, _, found["others_cpu"] = cpu.done()
    found["server_cpu_us"] = server_s / calls * 1e6
    return {key: round(value, 2) for key, value in found.items()}


def level(server: Any, base_url: str, concurrency: int, calls: int, rounds: int) -> dict[str, Any]:
    """Every client at one concurrency level, rounds taken in turns."""
    names = [n for n in CLIENTS if _installed(n)]
    workers: dict[str, Any] = {}
    first: dict[str, dict[str, float]] = {}
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    try:
        for name in names:
            workers[name], first[name] = _start(name, base_url, concurrency, calls)
        for index in range(rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                per_round[name].append(_ask(workers[name], server.pid, calls))
    finally:
        for process in workers.values():
            stop_group(process)
    found: dict[str, Any] = {}
    for name, values in per_round.items():
        rates = [v["calls_s"] for v in values]
        found[name] = {
            "calls_s": round(statistics.fmean(rates), 1),
            "round_min": min(rates),
            "round_max": max(rates),
            "first_round_calls_s": round(first[name]["calls_s"], 1),
            "first_round_connects": first[name]["connects"],
            "first_round_errors": first[name]["errors"],
            "rounds": values,
        }
    return found


def main() -> None:
    args = round_arguments(__doc__, CLIENTS, "client", worker_main)
    if args is None:
        return
    from overhead import start_server

    server, base_url = start_server(LOOPBACK_SERVERS[args.server])
    try:
        levels = {str(c): level(server, base_url, c, args.calls, args.rounds) for c in LEVELS}
    finally:
        stop_group(server)
    skipped = [n for n in CLIENTS if not _installed(n)]
    result = {
        "calls_per_round": args.calls,
        "cores": os.cpu_count(),
        "server": args.server,
        "concurrency": levels,
    }
    result["skipped"] = skipped
    print_result(result, args.json)


if __name__ == "__main__":
    main()
