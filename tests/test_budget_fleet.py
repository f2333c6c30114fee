"""Fail-open overspend bounded for the fleet, not per process: while Redis is away, the
processes together spend at most ``fail_open_share`` of what each budget had left, whatever
their number; failing closed stays exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tools.redis_cluster import RedisServer

from llmguard_sdk.budget import Budgets, RedisBudgetBackend
from llmguard_sdk.budget.policy import CounterSpec, nano
from llmguard_sdk.store import RedisStore

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    redis = RedisServer(persist=True).start()
    yield redis
    redis.stop()


def _spec() -> CounterSpec:
    return CounterSpec("global", nano(1.0), "day", 3600.0, (), "global", 0)


def _reserve(backend: RedisBudgetBackend, rid: str, usd: float) -> bool:
    result = backend.reserve(
        rid, [_spec()], base=nano(usd), per_token=0.0, want=0, minimum=0, ttl=60
    )
    return result.allowed


def _process(server: RedisServer, journal: Path, share: float | None = None) -> RedisBudgetBackend:
    store = RedisStore(server.url, key_prefix="fleet", socket_timeout=0.2, journal_dir=str(journal))
    return RedisBudgetBackend(store, fail_open=True, fleet_share=share)


@pytest.mark.parametrize("processes", [3, 12])
def test_the_fleet_spends_at_most_its_share_of_what_was_left(
    server: RedisServer, tmp_path: Path, processes: int
) -> None:
    fleet = [_process(server, tmp_path) for _ in range(processes)]
    spent = 0.0
    for i, backend in enumerate(fleet):  # $0.60 of $1 spent, every process seen by Redis
        assert _reserve(backend, f"before-{i}", 0.6 / processes)
        backend.settle(f"before-{i}", [_spec()], actual=nano(0.6 / processes), ttl=600)
        spent += 0.6 / processes
    for backend in fleet:  # a last reservation each, so each knows how many are alive
        assert _reserve(backend, f"probe-{id(backend)}", 0.0001)
        backend.settle(f"probe-{id(backend)}", [_spec()], actual=0, ttl=600)
    server.kill()
    local = 0.0
    for n, backend in enumerate(fleet):  # each spends all it may on its own
        for call in range(10_000):
            rid = f"down-{n}-{call}"
            if not _reserve(backend, rid, 0.001):
                break
            backend.settle(rid, [_spec()], actual=nano(0.001), ttl=600)
            local += 0.001
    left = 1.0 - spent
    assert local <= 0.25 * left + 1e-9  # a quarter of what was left, for all of them
    assert local >= 0.25 * left - processes * 0.001 - 1e-9  # and each got its part
    server.start()
    for backend in fleet:  # nothing lost: every local settle reaches Redis
        assert backend.replay()
    ((settled, held, _),) = fleet[0].status([_spec()])
    assert settled == pytest.approx(nano(spent + local), abs=processes)
    assert held == 0
    assert settled <= nano(1.0 + 0.25 * 1.0)  # the default bound: a quarter of the limit
    for backend in fleet:
        backend._store.close()


def test_failing_closed_spends_nothing_while_redis_is_away(
    server: RedisServer, tmp_path: Path
) -> None:
    store = RedisStore(server.url, key_prefix="fleet", socket_timeout=0.2)
    backend = RedisBudgetBackend(store, journal_dir=str(tmp_path))
    assert _reserve(backend, "a", 0.5)
    server.kill()
    result = backend.reserve("b", [_spec()], base=1, per_token=0.0, want=0, minimum=0, ttl=60)
    assert not result.allowed
    assert result.unavailable
    store.close()


def test_a_bad_fleet_share_is_a_configuration_error(tmp_path: Path) -> None:
    from llmguard_sdk.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        Budgets(fail_open_share=1.5)
    store = RedisStore("redis://127.0.0.1:1/0", journal_dir=str(tmp_path))
    with pytest.raises(ConfigurationError):
        RedisBudgetBackend(store, fleet_share=-0.1)
