"""Logs that stay readable in an incident: a real throwaway Redis is killed under traffic from
three processes and comes back 4 s later; each process logs a repeated warning (budgets
unavailable, Redis unavailable) once, then as a count every few seconds with the first and
last occurrence, instead of one line per refused call. Every refusal is still accounted for
in the counts.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import with_redis

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, BudgetUnavailableError, Price, PriceTable
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.telemetry._repeats import repeats
from llmguard_sdk.testing import FakeProvider

pytestmark = pytest.mark.redis

PROCESSES = 3
DOWN_S = 4.0
USER = [{"role": "user", "content": "hello there"}]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})
BUDGET_MESSAGE = "llmguard budget event"


class _Lines(logging.Handler):
    """Every record the SDK logs at WARNING or above, as JSON-ready dicts."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        repeats = getattr(record, "llmguard_repeats", None)
        self.lines.append({"at": record.created, "text": record.getMessage(), "repeats": repeats})


def _worker(base_url: str, redis_url: str, journal: str, out: Any, go: Any, stop: Any) -> None:
    """Calls as fast as it can until told to stop; reports its log lines and refusals."""
    lines = _Lines()
    logging.getLogger("llmguard_sdk").addHandler(lines)
    store = RedisStore(redis_url, key_prefix="incident", socket_timeout=0.25, journal_dir=journal)
    guard = Guard(
        OpenAICompatibleProvider(base_url, model="fake-model", name="primary"),
        store=store,
        rate_limits={"primary": RateLimit(rpm=1_000_000)},
        budgets=Budgets([Budget(1_000_000.0)], prices=PRICES),  # fail_open=False: refusals
        retry=None,
        environ={},
    )
    refused = answered = 0
    deadline = time.monotonic() + 60
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            guard.chat(USER, max_tokens=4)
            answered += 1
            if answered == 5:
                go.put(True)
        except BudgetUnavailableError:
            refused += 1
        time.sleep(0.002)
    guard.close()
    repeats.flush()  # what the process's exit does (atexit); the handler is gone by then
    out.put({"lines": lines.lines, "refused": refused, "answered": answered})


def test_killing_redis_under_traffic_logs_a_few_lines_per_second_per_process(
    fake: FakeProvider, tmp_path: Path
) -> None:
    process, url, workdir = with_redis.start_throwaway()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    context = multiprocessing.get_context("spawn")
    out, go, stop = context.Queue(), context.Queue(), context.Event()
    workers = [
        context.Process(target=_worker, args=(fake.base_url, url, str(tmp_path), out, go, stop))
        for _ in range(PROCESSES)
    ]
    try:
        for worker in workers:
            worker.start()
        for _ in workers:
            go.get(timeout=60)
        process.kill()
        process.wait(timeout=10)
        killed = time.time()
        time.sleep(DOWN_S)
        with_redis.stop_throwaway(process, workdir)
        process, url, workdir = with_redis.start_throwaway(port=port)
        time.sleep(2.0)
        stop.set()
        results = [out.get(timeout=60) for _ in workers]
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
        with_redis.stop_throwaway(process, workdir)
    for result in results:
        lines = result["lines"]
        assert result["refused"] > 50  # traffic went on through the outage
        seconds = Counter(int(line["at"] - killed) for line in lines)
        span = max(line["at"] for line in lines) - killed
        print(len(lines), "lines in", round(span, 1), "s; per second:", sorted(seconds.items()))
        assert len(lines) <= 3 * max(span, 1.0), [line["text"] for line in lines]
        assert max(seconds.values()) <= 6  # the first second: one line per stage at most
        budget = [line for line in lines if line["text"].startswith(BUDGET_MESSAGE)]
        counted = sum((line["repeats"] or {}).get("count", 1) for line in budget)
        assert counted == result["refused"], json.dumps(budget, indent=1)
