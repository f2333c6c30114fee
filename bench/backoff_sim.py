"""Backoff strategies under contention: a simulated OCC experiment and a real rate-limited provider.

Scenario 1, ``occ``: a reproduction of the AWS Architecture Blog post "Exponential Backoff And
Jitter" (Marc Brooker, 2015), modelled like the blog's own simulator
(aws-samples/aws-arch-backoff-simulator), in simulated time with a heapq event queue
(nothing sleeps):

* One server holds one row with a version number. N clients each want to write the row once.
* A client *call* is a read followed by a conditional write. Every message is one network hop
  of ``|Normal(10 ms, 2 ms)|``, so a call is four hops: read request, read reply (carrying the
  version), write request (carrying that version), write reply.
* The server handles messages in arrival order. A write succeeds only if the version it
  carries is still current (no other write committed since the client's read); then the
  version is bumped. Otherwise the client backs off and starts a new call with a fresh read.
  The backoff is added to the send time of that read, as in the blog's simulator.
* ``calls`` counts write attempts (one per read+write pair), the quantity the blog plots;
  reads are not counted separately. ``time_ms`` is when the last client got its success reply.
* Waits come from the library's :func:`llmguard_sdk.retry.backoff` with base 5 ms and cap 2 s:
  ``exponential`` is its ``"none"`` jitter (plain ``min(cap, base * 2**n)``), ``equal``,
  ``full`` and ``decorrelated`` are the jitters of the same name (decorrelated grows from the
  client's previous wait). ``none`` retries at once, without any backoff. The retry index
  follows the library's (and the Guard's) convention, 0 for the first retry; the blog's
  simulator starts at 1, which only doubles every wait and does not change the ranking.
* Each (clients, strategy) pair is averaged over 100 runs, each with its own seeded
  ``random.Random`` for both network delays and jitter, so results are reproducible.

The blog's finding that must show up here: at 100 clients, full jitter makes at most half the
calls of plain exponential backoff, and the fewest calls of all strategies (``occ_shape_holds``).

Scenario 2, ``provider``: many concurrent clients (asyncio tasks), each needing one successful
chat call, against one real :class:`~llmguard_sdk.testing.FakeProvider` with a provider-side
rate limit (a sliding window of ``limit_window`` seconds; its 429 answers carry ``Retry-After``
in whole seconds and the exact wait in ``retry-after-ms``). Rows, each against a fresh provider:

* ``full+budget``: a :class:`~llmguard_sdk.Guard` with full jitter and the default retry budget.
* ``full``: the same Guard without a retry budget (separates the budget's effect from jitter's).
* ``openai-style``: a plain loop around the same provider class with openai-python's schedule:
  ``min(0.5 * 2**n, 8) * (1 - 0.25 * random())``, except that a ``retry-after-ms`` or
  ``Retry-After`` hint (read in that order, like openai-python) of at most 60 s is used as the
  wait instead. (openai-python 1.x used 60 s; newer releases allow 120 s, which makes no
  difference here since the fake provider's hints are at most ``limit_window``.)

Both the Guard and the loop honour the server's hint, so against this provider the hint, not
the jitter, sets the waits; the budget is what changes the number of calls. Every client has a
total deadline (``client_timeout_s``) and an outer ``anyio.move_on_after`` as a backstop, so
no row can hang.

Usage: python bench/backoff_sim.py [--json] [--quick] [--seed N]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

import anyio

from llmguard_sdk import ChatRequest, Guard, LLMGuardError, OpenAICompatibleProvider, ProviderError
from llmguard_sdk.retry import Jitter, RetryBudgetPolicy, RetryPolicy, backoff
from llmguard_sdk.testing import FakeProvider

# ------------------------------------------------------------------ scenario 1: simulated OCC

OCC_CLIENTS = (10, 50, 100)
OCC_STRATEGIES = ("none", "exponential", "equal", "full", "decorrelated")
OCC_RUNS = 100
OCC_RUNS_QUICK = 10
OCC_BASE_S = 0.005  # the blog's base: 5 ms
OCC_CAP_S = 2.0  # the blog's cap: 2 s
NET_MEAN_S = 0.010  # one network hop: |Normal(10 ms, 2 ms)|
NET_SD_S = 0.002

# What each strategy asks of the library's backoff(); "none" (no backoff at all) is absent.
_OCC_JITTER: dict[str, Jitter] = {
    "exponential": "none",
    "equal": "equal",
    "full": "full",
    "decorrelated": "decorrelated",
}

# Event kinds of the OCC simulation: where a message arrives.
_READ_AT_SERVER = 0  # a client's read request reaches the server
_READ_REPLY = 1  # the version read reaches the client, which sends the conditional write
_WRITE_AT_SERVER = 2  # the conditional write reaches the server (one counted call)
_WRITE_REPLY = 3  # the write's outcome reaches the client


class OccRow(TypedDict):
    """Mean results of one (clients, strategy) pair of scenario 1."""

    clients: int
    strategy: str
    calls: float
    time_ms: float


def occ_wait(strategy: str, retry: int, previous: float, rng: random.Random) -> float:
    """Seconds a client waits before retry number ``retry`` (0 for the first retry)."""
    if strategy == "none":
        return 0.0  # retry immediately: no backoff
    return backoff(
        _OCC_JITTER[strategy],
        retry,
        base=OCC_BASE_S,
        cap=OCC_CAP_S,
        previous=previous,
        rng=rng,
    )


def occ_run(clients: int, strategy: str, rng: random.Random) -> tuple[int, float]:
    """One simulated contention run: (write attempts, seconds until the last client succeeded)."""

    def hop() -> float:
        return abs(rng.normalvariate(NET_MEAN_S, NET_SD_S))

    # Events are (arrival time, sequence number, kind, client, payload); the sequence number
    # breaks time ties deterministically. The payload is the version for reads and writes and
    # 1/0 (success/failure) for write replies.
    queue: list[tuple[float, int, int, int, int]] = []
    seq = 0
    version = 0  # the row's current version, held by the server
    calls = 0
    retries = [0] * clients  # failed calls so far, per client
    previous = [0.0] * clients  # the last wait, per client (decorrelated jitter grows from it)
    for client in range(clients):  # every client starts its first read at t = 0
        queue.append((hop(), seq, _READ_AT_SERVER, client, 0))
        seq += 1
    heapq.heapify(queue)

    now = 0.0
    while queue:
        now, _, kind, client, payload = heapq.heappop(queue)
        if kind == _READ_AT_SERVER:
            event = (now + hop(), seq, _READ_REPLY, client, version)
        elif kind == _READ_REPLY:
            event = (now + hop(), seq, _WRITE_AT_SERVER, client, payload)
        elif kind == _WRITE_AT_SERVER:
            calls += 1
            committed = payload == version
            if committed:
                version += 1
            event = (now + hop(), seq, _WRITE_REPLY, client, int(committed))
        else:  # _WRITE_REPLY
            if payload:
                continue  # this client is done
            wait = occ_wait(strategy, retries[client], previous[client], rng)
            retries[client] += 1
            previous[client] = wait
            event = (now + hop() + wait, seq, _READ_AT_SERVER, client, 0)
        seq += 1
        heapq.heappush(queue, event)
    # Every failed write schedules more events, so the last event is the last success reply.
    return calls, now


def occ_rows(runs: int, seed: int) -> list[OccRow]:
    """Scenario 1: the mean calls and completion time of every (clients, strategy) pair."""
    rows: list[OccRow] = []
    for clients in OCC_CLIENTS:
        for strategy in OCC_STRATEGIES:
            total_calls, total_time = 0, 0.0
            for run in range(runs):
                # String seeds are hashed deterministically (not subject to PYTHONHASHSEED).
                rng = random.Random(f"occ:{seed}:{clients}:{strategy}:{run}")
                calls, elapsed = occ_run(clients, strategy, rng)
                total_calls += calls
                total_time += elapsed
            rows.append(
                OccRow(
                    clients=clients,
                    strategy=strategy,
                    calls=round(total_calls / runs, 2),
                    time_ms=round(total_time / runs * 1000.0, 2),
                )
            )
    return rows


def occ_shape_holds(rows: Sequence[OccRow], clients: int = 100) -> bool:
    """The blog's result at ``clients``: full jitter <= half of exponential, and the fewest."""
    calls = {row["strategy"]: row["calls"] for row in rows if row["clients"] == clients}
    full = calls["full"]
    return full <= 0.5 * calls["exponential"] and full <= min(calls.values())


# --------------------------------------------------------- scenario 2: a rate-limited provider

MESSAGES = [{"role": "user", "content": "hi"}]
OPENAI_INITIAL_DELAY_S = 0.5  # openai-python's INITIAL_RETRY_DELAY
OPENAI_MAX_DELAY_S = 8.0  # openai-python's MAX_RETRY_DELAY
OPENAI_MAX_RETRY_AFTER_S = 60.0  # openai-python 1.x honours hints up to this many seconds


@dataclass(frozen=True)
class ProviderSetup:
    """The load and the retry settings shared by every row of scenario 2."""

    clients: int = 40
    rpm: int = 10  # requests allowed per limit_window (not per minute: the window is short)
    limit_window: float = 1.0
    attempts: int = 8
    base: float = 0.5
    cap: float = 8.0
    client_timeout_s: float = 30.0


class ProviderRow(TypedDict):
    """What one strategy of scenario 2 did to the provider, and how the clients fared."""

    strategy: str
    calls: int
    provider_429: int
    time_s: float
    succeeded: int


async def run_clients(
    setup: ProviderSetup, client: Callable[[], Awaitable[bool]]
) -> tuple[int, float]:
    """Run ``setup.clients`` copies of ``client`` at once: (how many succeeded, wall seconds).

    ``client`` returns whether it got an answer. Each copy is also cut off a little after its
    own deadline, as a backstop, so a row always ends.
    """
    succeeded = 0

    async def bounded() -> None:
        nonlocal succeeded
        with anyio.move_on_after(setup.client_timeout_s + 5.0):
            if await client():
                succeeded += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(setup.clients):
            group.start_soon(bounded)
    return succeeded, time.perf_counter() - start


def provider_row(strategy: str, fake: FakeProvider, succeeded: int, elapsed: float) -> ProviderRow:
    """A result row from the fake provider's counters."""
    stats = fake.stats
    return ProviderRow(
        strategy=strategy,
        calls=stats.requests,
        provider_429=stats.rate_limited,
        time_s=round(elapsed, 3),
        succeeded=succeeded,
    )


async def guard_row(
    strategy: str, setup: ProviderSetup, budget: RetryBudgetPolicy | None
) -> ProviderRow:
    """Every client calls through one shared Guard (full jitter; ``budget`` or none)."""
    with FakeProvider(rpm=setup.rpm, limit_window=setup.limit_window) as fake:
        guard = Guard(
            OpenAICompatibleProvider(fake.base_url, model="m"),
            retry=RetryPolicy(
                attempts=setup.attempts,
                base=setup.base,
                cap=setup.cap,
                jitter="full",
                timeout=setup.client_timeout_s,
            ),
            retry_budget=budget,
            timeout=setup.client_timeout_s,
            environ={},  # ignore any LLMGUARD_* settings of the machine running the benchmark
        )

        async def client() -> bool:
            try:
                await guard.achat(MESSAGES)
            except LLMGuardError:
                return False  # gave up: attempts, budget or deadline exhausted
            return True

        try:
            succeeded, elapsed = await run_clients(setup, client)
        finally:
            await guard.aclose()
        return provider_row(strategy, fake, succeeded, elapsed)


def openai_retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's hint in seconds as openai-python reads it: retry-after-ms, then Retry-After.

    (openai-python also accepts an HTTP date in Retry-After; the fake provider never sends one.)
    """
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            continue
    return None


def openai_style_wait(retry: int, hint: float | None, rng: random.Random) -> float:
    """openai-python's wait before retry number ``retry`` (0 for the first retry).

    This is the baseline being compared against, so it is written out here on purpose; the
    library's own strategies always come from :func:`~llmguard_sdk.retry.backoff`.
    """
    if hint is not None and 0.0 < hint <= OPENAI_MAX_RETRY_AFTER_S:
        return hint
    ceiling = min(OPENAI_INITIAL_DELAY_S * 2.0**retry, OPENAI_MAX_DELAY_S)
    return ceiling * (1.0 - 0.25 * rng.random())


async def openai_style_row(setup: ProviderSetup, rng: random.Random) -> ProviderRow:
    """Every client runs openai-python's retry loop around the bare provider."""
    with FakeProvider(rpm=setup.rpm, limit_window=setup.limit_window) as fake:
        provider = OpenAICompatibleProvider(fake.base_url, model="m")
        request = ChatRequest.model_validate({"messages": MESSAGES})

        async def client() -> bool:
            # A total deadline per client keeps waits bounded (openai-python itself only bounds
            # each request, not the whole retry loop).
            deadline = time.monotonic() + setup.client_timeout_s
            for attempt in range(setup.attempts):
                try:
                    await provider.acomplete(request, model="m", deadline=deadline)
                except ProviderError as exc:  # 429s here; 5xx and timeouts retried the same way
                    if not exc.retryable or attempt + 1 >= setup.attempts:
                        return False
                    wait = openai_style_wait(attempt, openai_retry_after(exc.headers), rng)
                    if time.monotonic() + wait >= deadline:
                        return False
                    await anyio.sleep(wait)
                else:
                    return True
            return False

        try:
            succeeded, elapsed = await run_clients(setup, client)
        finally:
            await provider.aclose()
        return provider_row("openai-style", fake, succeeded, elapsed)


async def provider_rows(setup: ProviderSetup, seed: int) -> list[ProviderRow]:
    """Scenario 2: one row per strategy, each against a fresh fake provider."""
    # The Guard draws its jitter from the module-level random; seed it for repeatability
    # (the rows still vary a little with real scheduling and network timing).
    random.seed(f"provider:{seed}")
    return [
        await guard_row("full+budget", setup, RetryBudgetPolicy()),
        await guard_row("full", setup, None),
        await openai_style_row(setup, random.Random(f"openai:{seed}")),
    ]


# ------------------------------------------------------------------------------- output


def print_table(result: Mapping[str, Any]) -> None:
    """The result as readable tables."""
    print(f"Scenario 1 (occ): simulated OCC, mean of {result['occ_runs']} runs per row")
    print(f"{'clients':>7}  {'strategy':<13}{'calls':>10}{'time_ms':>12}")
    for row in result["occ"]:
        print(
            f"{row['clients']:>7}  {row['strategy']:<13}{row['calls']:>10.1f}"
            f"{row['time_ms']:>12.1f}"
        )
    print(f"occ_shape_holds: {result['occ_shape_holds']}")
    print()
    setup = result["provider_setup"]
    print(
        f"Scenario 2 (provider): {setup['clients']} clients, {setup['rpm']} requests per "
        f"{setup['limit_window']} s, {setup['attempts']} attempts"
    )
    print(f"{'strategy':<14}{'calls':>7}{'429s':>7}{'time_s':>9}{'succeeded':>11}")
    for row in result["provider"]:
        print(
            f"{row['strategy']:<14}{row['calls']:>7}{row['provider_429']:>7}"
            f"{row['time_s']:>9.2f}{row['succeeded']:>11}"
        )
    runtime = result["runtime_s"]
    print(f"\nruntime: occ {runtime['occ']} s, provider {runtime['provider']} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: 10 OCC runs, 30 provider clients"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of every random draw (0)")
    args = parser.parse_args(argv)

    runs = OCC_RUNS_QUICK if args.quick else OCC_RUNS
    setup = ProviderSetup(clients=30) if args.quick else ProviderSetup()

    start = time.perf_counter()
    occ = occ_rows(runs, args.seed)
    occ_time = time.perf_counter() - start

    start = time.perf_counter()
    provider = anyio.run(provider_rows, setup, args.seed)
    provider_time = time.perf_counter() - start

    budget = RetryBudgetPolicy()
    result: dict[str, Any] = {
        "benchmark": "backoff_sim",
        "occ": occ,
        "occ_runs": runs,
        "occ_shape_holds": occ_shape_holds(occ),
        "provider": provider,
        "provider_setup": {
            **asdict(setup),
            "jitter": "full",
            "retry_budget": asdict(budget),
            "openai_max_retry_after_s": OPENAI_MAX_RETRY_AFTER_S,
        },
        "runtime_s": {"occ": round(occ_time, 2), "provider": round(provider_time, 2)},
    }
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
