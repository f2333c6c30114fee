"""Redis faults with traffic from several processes: down at start, killed mid-run, restarted
empty, hung (``DEBUG SLEEP``). The SDK keeps serving, and every spend record reaches Redis
once: afterwards the budget's settled spend in Redis equals the sum of what the processes
recorded.

Each test runs its own redis-server (tools/redis_cluster.RedisServer) on a free loopback port,
and real FakeProvider servers; every wait is bounded.
"""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from redis_cluster import RedisServer

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, BudgetUnavailableError, Price, PriceTable
from llmguard_sdk.budget.journal import SpendJournal, record, specs_of
from llmguard_sdk.budget.journal import _read as journal_records
from llmguard_sdk.budget.policy import CounterSpec
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.ratelimit.redis import RedisRateLimiter
from llmguard_sdk.store import RedisHealth, RedisStore
from llmguard_sdk.testing import FakeProvider

from .loopback import LoopbackServer

pytestmark = pytest.mark.redis

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
LIMIT_USD = 1000.0
USER = [{"role": "user", "content": "hello there"}]


def _guard(base_url: str, redis_url: str, journal: str, *, fail_open: bool = True) -> Guard:
    store = RedisStore(
        redis_url,
        key_prefix="faults",
        socket_timeout=0.25,
        journal_dir=journal,
        retry_pause=0.2,
    )
    return Guard(
        OpenAICompatibleProvider(base_url, model="fake-model", name="primary"),
        store=store,
        rate_limits={"primary": RateLimit(rpm=100_000, tpm=100_000_000)},
        budgets=Budgets([Budget(LIMIT_USD)], prices=PRICES, fail_open=fail_open),
        cache=True,
        retry=None,
        environ={},
    )


def _worker(
    base_url: str, redis_url: str, journal: str, calls: int, gap: float, out: Any, started: Any
) -> None:
    """One process of traffic: ``calls`` uncached calls; reports what it answered and spent,
    after replaying its journal (bounded: 20 s)."""
    guard = _guard(base_url, redis_url, journal)
    answered = spent = 0.0
    errors: list[str] = []
    for index in range(calls):
        try:
            answer = guard.chat(USER, max_tokens=8, cacheable=index % 2 == 0)
            answered += 1
            spent += answer.cost_usd or 0.0
            if index == 5:
                started.put(True)
        except Exception as exc:
            errors.append(type(exc).__name__)
        time.sleep(gap)
    spend = guard._stages.spend
    assert spend is not None
    backend = spend.backend
    assert isinstance(backend, RedisBudgetBackend)
    deadline = time.monotonic() + 20
    while not backend.replay() and time.monotonic() < deadline:
        time.sleep(0.1)
    journal_ = backend.journal
    out.put(
        {
            "answered": answered,
            "spent": spent,
            "errors": errors,
            "left": journal_.pending,
            "journaled": journal_.appended,
        }
    )
    guard.close()


def _traffic(
    fake: FakeProvider, server: RedisServer, journal: Path, processes: int, calls: int
) -> list[multiprocessing.Process | Any]:
    """Start ``processes`` workers; returns once each has answered a few calls (bounded)."""
    context = multiprocessing.get_context("spawn")
    out, started = context.Queue(), context.Queue()
    workers = [
        context.Process(
            target=_worker,
            args=(fake.base_url, server.url, str(journal), calls, 0.02, out, started),
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        started.get(timeout=60)
    return [out, *workers]


def _results(handles: list[Any], processes: int) -> list[dict[str, Any]]:
    out, *workers = handles
    results = [out.get(timeout=90) for _ in range(processes)]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    return results


def _spent_in_redis(redis_url: str, journal: Path) -> float:
    """The budget's settled spend in Redis, after replaying any journal left behind."""
    store = RedisStore(redis_url, key_prefix="faults", journal_dir=str(journal))
    try:
        backend = RedisBudgetBackend(store)
        assert backend.replay()
        from llmguard_sdk.budget.control import SpendControl

        control = SpendControl(Budgets([Budget(LIMIT_USD)], prices=PRICES), (), store)
        control.backend = backend
        (row,) = control.status()
        return float(row["spent_usd"])
    finally:
        store.close()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = RedisServer(persist=True)
    try:
        yield made
    finally:
        made.stop()


def test_down_at_start_then_up(fake: FakeProvider, server: RedisServer, tmp_path: Path) -> None:
    """Two processes start while Redis is down: every call is answered (budgets fail open,
    on a local share), and their spend reaches Redis once it is started."""
    handles = _traffic(fake, server, tmp_path, processes=2, calls=40)
    server.start()
    results = _results(handles, 2)
    assert all(r["journaled"] > 0 for r in results)
    assert sum(r["answered"] for r in results) == 80
    assert all(r["left"] == 0 for r in results)
    recorded = sum(r["spent"] for r in results)
    assert recorded > 0
    assert _spent_in_redis(server.url, tmp_path) == pytest.approx(recorded, rel=1e-9)


def test_killed_mid_run_and_restarted(
    fake: FakeProvider, server: RedisServer, tmp_path: Path
) -> None:
    server.start()
    handles = _traffic(fake, server, tmp_path, processes=3, calls=60)
    server.kill()
    time.sleep(0.5)
    server.start()  # from its append-only file: what was settled before the crash is kept
    results = _results(handles, 3)
    assert sum(r["journaled"] for r in results) > 0
    assert sum(r["answered"] for r in results) == 180
    recorded = sum(r["spent"] for r in results)
    assert _spent_in_redis(server.url, tmp_path) == pytest.approx(recorded, rel=1e-9)


def test_restarted_empty(fake: FakeProvider, tmp_path: Path) -> None:
    """Redis comes back without its data: calls go on and the counters start again from
    what is recorded after the restart (journaled spend included); nothing raises."""
    server = RedisServer(persist=False)
    try:
        server.start()
        guard = _guard(fake.base_url, server.url, str(tmp_path))
        assert guard.chat(USER, max_tokens=8).route == "primary"
        server.kill()
        down = guard.chat(USER, max_tokens=8, cacheable=False)  # counted locally, journaled
        server.start(empty=True)
        time.sleep(0.5)  # the store's pause (0.2 s, jittered) runs out
        up = guard.chat(USER, max_tokens=8, cacheable=False)
        assert _spent_in_redis(server.url, tmp_path) == pytest.approx(
            (down.cost_usd or 0) + (up.cost_usd or 0), rel=1e-9
        )
        guard.close()
    finally:
        server.stop()


def test_a_hung_redis_costs_no_waiting_per_call(
    fake: FakeProvider, server: RedisServer, tmp_path: Path
) -> None:
    """While Redis sleeps, the first operation times out and the store pauses Redis for every
    stage; spend settled meanwhile (even a settle that ran after its client gave up) counts
    once when Redis is back."""
    server.start()
    handles = _traffic(fake, server, tmp_path, processes=2, calls=40)
    server.sleep(1.0)
    results = _results(handles, 2)
    assert sum(r["answered"] for r in results) == 80
    recorded = sum(r["spent"] for r in results)
    assert _spent_in_redis(server.url, tmp_path) == pytest.approx(recorded, rel=1e-9)


def test_fail_closed_refuses_while_redis_is_down(fake: FakeProvider, tmp_path: Path) -> None:
    guard = _guard(fake.base_url, "redis://127.0.0.1:1/0", str(tmp_path), fail_open=False)
    with pytest.raises(BudgetUnavailableError) as refused:
        guard.chat(USER, max_tokens=8)
    assert fake.requests == []  # refused before any provider call
    # when the store tries Redis again (its retry_pause, 0.2 s, and up to 20 % jitter): it
    # said 5 s whatever the pause
    assert refused.value.retry_after is not None
    assert 0.0 <= refused.value.retry_after <= 0.2 * 1.2
    guard.close()


def test_a_rate_limit_falls_back_to_its_local_share(tmp_path: Path) -> None:
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.2, local_share=0.25)
    limiter = RedisRateLimiter(store, {"r": RateLimit(rpm=40, burst=1.0)})
    allowed = sum(limiter.reserve("r").allowed for _ in range(40))
    assert allowed == 10  # a quarter of the shared limit, in this process alone


def test_a_lease_of_the_local_share_is_given_back_once_redis_is_back() -> None:
    """A call that took its slot from the process's own share while Redis was down, and ends
    after Redis came back, gives that slot back too: the next outage finds it free (it stayed
    held until its lease ran out, and the process's one slot refused every call)."""
    server = RedisServer()
    try:
        store = RedisStore(server.url, socket_timeout=0.5, local_share=0.25)
        limiter = RedisRateLimiter(store, {"r": RateLimit(concurrency=4)})  # 1 slot locally
        held = limiter.reserve("r")  # Redis is down
        assert held.allowed
        server.start()
        store.health.down_until = time.monotonic() - 0.01  # the pause is over
        limiter.settle("r", lease=held.lease)
        assert store.health.up()  # the settle went to Redis
        server.stop()
        store.health.down_until = time.monotonic() - 0.01
        assert limiter.reserve("r").allowed  # down again: the local slot is free
        store.close()
    finally:
        server.stop()


def test_the_breaker_around_redis_grows_its_pause() -> None:
    health = RedisHealth(base=1.0, cap=4.0)
    first = health.failed()
    assert 0.8 <= first <= 1.2
    assert not health.up()
    health.down_until = time.monotonic() - 0.01  # the pause ran out; the probe fails too
    second = health.failed()
    assert 1.6 <= second <= 2.4
    health.down_until = time.monotonic() - 0.01
    health.failed()
    health.down_until = time.monotonic() - 0.01
    assert health.failed() <= 4.0 * 1.2  # capped
    assert health.outages == 1


def test_the_journal_replays_once_and_adopts_dead_processes_files(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = CounterSpec("global-x", 10**12, "day", 3600.0, (), "global", 0)
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    backend = RedisBudgetBackend(store, name="journal")
    dead = SpendJournal(tmp_path, backend.journal.name)  # a process that died with records
    dead.append(record("rid-1", (spec,), 5000, 60.0, time.time()))
    dead.append(record("rid-2", (spec,), 7000, 60.0, time.time()))
    assert [specs_of(entry) for entry in dead.own_records()] == [(spec,), (spec,)]
    dead._file.close()  # type: ignore[union-attr]  # its lock goes with it
    dead._file = None
    backend.journal.append(record("rid-1", (spec,), 5000, 60.0, time.time()))  # a repeat
    backend.journal.append({"rid": "broken"})  # a record it cannot replay is skipped
    assert backend.replay()
    assert not dead.path.exists()
    assert backend.status([spec])[0][0] == 12000  # rid-1 once, rid-2 once
    store.close()


def test_a_long_journal_is_replayed_a_few_records_per_call(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """An outage's journal (100 of this process's records, 50 of a dead process's) delays
    each call by at most 32 replayed records: the calls after Redis is back carry it over
    a few at a time, and every record counts once."""
    spec = CounterSpec("global-y", 10**15, "day", 3600.0, (), "global", 0)
    store = RedisStore(redis_url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    backend = RedisBudgetBackend(store, name="long-journal")
    dead = SpendJournal(tmp_path, backend.journal.name)
    for n in range(50):
        dead.append(record(f"dead-{n}", (spec,), 1000, 60.0, time.time()))
    dead._file.close()  # type: ignore[union-attr]  # it died: its lock went with it
    for n in range(100):
        backend.journal.append(record(f"own-{n}", (spec,), 10, 60.0, time.time()))
    hold = {"base": 1, "per_token": 0.0, "want": 0, "minimum": 0, "ttl": 60.0}
    left_after: list[int] = []
    for n in range(6):
        assert backend.reserve(f"call-{n}", [spec], **hold).allowed  # type: ignore[arg-type]
        left_after.append(backend.journal.pending)
    # the first call adopted the dead file (its records joined this process's journal,
    # the file is gone) and replayed 32 of the 150 records; each call after it as many
    assert not dead.path.exists()
    assert left_after == [118, 86, 54, 22, 0, 0]
    assert backend.status([spec])[0][0] == 100 * 10 + 50 * 1000  # each record once
    with SpendJournal(tmp_path, backend.journal.name).orphans() as found:
        assert found == []  # the rewritten file is still this live process's (locked)
    store.close()


def test_a_partly_replayed_journal_keeps_the_rest_in_a_locked_file(tmp_path: Path) -> None:
    spec = CounterSpec("global-x", 10**12, "day", 3600.0, (), "global", 0)
    journal = SpendJournal(tmp_path, "set")
    for n in range(5):
        journal.append(record(f"rid-{n}", (spec,), 100, 60.0, time.time()))
    assert [entry["rid"] for entry in journal.own_records(2)] == ["rid-0", "rid-1"]
    journal.own_replayed(2)
    assert journal.pending == 3
    assert [entry["rid"] for entry in journal.own_records()] == ["rid-2", "rid-3", "rid-4"]
    journal.append(record("rid-5", (spec,), 100, 60.0, time.time()))
    # what a process adopting the file after a crash would replay: only what is left
    assert [entry["rid"] for entry in journal_records(journal.path)] == [
        "rid-2",
        "rid-3",
        "rid-4",
        "rid-5",
    ]
    with SpendJournal(tmp_path, "set").orphans() as found:
        assert found == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [journal.path.name]  # no .new left
    journal.own_replayed(4)
    journal.close()
    assert not journal.path.exists()


def test_a_live_processes_journal_is_left_to_it(tmp_path: Path) -> None:
    spec = CounterSpec("global-x", 10**12, "day", 3600.0, (), "global", 0)
    live = SpendJournal(tmp_path, "set")
    live.append(record("rid-1", (spec,), 5000, 60.0, time.time()))
    other = SpendJournal(tmp_path, "set")
    with other.orphans() as found:
        assert found == []  # its writer holds the lock
    live.close()
    assert live.path.exists()  # a record is pending: the file stays for a replay


def test_a_new_journal_file_is_locked_before_another_process_can_adopt_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's sweep for dead processes' files, run at the worst instant (the
    writer's file just created, its lock not yet taken), leaves the writer's file alone: a
    sweep that adopted it would remove it, and the writer's records would go to a file nobody
    replays (spend lost)."""
    import fcntl

    from llmguard_sdk.budget import journal as journal_module

    spec = CounterSpec("global-x", 10**12, "day", 3600.0, (), "global", 0)
    writer, sweeper = SpendJournal(tmp_path, "set"), SpendJournal(tmp_path, "set")
    adopted: list[Path] = []

    class SweepFirst:  # the real flock, after the other process's sweep
        LOCK_EX, LOCK_NB = fcntl.LOCK_EX, fcntl.LOCK_NB

        @staticmethod
        def flock(fd: int, operation: int) -> None:
            if operation == fcntl.LOCK_EX and not adopted:
                with sweeper.orphans() as found:
                    for path, _ in found:
                        adopted.append(path)
                        sweeper.finished(path)
            fcntl.flock(fd, operation)

    monkeypatch.setattr(journal_module, "fcntl", SweepFirst)
    writer.append(record("rid-1", (spec,), 5000, 60.0, time.time()))
    assert adopted == []
    assert [entry["rid"] for entry in writer.own_records()] == ["rid-1"]
    writer.close()


def test_the_pause_grows_when_redis_times_out_slower_than_the_pause() -> None:
    """A hung Redis fails the try after a pause only when the socket times out: with a
    socket_timeout longer than retry_pause, that failure is still the same outage (the pause
    stayed at retry_pause forever, and each pause logged a new outage)."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.3, retry_pause=0.2)
    health = store.health
    health.failed()
    for _ in range(3):  # each try after a pause timed out 0.3 s after the pause ended
        health.down_until = time.monotonic() - 0.3
        health.failed()
    assert health.outages == 1
    assert health.failures == 4
    health.down_until = time.monotonic() - 60.0  # a failure long after: a new outage
    health.failed()
    assert health.outages == 2
    store.close()


def test_after_a_pause_one_caller_probes_redis_while_the_others_decide_locally() -> None:
    health = RedisHealth(base=1.0, cap=4.0, attempt_seconds=0.5)
    assert health.may_try()  # no outage: everyone goes to Redis
    assert health.may_try()
    health.failed()
    assert not health.may_try()  # paused
    assert not health.may_try(waits=True)
    assert not health.up()
    health.down_until = time.monotonic() - 0.01  # the pause ran out
    assert health.up()  # (a question that takes nothing)
    assert health.may_try()  # the probe
    assert not health.may_try()  # the others: locally, while the probe is under way
    assert not health.up()
    assert health.may_try(waits=True)  # a stage that would refuse the call tries Redis
    health.succeeded()  # the probe answered: the outage is over
    assert health.may_try()
    assert health.may_try()
    health.failed()
    health.down_until = time.monotonic() - 0.01
    assert health.may_try()
    assert not health.may_try()
    health.failed()  # the probe failed: another (longer) pause
    assert not health.may_try()
    assert health.failures == 2


class _HungRedis(LoopbackServer):
    """A loopback server that accepts connections and never answers (a hung Redis)."""

    def __init__(self) -> None:
        self.accepted = 0
        super().__init__(backlog=64)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def handle(self, conn: socket.socket) -> None:
        self.accepted += 1
        self.open.append(conn)  # held, silent, until closed


def test_a_hung_redis_costs_one_socket_timeout_per_pause_not_one_per_call(
    fake: FakeProvider,
) -> None:
    """When a pause ended, every call in flight tried the hung Redis and waited a socket
    timeout; now one probes and the others limit locally meanwhile."""
    hung = _HungRedis()
    store = RedisStore(hung.url, socket_timeout=0.3, retry_pause=0.2)
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    guard = Guard(route, store=store, rate_limits={"primary": RateLimit(rpm=10**6)}, environ={})
    try:
        guard.chat(USER)  # the first try times out: Redis is paused
        assert store.health.failures == 1
        deadline = time.monotonic() + 5.0
        while time.monotonic() < min(store.health.down_until, deadline):
            time.sleep(0.01)  # the pause runs out
        before = hung.accepted
        start = threading.Barrier(8)

        def call(_: int) -> str:
            start.wait(timeout=10)
            return guard.chat(USER).text

        with ThreadPoolExecutor(8) as pool:  # 8 calls at once
            assert len(list(pool.map(call, range(8), timeout=60))) == 8
        assert hung.accepted - before == 1  # one probe, not eight
        assert fake.stats.requests == 9  # every call answered
    finally:
        guard.close()
        hung.close()
