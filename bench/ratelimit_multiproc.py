"""One RPM + TPM limit shared by processes through Redis, against a provider enforcing it.

What is measured
----------------
Phase ``shared``: ``processes`` worker processes (multiprocessing, spawn), each running
``workers`` threads that call ``Guard.chat`` in a loop for ``duration_s`` seconds. Every process
builds its own :class:`~llmguard_sdk.Guard` with ``store=<redis url>``, the same ``key_prefix``
and ``rate_limits={"fake": RateLimit(rpm, tpm, period=period_s, max_wait=max_wait_s)}``, so all
of them reserve from one budget in Redis. They all call one
:class:`~llmguard_sdk.testing.FakeProvider` that enforces ``requests_per_period`` (R) requests
and ``tokens_per_period`` (T) tokens per sliding window of ``period_s`` seconds. Retries and
circuit breakers are off, so every provider request is one Guard attempt and only the limiter
decides when requests go out. Each call draws its size at random (seeded): a prompt of
``min_words``..``max_words`` words and a ``max_tokens`` of ``min_max_tokens``..``max_max_tokens``,
both log-uniform, so a call costs between about 30 and 2,500 tokens.

* ``requests``: chat requests the provider received (all Guards together, whole run, including
  calls started before the end and finished after it).
* ``provider_429``: of those, how many the provider refused with 429 (its own limits).
* ``token_share``: tokens the provider served per period over the steady part of the run (from
  ``steady_skip_periods`` periods after the start to the end), divided by T. The provider's
  counters are sampled every ``sample_s`` seconds in the parent; ``per_period_token_share``
  shows every period of the run, the first one with the start-up burst, and
  ``per_period_429`` when the 429s came. ``mean_tokens_per_call`` (served) against
  ``drawn_mean_tokens_per_call`` shows whether the limiter favoured small calls.
* A Guard whose limiter has no room within ``max_wait_s`` refuses the call locally
  (``RateLimitExceededError``, nothing sent); the worker sleeps the ``retry_after`` it is told
  and sends the same call again (so does a worker whose call got a 429). These are
  ``refused_locally``, not requests.

Phase ``unshared`` (the fair baseline without shared state): the same processes, workers and
draws, but each Guard with ``store="memory"`` and a quarter (1 / ``processes``) of the limits,
which is how replicas are configured when they cannot share state. Its ``burst`` is
``processes`` x the shared one, so each process's burst holds the same number of tokens as the
shared Guards' (the largest call must fit in a burst, or it is never sent). A fresh
FakeProvider with the same limits answers them; ``unshared_requests``,
``unshared_provider_429`` and ``unshared_token_share`` are counted the same way.

Phase ``unshared_whole_limit`` (a second row, the naive configuration): each process limits
itself alone to the *whole* limits; ``unshared_whole_limit_*`` keys.

Micro-benchmark (parent, after both phases, single-threaded): the wall time of one
``reserve()`` call (``time.perf_counter_ns``) for :class:`~llmguard_sdk.ratelimit.
MemoryRateLimiter` and :class:`~llmguard_sdk.ratelimit.RedisRateLimiter` (rpm and tpm, 500
tokens), and of one ``MovingWindowRateLimiter.hit`` of the ``limits`` library (one request per
hit) on a ``RedisStorage`` built on *the same* redis-py connection pool as our limiter, on the
same Redis. Every limit is far from full (no call is refused), every variant is warmed up first
(its Lua script loaded, its connection open), and the variants alternate in rounds so drift hits
all alike. ``acquire_p50_us`` / ``acquire_max_us`` (and ``acquire_p99_us`` when every
variant has at least 1,000 samples, ``acquire_samples`` each) are keyed ``memory`` / ``redis``;
``limits_lib_ratio`` is our Redis p50 over the ``limits`` library's p50.

How the two token counts are made comparable
--------------------------------------------
The provider charges a request its input tokens (words + 4 per message) plus its ``max_tokens``
when it arrives. The Guard reserves its own estimate of the input (cl100k count plus framing)
plus ``max_tokens`` before sending, and settles to the provider's reported usage afterwards.

* Every call sets ``max_tokens``, and the provider's reply always fills it (``reply`` callback),
  so the usage the Guard settles to is exactly what the provider charged.
* Prompts are made of common English words that are one cl100k token each, so the Guard's
  estimate is the provider's count plus 2 (framing), checked at start-up and reported as
  ``estimate_minus_provider_tokens``: a reservation is never smaller than the charge.
* The Guards' limits are ``guard_share`` (95 %) of the provider's. GCRA and the provider's
  sliding window agree on the long-run rate but not on every window: requests reach the
  provider a few milliseconds after their reservation, in a slightly different order, so a
  limit set exactly at the provider's would overrun some windows by a little.
* The start-up burst: with a full burst (``burst=1``) GCRA, like the provider, lets one
  period's worth through at once, but then refills continuously, while the provider's sliding
  window only frees as the burst leaves it, one period later: right after the start the Guards
  sent into a full window (6-15 provider 429s per cold start). A sliding window holds at most
  (1 + ``burst``) x the GCRA limit, so the Guards run with ``burst`` = 0.045: 0.95 x 1.045 stays
  just under the provider's limit, and the largest call (about 2,530 tokens) still fits in a
  burst. ``provider_429_steady`` counts the 429s after the first ``steady_skip_periods``
  periods. A short ``max_wait_s`` keeps the queue short; its price is more local refusals
  (workers poll with ``retry_after``).

Why the FakeProvider runs in the parent
---------------------------------------
``python -m llmguard_sdk.testing serve`` has no ``--limit-window`` (its window is 60 s) and no
reply hook. With a 60 s window a 30 s run sees only the first burst (GCRA, like the provider,
admits one period's worth at once), never a steady rate; with ``period_s`` = 2 s on both sides
a run covers 15 periods (4 in ``--quick``). The provider is a threaded server; in the parent
it shares a process only with the sampling loop, which sleeps between samples. The worker
processes are where the Guards, and their CPU time, live.

Redis: ``--redis-url``, else ``REDIS_URL``, else a throwaway ``redis-server`` started for the
run; the run's keys (one random prefix) are deleted at the end, whatever the end, and the
worker processes are stopped on every exit path.

Usage: python bench/ratelimit_multiproc.py [--json] [--quick] [--seed N] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import multiprocessing
import queue
import random
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypedDict

import redis
from _benchkit import (
    P99_MIN_SAMPLES,
    REAPER,
    exit_on_signals,
    given_redis,
    latency_summary,
    nearest_rank,
)
from limits import RateLimitItemPerMinute
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter

from llmguard_sdk import Guard, LLMGuardError, OpenAICompatibleProvider
from llmguard_sdk.errors import RateLimitedError, RateLimitExceededError
from llmguard_sdk.models import Message
from llmguard_sdk.ratelimit import MemoryRateLimiter, RateLimit, RedisRateLimiter
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.tokens import count_request_tokens

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

ROUTE = "fake"
MODEL = "fake-model"
# Common English words, each one cl100k token (with or without a leading space), so the
# Guard's input estimate is the provider's word count plus a constant (checked at start-up).
_WORDS = (
    "the of and to in is that for it as with was on be at by this had not are but from or "
    "have an they which one you were all we her she there would their will when who him been "
    "has more if no out do so can what up said about other into than its time only could new "
    "them man some these then two first may any like now my such make over our even most me "
    "state after also made many before did must through back years where much your way well "
    "down should because each just those people how too little use"
)
VOCABULARY = tuple(_WORDS.split())
PROVIDER_TOKENS_PER_MESSAGE = 4  # FakeProvider: len(text.split()) + 4 per message
READY_TIMEOUT_S = 90.0  # worker processes import, build their Guard and say they are ready
CALL_TIMEOUT_S = 10.0  # one Guard.chat call, limiter wait included
JOIN_GRACE_S = 20.0  # after the run: results and process exit
TARGET_MAX_429_SHARE = 0.01
TARGET_MIN_TOKEN_SHARE = 0.90


@dataclass(frozen=True)
class Setup:
    """The load, the limits and the run of both phases (picklable: sent to every worker)."""

    processes: int = 4
    workers: int = 8  # threads per process
    requests_per_period: int = 200  # R, enforced by the provider per period_s
    tokens_per_period: int = 60_000  # T, enforced by the provider per period_s
    period_s: float = 2.0  # our RateLimit(period=) and the provider's limit_window
    guard_share: float = 0.95  # the Guards' limits as a share of the provider's
    max_wait_s: float = 0.1  # RateLimit(max_wait=): how far ahead a call may take a slot
    burst: float = 0.045  # RateLimit(burst=): the share of a period that may go out at once
    duration_s: float = 30.0
    steady_skip_periods: int = 2  # token_share leaves out the first periods (start-up burst)
    sample_s: float = 0.25
    min_words: int = 8
    max_words: int = 1500
    min_max_tokens: int = 16
    max_max_tokens: int = 1024
    acquire_calls: int = 5000  # per variant, after warm-up
    acquire_rounds: int = 5
    acquire_warmup: int = 300
    seed: int = 0
    split: int = 1  # each Guard gets 1/split of the limits (unshared phase: processes)

    def guard_limit(self) -> RateLimit:
        """The RateLimit every Guard gets (a share of the provider's limits, divided by
        ``split``; the burst grows by ``split`` so it holds as many tokens as the shared one)."""
        return RateLimit(
            rpm=self.requests_per_period * self.guard_share / self.split,
            tpm=self.tokens_per_period * self.guard_share / self.split,
            period=self.period_s,
            max_wait=self.max_wait_s,
            burst=min(1.0, self.burst * self.split),
        )


QUICK = {"duration_s": 8.0, "acquire_calls": 1000, "acquire_rounds": 2, "acquire_warmup": 100}


class ProcessResult(TypedDict):
    """What one worker process did during a phase."""

    index: int
    ok: int
    provider_429: int
    refused_locally: int
    other_errors: dict[str, int]
    tokens: int  # usage.total_tokens of its successful calls
    error: str | None  # set when the process could not run at all


@dataclass
class Tally:
    """One worker thread's counters."""

    ok: int = 0
    provider_429: int = 0
    refused_locally: int = 0
    other_errors: dict[str, int] = field(default_factory=dict)
    tokens: int = 0


@dataclass(frozen=True)
class Sample:
    """The provider's counters at ``t`` seconds after the start of a phase."""

    t: float
    tokens: int
    requests: int
    rate_limited: int


class PhaseResult(TypedDict):
    """One phase, as reported."""

    store: str
    requests: int
    provider_429: int
    provider_429_steady: int
    client_requests: int
    client_tokens: int
    refused_locally: int
    other_errors: dict[str, int]
    token_share: float
    token_share_whole_run: float
    request_share: float
    mean_tokens_per_call: float
    per_period_token_share: list[float]
    per_period_429: list[int]
    runtime_s: float


# ------------------------------------------------------------------------------ workload


def draw_sizes(rng: random.Random, setup: Setup) -> tuple[int, int]:
    """Prompt words and max_tokens of one call, both log-uniform over the setup's ranges."""

    def log_uniform(low: int, high: int) -> int:
        return round(math.exp(rng.uniform(math.log(low), math.log(high))))

    return (
        log_uniform(setup.min_words, setup.max_words),
        log_uniform(setup.min_max_tokens, setup.max_max_tokens),
    )


def draw_call(rng: random.Random, setup: Setup) -> tuple[str, int]:
    """A prompt and a max_tokens (see :func:`draw_sizes`)."""
    words, max_tokens = draw_sizes(rng, setup)
    return " ".join(rng.choices(VOCABULARY, k=words)), max_tokens


def drawn_mean_cost(setup: Setup, draws: int = 100_000) -> float:
    """The provider's mean charge per call of the drawn mix (input + max_tokens)."""
    rng = random.Random(f"mix:{setup.seed}")
    total = 0
    for _ in range(draws):
        words, max_tokens = draw_sizes(rng, setup)
        total += words + PROVIDER_TOKENS_PER_MESSAGE + max_tokens
    return total / draws


def fill_reply(body: dict[str, Any]) -> str:
    """A reply at least ``max_tokens`` words long: the provider cuts it to exactly that, so the
    usage it reports equals what it charged (input + max_tokens)."""
    limits = [body.get(k) for k in ("max_tokens", "max_completion_tokens")]
    words = max([n for n in limits if isinstance(n, int)], default=16)
    return " ".join(["ok"] * max(1, words))


def estimate_gap(setup: Setup) -> list[int]:
    """The Guard's input estimate minus the provider's count, for a few prompt sizes."""
    gaps = []
    rng = random.Random(f"gap:{setup.seed}")
    for words in (setup.min_words, 100, setup.max_words):
        prompt = " ".join(rng.choices(VOCABULARY, k=words))
        ours = count_request_tokens([Message(role="user", content=prompt)]).tokens
        gaps.append(ours - (words + PROVIDER_TOKENS_PER_MESSAGE))
    return gaps


# ------------------------------------------------------------------------- worker process


def worker_thread(guard: Guard, setup: Setup, rng: random.Random, end: float) -> Tally:
    """Send calls through the Guard until ``end`` (monotonic clock, system-wide on Linux).

    A call that is refused locally or answered 429 is sent again, the same call, until it
    succeeds or the run ends: only then is the next one drawn, so the mix the provider serves
    is the drawn mix (dropping refused calls would favour small ones).
    """
    tally = Tally()
    prompt, max_tokens = draw_call(rng, setup)
    while (now := time.monotonic()) < end:
        try:
            response = guard.chat(
                [{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                timeout=CALL_TIMEOUT_S,
            )
        except RateLimitExceededError as exc:  # our limiter had no room: nothing was sent
            tally.refused_locally += 1
            wait = exc.retry_after if exc.retry_after is not None else 0.05
            time.sleep(max(0.001, min(wait, end - now)))
        except RateLimitedError:  # the provider said 429; the limiter has learnt the pause
            tally.provider_429 += 1
        except LLMGuardError as exc:
            name = type(exc).__name__
            tally.other_errors[name] = tally.other_errors.get(name, 0) + 1
            time.sleep(0.05)
        else:
            tally.ok += 1
            tally.tokens += response.usage.total_tokens if response.usage else 0
            prompt, max_tokens = draw_call(rng, setup)
    return tally


def worker_process(
    index: int,
    setup: Setup,
    store: str,
    key_prefix: str,
    base_url: str,
    ready: Queue[tuple[int, str | None]],
    go: Queue[float],
    results: Queue[ProcessResult],
) -> None:
    """One process: its own Guard, ``setup.workers`` threads, until the parent's end time."""
    result = ProcessResult(
        index=index,
        ok=0,
        provider_429=0,
        refused_locally=0,
        other_errors={},
        tokens=0,
        error=None,
    )
    try:
        guard = Guard(
            OpenAICompatibleProvider(base_url, model=MODEL, name=ROUTE),
            store=store,
            key_prefix=key_prefix,
            rate_limits={ROUTE: setup.guard_limit()},
            retry=None,
            breaker=None,
            environ={},  # ignore any LLMGUARD_* settings of the machine
        )
    except Exception as exc:
        ready.put((index, f"could not build the Guard: {exc!r}"))
        return
    try:
        if isinstance(guard.store, RedisStore):
            guard.store.client.ping()  # open the connection before the clock starts
        count_request_tokens([Message(role="user", content="warm up")])  # load cl100k now
        ready.put((index, None))
        end = go.get(timeout=READY_TIMEOUT_S + 10.0)
        tallies: list[Tally] = []
        lock = threading.Lock()

        def run(thread: int) -> None:
            rng = random.Random(f"{setup.seed}:{index}:{thread}")
            tally = worker_thread(guard, setup, rng, end)
            with lock:
                tallies.append(tally)

        threads = [
            threading.Thread(target=run, args=(t,), daemon=True) for t in range(setup.workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(0.0, end - time.monotonic()) + CALL_TIMEOUT_S + 5.0)
        if len(tallies) < setup.workers:
            result["error"] = f"{setup.workers - len(tallies)} worker threads did not finish"
        for tally in tallies:
            result["ok"] += tally.ok
            result["provider_429"] += tally.provider_429
            result["refused_locally"] += tally.refused_locally
            result["tokens"] += tally.tokens
            for name, count in tally.other_errors.items():
                result["other_errors"][name] = result["other_errors"].get(name, 0) + count
    except Exception as exc:
        result["error"] = repr(exc)
    finally:
        guard.close()
    results.put(result)


# --------------------------------------------------------------------------- parent side


def sample_provider(fake: FakeProvider, start: float, setup: Setup) -> list[Sample]:
    """The provider's counters every ``sample_s`` from ``start`` to ``start + duration_s``."""
    samples: list[Sample] = []
    steps = round(setup.duration_s / setup.sample_s)
    for step in range(steps + 1):
        delay = start + step * setup.sample_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        stats = fake.stats
        samples.append(
            Sample(
                t=time.monotonic() - start,
                tokens=stats.input_tokens + stats.output_tokens,
                requests=stats.requests,
                rate_limited=stats.rate_limited,
            )
        )
    return samples


def nearest(samples: Sequence[Sample], t: float) -> Sample:
    """The sample taken closest to ``t``."""
    return min(samples, key=lambda s: abs(s.t - t))


def share(
    samples: Sequence[Sample], t0: float, t1: float, per_period: float, period: float
) -> float:
    """Tokens served between the samples nearest ``t0`` and ``t1``, per period, over a limit."""
    a, b = nearest(samples, t0), nearest(samples, t1)
    if b.t <= a.t:
        return 0.0
    return (b.tokens - a.tokens) / ((b.t - a.t) / period) / per_period


def stop_processes(processes: Sequence[multiprocessing.process.BaseProcess], grace: float) -> None:
    """Join every process for up to ``grace`` seconds; terminate, then kill, any still alive."""
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(timeout=max(0.1, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(timeout=3.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=3.0)
        if process.pid is not None:
            REAPER.remove(process.pid)


def run_phase(setup: Setup, store: str, key_prefix: str) -> PhaseResult:
    """Start the processes against a fresh provider, run them, and count what happened."""
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent runs server threads
    fake = FakeProvider(
        rpm=setup.requests_per_period,
        tpm=setup.tokens_per_period,
        limit_window=setup.period_s,
        reply=fill_reply,
        name=f"bench-{setup.processes}p",
    )
    ready: Queue[tuple[int, str | None]] = ctx.Queue()
    go: Queue[float] = ctx.Queue()
    results: Queue[ProcessResult] = ctx.Queue()
    processes: list[multiprocessing.process.BaseProcess] = []
    finished = False  # results in: let the processes exit on their own, else stop them now
    with fake:
        try:
            for index in range(setup.processes):
                process = ctx.Process(
                    target=worker_process,
                    args=(index, setup, store, key_prefix, fake.base_url, ready, go, results),
                    name=f"bench-worker-{index}",
                    daemon=True,
                )
                process.start()
                processes.append(process)
                if process.pid is not None:
                    REAPER.add(process.pid)  # stopped even if this process is killed
            deadline = time.monotonic() + READY_TIMEOUT_S
            for _ in processes:
                try:
                    index, problem = ready.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise RuntimeError("worker processes did not get ready in time") from None
                if problem is not None:
                    raise RuntimeError(f"worker {index}: {problem}")
            start = time.monotonic()
            for _ in processes:
                go.put(start + setup.duration_s)
            samples = sample_provider(fake, start, setup)
            deadline = time.monotonic() + CALL_TIMEOUT_S + JOIN_GRACE_S
            try:
                reports = [
                    results.get(timeout=max(0.1, deadline - time.monotonic())) for _ in processes
                ]
            except queue.Empty:
                raise RuntimeError("a worker process sent no result in time") from None
            finished = True
        finally:
            stop_processes(processes, JOIN_GRACE_S if finished else 0.5)
        stats = fake.stats
    failed = [f"worker {r['index']}: {r['error']}" for r in reports if r["error"]]
    if failed:
        raise RuntimeError("; ".join(failed))

    period, steady_from = setup.period_s, setup.steady_skip_periods * setup.period_s
    other: dict[str, int] = {}
    for report in reports:
        for name, count in report["other_errors"].items():
            other[name] = other.get(name, 0) + count
    periods = round(setup.duration_s / period)
    steady_start, end = nearest(samples, steady_from), samples[-1]
    return PhaseResult(
        store=store if store == "memory" else "redis",
        requests=stats.requests,
        provider_429=stats.rate_limited,
        provider_429_steady=end.rate_limited - steady_start.rate_limited,
        client_requests=sum(r["ok"] + r["provider_429"] for r in reports) + sum(other.values()),
        client_tokens=sum(r["tokens"] for r in reports),
        refused_locally=sum(r["refused_locally"] for r in reports),
        other_errors=other,
        token_share=round(
            share(samples, steady_from, setup.duration_s, setup.tokens_per_period, period), 4
        ),
        token_share_whole_run=round(
            share(samples, 0.0, setup.duration_s, setup.tokens_per_period, period), 4
        ),
        request_share=round(
            (end.requests - steady_start.requests - (end.rate_limited - steady_start.rate_limited))
            / ((end.t - steady_start.t) / period)
            / setup.requests_per_period,
            4,
        ),
        mean_tokens_per_call=round(
            (stats.input_tokens + stats.output_tokens) / max(1, stats.succeeded), 1
        ),
        per_period_token_share=[
            round(share(samples, k * period, (k + 1) * period, setup.tokens_per_period, period), 3)
            for k in range(periods)
        ],
        per_period_429=[
            nearest(samples, (k + 1) * period).rate_limited
            - nearest(samples, k * period).rate_limited
            for k in range(periods)
        ],
        runtime_s=round(time.perf_counter() - started, 2),
    )


# ---------------------------------------------------------------------- acquire micro-bench


def acquire_times(setup: Setup, redis_url: str, key_prefix: str) -> dict[str, list[float]]:
    """Microseconds per acquire call of each variant, single-threaded, limits far from full."""
    roomy = {"bench": RateLimit(rpm=1e9, tpm=1e12)}
    memory = MemoryRateLimiter(roomy)
    store = RedisStore(redis_url, key_prefix=key_prefix)
    ours = RedisRateLimiter(store, roomy)
    ours_rpm_only = RedisRateLimiter(store, {"bench-rpm": RateLimit(rpm=1e9)})
    # The same redis-py connection pool as ours: one warm connection for both, same options.
    storage = RedisStorage(
        redis_url, connection_pool=store.client.connection_pool, key_prefix=f"{key_prefix}:lim"
    )
    theirs = MovingWindowRateLimiter(storage)
    # A moving window keeps one list entry per hit; with more room than hits, none is refused.
    item = RateLimitItemPerMinute(100 * (setup.acquire_calls + setup.acquire_warmup))
    variants: dict[str, Callable[[], object]] = {
        "memory": lambda: memory.reserve("bench", tokens=500),
        "redis": lambda: ours.reserve("bench", tokens=500),
        "redis_rpm_only": lambda: ours_rpm_only.reserve("bench-rpm"),
        "limits_moving_window": lambda: theirs.hit(item, "bench"),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for call in variants.values():  # scripts loaded, connection open, code paths warm
            for _ in range(setup.acquire_warmup):
                if call() is False:
                    raise RuntimeError("an acquire was refused: the limits are too small")
        per_round = max(1, setup.acquire_calls // setup.acquire_rounds)
        names = list(variants)
        for round_index in range(setup.acquire_rounds):
            shift = round_index % len(names)  # rotate the order, so no variant always goes first
            for name in names[shift:] + names[:shift]:
                call, out = variants[name], times[name]
                gc.collect()
                for _ in range(per_round):
                    t0 = time.perf_counter_ns()
                    call()
                    out.append((time.perf_counter_ns() - t0) / 1000.0)
    finally:
        store.close()
    return times


# ------------------------------------------------------------------------------- plumbing


def redis_client(url: str) -> redis.Redis:
    """A short-timeout client for checks and cleanup."""
    return redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)


def delete_keys(url: str, key_prefix: str) -> int:
    """Delete every key under ``key_prefix``; how many there were."""
    client = redis_client(url)
    try:
        deleted = 0
        for key in client.scan_iter(match=f"{key_prefix}*", count=1000):
            deleted += int(client.delete(key))
        return deleted
    finally:
        client.close()


def summarize(values: Sequence[float]) -> tuple[float, float]:
    """(p50, nearest-rank p99) rounded to 0.01 (callers report the p99 only from
    ``P99_MIN_SAMPLES`` samples on)."""
    ordered = sorted(values)
    return round(nearest_rank(ordered, 50), 2), round(nearest_rank(ordered, 99), 2)


def build_result(
    setup: Setup,
    shared: PhaseResult,
    unshared: PhaseResult,
    whole: PhaseResult,
    times: Mapping[str, Sequence[float]],
    gaps: Sequence[int],
    mean_cost: float,
    runtime: Mapping[str, float],
    keys_deleted: int,
) -> dict[str, Any]:
    """The one JSON object."""
    p = {name: summarize(values) for name, values in times.items()}
    full = {name: latency_summary(values, 2) for name, values in times.items()}
    enough = all(len(values) >= P99_MIN_SAMPLES for values in times.values())
    p99: dict[str, Any] = {}
    if enough:
        p99 = {
            "acquire_p99_us": {"memory": p["memory"][1], "redis": p["redis"][1]},
            "limits_lib_p99_us": p["limits_moving_window"][1],
        }
    ratio = p["redis"][0] / p["limits_moving_window"][0]
    share_429 = shared["provider_429"] / max(1, shared["requests"])
    return {
        "benchmark": "ratelimit_multiproc",
        "what": (
            "processes x worker threads share one RPM+TPM limit via Redis against a FakeProvider "
            "enforcing the same limits; vs per-process memory limits of 1/processes each "
            "(unshared) and of the whole limit each (unshared_whole_limit); reserve() latency"
        ),
        "setup": {
            **asdict(setup),
            "guard_rpm_per_period": setup.requests_per_period * setup.guard_share,
            "guard_tpm_per_period": setup.tokens_per_period * setup.guard_share,
            "provider_window_s": setup.period_s,
            "provider": "FakeProvider in the parent process (threaded HTTP server)",
            "retry": None,
            "breaker": None,
        },
        "requests": shared["requests"],
        "provider_429": shared["provider_429"],
        "provider_429_share": round(share_429, 4),
        "provider_429_steady": shared["provider_429_steady"],
        "token_share": shared["token_share"],
        "token_share_of_guard_limit": round(shared["token_share"] / setup.guard_share, 4),
        "acquire_p50_us": {"memory": p["memory"][0], "redis": p["redis"][0]},
        "acquire_max_us": {"memory": full["memory"]["max"], "redis": full["redis"]["max"]},
        "acquire_samples": {name: len(values) for name, values in times.items()},
        "unshared_limit_share": round(1 / setup.processes, 4),
        "unshared_requests": unshared["requests"],
        "unshared_provider_429": unshared["provider_429"],
        "unshared_provider_429_share": round(
            unshared["provider_429"] / max(1, unshared["requests"]), 4
        ),
        "unshared_token_share": unshared["token_share"],
        "unshared_whole_limit_requests": whole["requests"],
        "unshared_whole_limit_provider_429": whole["provider_429"],
        "unshared_whole_limit_provider_429_share": round(
            whole["provider_429"] / max(1, whole["requests"]), 4
        ),
        "unshared_whole_limit_token_share": whole["token_share"],
        "limits_lib_ratio": round(ratio, 3),
        "limits_lib_p50_us": p["limits_moving_window"][0],
        "limits_lib_max_us": full["limits_moving_window"]["max"],
        **p99,
        "redis_rpm_only_p50_us": p["redis_rpm_only"][0],
        "acquire_calls_per_variant": len(times["redis"]),
        "targets": {
            "provider_429_at_most_1pct": share_429 <= TARGET_MAX_429_SHARE,
            "token_share_at_least_90pct": shared["token_share"] >= TARGET_MIN_TOKEN_SHARE,
        },
        "shared": shared,
        "unshared": unshared,
        "unshared_whole_limit": whole,
        "estimate_minus_provider_tokens": list(gaps),
        "drawn_mean_tokens_per_call": round(mean_cost, 1),
        "token_accounting": (
            "provider charges input (words + 4) + max_tokens; its reply always fills max_tokens, "
            "so the usage the Guard settles to equals that charge; the Guard's reservation is "
            "the charge plus estimate_minus_provider_tokens; Guard limits are guard_share of "
            "the provider's"
        ),
        "redis_keys_deleted": keys_deleted,
        "runtime_s": dict(runtime),
    }


def print_table(result: Mapping[str, Any]) -> None:
    """The result as a readable table."""
    setup = result["setup"]
    print(
        f"{setup['processes']} processes x {setup['workers']} threads, one provider limit of "
        f"{setup['requests_per_period']} requests + {setup['tokens_per_period']} tokens per "
        f"{setup['period_s']} s; Guards at {setup['guard_share']:.0%} of it, max_wait "
        f"{setup['max_wait_s']} s; {setup['duration_s']} s per phase"
    )
    print(
        f"{'phase':<30}{'requests':>9}{'429s':>7}{'429 %':>8}{'429 steady':>11}"
        f"{'token_share':>12}{'tokens/call':>12}{'refused':>9}"
    )
    for name in ("shared", "unshared", "unshared_whole_limit"):
        row = result[name]
        rate = row["provider_429"] / max(1, row["requests"])
        print(
            f"{name + ' (' + row['store'] + ')':<30}{row['requests']:>9}{row['provider_429']:>7}"
            f"{rate:>8.2%}{row['provider_429_steady']:>11}{row['token_share']:>12.3f}"
            f"{row['mean_tokens_per_call']:>12.0f}{row['refused_locally']:>9}"
        )
    for name in ("shared", "unshared", "unshared_whole_limit"):
        series = " ".join(f"{v:.2f}" for v in result[name]["per_period_token_share"])
        print(f"  {name:<20} tokens per period / T: {series}")
        series = " ".join(str(v) for v in result[name]["per_period_429"])
        print(f"  {name:<20} 429s per period:        {series}")
    print(f"\n{'reserve()':<24}{'p50 us':>9}{'max us':>9}   samples")
    for label, p50, most, samples in (
        (
            "memory",
            result["acquire_p50_us"]["memory"],
            result["acquire_max_us"]["memory"],
            result["acquire_samples"]["memory"],
        ),
        (
            "redis (ours)",
            result["acquire_p50_us"]["redis"],
            result["acquire_max_us"]["redis"],
            result["acquire_samples"]["redis"],
        ),
        (
            "limits moving window",
            result["limits_lib_p50_us"],
            result["limits_lib_max_us"],
            result["acquire_samples"]["limits_moving_window"],
        ),
    ):
        print(f"{label:<24}{p50:>9.1f}{most:>9.1f}   {samples}")
    if "acquire_p99_us" in result:
        print(f"p99 us: {result['acquire_p99_us']}, limits {result['limits_lib_p99_us']}")
    print(f"limits_lib_ratio (ours / theirs, p50): {result['limits_lib_ratio']}")
    print(f"targets: {result['targets']}")
    print(f"runtime: {result['runtime_s']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 s phases, 1000 calls")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random draw (0)")
    parser.add_argument(
        "--redis-url", default=None, help="the Redis to use (default: REDIS_URL, else a throwaway)"
    )
    args = parser.parse_args(argv)
    exit_on_signals()

    setup = Setup(seed=args.seed)
    if args.quick:
        setup = replace(setup, **QUICK)
    with given_redis(args.redis_url) as redis_url:
        return run(setup, redis_url, args.json)


def run(setup: Setup, redis_url: str, as_json: bool) -> int:
    """Every phase against ``redis_url``; print the result."""
    key_prefix = f"bench-rl-{secrets.token_hex(6)}"
    client = redis_client(redis_url)
    try:
        client.ping()
    except redis.RedisError as exc:
        print(f"Redis at {redis_url} is not reachable: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()

    started = time.perf_counter()
    keys_deleted = 0
    try:
        gaps = estimate_gap(setup)
        shared = run_phase(setup, redis_url, key_prefix)
        unshared = run_phase(replace(setup, split=setup.processes), "memory", key_prefix)
        whole = run_phase(setup, "memory", key_prefix)
        bench_start = time.perf_counter()
        times = acquire_times(setup, redis_url, key_prefix)
        acquire_s = time.perf_counter() - bench_start
    finally:
        with contextlib.suppress(redis.RedisError):
            keys_deleted = delete_keys(redis_url, key_prefix)
    runtime = {
        "shared": shared["runtime_s"],
        "unshared": unshared["runtime_s"],
        "unshared_whole_limit": whole["runtime_s"],
        "acquire": round(acquire_s, 2),
        "total": round(time.perf_counter() - started, 2),
    }
    result = build_result(
        setup, shared, unshared, whole, times, gaps, drawn_mean_cost(setup), runtime, keys_deleted
    )
    if as_json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
