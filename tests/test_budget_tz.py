"""Budget windows on a local calendar: ``Budget(tz="America/New_York")``.

Every window was UTC's: a team in New York saw its daily budget start again at 19:00 or
20:00 local time, and its monthly one on the evening of the last day of the month. A day or
month window with ``tz`` now starts at local midnight, in memory and in Redis alike, across
daylight-saving changes (a local day of 23 or 25 hours), and ``llmguard budget status``
shows its reset time on the budget's calendar.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
import zoneinfo
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk._state.steps import run
from llmguard_sdk.budget import (
    Budget,
    Budgets,
    CounterSpec,
    MemoryBudgetBackend,
    Price,
    PriceTable,
    RedisBudgetBackend,
)
from llmguard_sdk.budget.policy import nano, window_bounds
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

NEW_YORK = "America/New_York"
HOUR = 3600


def _utc(*parts: int) -> float:
    """Epoch seconds of a UTC date and time."""
    return float(calendar.timegm((*parts, 0, 0, 0)[:6]))


# -- the windows ----------------------------------------------------------------------------


def test_a_day_in_new_york_runs_from_local_midnight_to_local_midnight() -> None:
    # 2024-05-10 22:30 EDT is 2024-05-11 02:30 UTC: UTC's day has begun, New York's has not
    start, end = window_bounds("day", _utc(2024, 5, 11, 2, 30), NEW_YORK)
    assert (start, end) == (_utc(2024, 5, 10, 4), _utc(2024, 5, 11, 4))  # EDT is UTC-4
    assert window_bounds("day", _utc(2024, 5, 11, 2, 30)) != (start, end)  # UTC's own


def test_a_local_day_is_23_or_25_hours_across_daylight_saving() -> None:
    spring = window_bounds("day", _utc(2024, 3, 10, 12), NEW_YORK)  # clocks go forward
    assert spring == (_utc(2024, 3, 10, 5), _utc(2024, 3, 11, 4))
    assert spring[1] - spring[0] == 23 * HOUR
    autumn = window_bounds("day", _utc(2024, 11, 3, 12), NEW_YORK)  # and back
    assert autumn == (_utc(2024, 11, 3, 4), _utc(2024, 11, 4, 5))
    assert autumn[1] - autumn[0] == 25 * HOUR


def test_a_month_starts_on_the_first_at_local_midnight() -> None:
    # 2024-03-31 23:30 EDT is already April in UTC
    march = window_bounds("month", _utc(2024, 4, 1, 3, 30), NEW_YORK)
    assert march == (_utc(2024, 3, 1, 5), _utc(2024, 4, 1, 4))  # EST at its start, EDT at its end
    december = window_bounds("month", _utc(2024, 12, 31, 12), "Asia/Tokyo")
    assert december == (_utc(2024, 11, 30, 15), _utc(2024, 12, 31, 15))  # Tokyo: UTC+9
    assert window_bounds("month", _utc(2024, 12, 31, 15), "Asia/Tokyo")[0] == december[1]


def test_a_day_whose_midnight_is_skipped_starts_at_the_change() -> None:
    """Santiago springs forward at midnight: 2024-09-08 begins at 01:00 local, 04:00 UTC."""
    saturday = window_bounds("day", _utc(2024, 9, 8, 3, 59), "America/Santiago")
    sunday = window_bounds("day", _utc(2024, 9, 8, 4), "America/Santiago")
    assert saturday == (_utc(2024, 9, 7, 4), _utc(2024, 9, 8, 4))
    assert sunday == (_utc(2024, 9, 8, 4), _utc(2024, 9, 9, 3))  # 23 hours


def test_a_day_whose_last_hour_is_read_twice_is_one_window() -> None:
    """Asuncion fell back at 24:00 to 23:00: 2023-03-25 was 25 hours long, one window."""
    late = window_bounds("day", _utc(2023, 3, 26, 3, 30), "America/Asuncion")  # 23:30 again
    assert late == (_utc(2023, 3, 25, 3), _utc(2023, 3, 26, 4))


def test_windows_keep_their_edges_whatever_clock_and_zone_ask_in_turn() -> None:
    """Each (window, zone) remembers the window last asked about: clocks back and forth
    across New York's midnight, asked in turn with other zones and UTC, each get their own
    window."""
    edge = _utc(2024, 11, 4, 5)  # Monday, 00:00 EST
    clocks = [edge + delta for delta in (-1.0, -1e-6, 0.0, 1e-6, 1.0)]
    for now in [*clocks, *reversed(clocks), *clocks[::2]]:
        for zone in (NEW_YORK, "Europe/London", "UTC"):
            start, end = window_bounds("day", now, zone)
            assert start <= now < end
            if zone == NEW_YORK:
                sunday = (_utc(2024, 11, 3, 4), edge)
                assert (start, end) == (sunday if now < edge else (edge, _utc(2024, 11, 5, 5)))
            if zone == "Europe/London":  # GMT in November
                assert (start, end) == (_utc(2024, 11, 4), _utc(2024, 11, 5))


def _next_local_midnight(at: float, tz: zoneinfo.ZoneInfo) -> float:
    day = dt.datetime.fromtimestamp(at, tz).date() + dt.timedelta(days=1)
    return dt.datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "america/new_york", "America", "", "../x"])
def test_a_name_that_is_no_time_zone_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"unknown time zone {name!r}")):
        Budget(limit_usd=5, tz=name)


def test_tz_is_a_name_and_moves_days_and_months_only() -> None:
    with pytest.raises(ConfigurationError, match="IANA"):
        Budget(limit_usd=5, tz=-5)  # type: ignore[arg-type]
    for window in ("minute", "hour", "rolling"):
        with pytest.raises(ConfigurationError, match="day and month"):
            Budget(limit_usd=5, window=window, tz=NEW_YORK)
    assert Budget(limit_usd=5, window="hour", tz="UTC").key_name == "global.each.hour"


def test_a_zoned_budgets_counter_is_named_for_its_zone() -> None:
    assert Budget(limit_usd=5).key_name == "global.each.day"  # UTC's: as before
    local = Budget(limit_usd=5, tz=NEW_YORK)
    assert local.key_name == "global.each.day.America.New_York"
    both = Budgets([Budget(limit_usd=5), local])  # a UTC and a local day: two counters
    assert len({b.key_name for b in both.budgets}) == 2


def test_without_a_time_zone_database_the_error_says_to_install_tzdata(tmp_path: Path) -> None:
    """Windows and slim containers have no tz database: the error says what to install."""
    code = (
        "import sys; sys.modules['tzdata'] = None\n"  # (tzdata not installed)
        "from llmguard_sdk.budget import Budget\n"
        "from llmguard_sdk import ConfigurationError\n"
        "print(Budget(limit_usd=1).key_name)\n"  # UTC needs no database
        "try:\n"
        "    Budget(limit_usd=1, tz='America/New_York')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONTZPATH": str(tmp_path)}  # an empty database
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    first, error = done.stdout.splitlines()
    assert first == "global.each.day"
    assert "'America/New_York'" in error
    assert "pip install tzdata" in error


# -- the backend contract: memory and a real Redis ------------------------------------------


class Clocked:
    """A backend and a way to set its clock (epoch seconds)."""

    def __init__(self, backend: Any, set_clock: Callable[[float], None]) -> None:
        self.backend = backend
        self.at = set_clock


@pytest.fixture(params=["memory", "redis"])
def clocked(request: pytest.FixtureRequest, redis_url: str, redis_prefix: str) -> Iterator[Clocked]:
    if request.param == "memory":
        now = [time.time()]

        def put(when: float) -> None:
            now[0] = when

        yield Clocked(MemoryBudgetBackend(clock=lambda: now[0]), put)
        return
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    backend = RedisBudgetBackend(store, name="zoned")

    def shift(when: float) -> None:
        backend.clock_offset = when - time.time()

    yield Clocked(backend, shift)
    store.close()


def _spec(window: Any = "day", tz: str = NEW_YORK, key: str = "ny") -> CounterSpec:
    return CounterSpec(key, nano(1.0), window, 3600.0, (0.5,), f"test:{key}", 0, tz)


def _spend(backend: Any, rid: str, spec: CounterSpec, usd: float) -> bool:
    held = backend.reserve(rid, [spec], base=nano(usd), per_token=0.0, want=0, minimum=0, ttl=60)
    if held.allowed:
        backend.settle(rid, [spec], actual=nano(usd), ttl=600)
    return bool(held.allowed)


def test_contract_a_local_day_resets_at_local_midnight(clocked: Clocked) -> None:
    backend, day = clocked.backend, _spec()
    clocked.at(_utc(2024, 11, 2, 23, 30))  # 19:30 EDT, Saturday 2 November
    assert _spend(backend, "a", day, 0.75)
    clocked.at(_utc(2024, 11, 3, 3, 50))  # 23:50 EDT: UTC's day changed, New York's did not
    assert not _spend(backend, "b", day, 0.5)
    assert backend.status([day]) == [(nano(0.75), 0, _utc(2024, 11, 3, 4))]
    clocked.at(_utc(2024, 11, 3, 4, 10))  # 00:10 EDT on Sunday: a new day of 25 hours
    assert backend.status([day]) == [(0, 0, _utc(2024, 11, 4, 5))]
    assert _spend(backend, "c", day, 0.5)
    clocked.at(_utc(2024, 11, 4, 4, 30))  # 23:30 EST: still Sunday, 24.3 hours in
    assert backend.status([day]) == [(nano(0.5), 0, _utc(2024, 11, 4, 5))]
    clocked.at(_utc(2024, 11, 4, 5))  # Monday
    assert backend.status([day])[0][0] == 0


def test_contract_a_local_month_resets_on_the_first_local_time(clocked: Clocked) -> None:
    backend, month = clocked.backend, _spec("month", key="ny-month")
    clocked.at(_utc(2024, 3, 31, 12))
    assert _spend(backend, "a", month, 0.75)
    clocked.at(_utc(2024, 4, 1, 3, 30))  # 23:30 EDT on the 31st: April in UTC, not here
    assert backend.status([month]) == [(nano(0.75), 0, _utc(2024, 4, 1, 4))]
    clocked.at(_utc(2024, 4, 1, 4, 30))  # 00:30 on 1 April
    assert backend.status([month]) == [(0, 0, _utc(2024, 5, 1, 4))]
    assert _spend(backend, "b", month, 0.75)


def test_a_local_days_keys_expire_after_its_local_end(redis_url: str, redis_prefix: str) -> None:
    """The counter's keys live until the local day's end and an hour more (not UTC's)."""
    import redis

    store = RedisStore(redis_url, key_prefix=redis_prefix)
    backend = RedisBudgetBackend(store, name="zoned")
    try:
        day = _spec()
        backend.clock_offset = _utc(2024, 11, 3, 3) - time.time()  # 23:00 EDT, Saturday
        assert _spend(backend, "a", day, 0.25)
        client: Any = redis.Redis.from_url(redis_url)
        (key,) = [k for k in client.scan_iter(match=f"{redis_prefix}:*:c:ny")]
        ttl = client.ttl(key)
        stored = client.hget(key, "Z")
        client.close()
    finally:
        store.close()
    assert 2 * HOUR - 10 <= ttl <= 2 * HOUR + 60  # an hour to local midnight, an hour more
    assert stored == NEW_YORK.encode()


def test_redis_counts_in_its_own_clocks_window_near_a_local_midnight(
    redis_url: str, redis_prefix: str
) -> None:
    """A process whose clock is a few minutes behind Redis's gives edges around its own
    clock; the script picks the window Redis's clock is in, so processes whose clocks
    straddle local midnight never take turns resetting the counter."""
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    backend = RedisBudgetBackend(store, name="zoned")
    try:
        day = _spec()
        backend.clock_offset = _utc(2024, 11, 2, 12) - time.time()
        assert _spend(backend, "a", day, 0.5)
        behind = _utc(2024, 11, 3, 3, 58) - time.time()  # 23:58 EDT on Saturday
        ahead = _utc(2024, 11, 3, 4, 2) - time.time()  # 00:02 EDT on Sunday
        for process, redis_clock, spent, resets in (
            (ahead, behind, nano(0.5), _utc(2024, 11, 3, 4)),  # Redis is not yet: Saturday's
            (behind, ahead, 0, _utc(2024, 11, 4, 5)),  # Redis is past midnight: Sunday's
        ):
            backend.clock_offset = process
            args = [redis_clock, 1, *backend._spec_args([day])]
            (found,) = run(_status(backend, backend._keys([day]), args))
            assert found == (spent, 0, resets)
    finally:
        store.close()


def _status(backend: RedisBudgetBackend, keys: list[str], args: list[Any]) -> Any:
    from llmguard_sdk.budget.redis import _statuses

    reply = yield backend._scripts.command(2, keys, args)
    return _statuses(reply)


# -- a Guard, and the status command ----------------------------------------------------------

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


def _guard(fake: FakeProvider, redis_url: str, prefix: str) -> Guard:
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        budgets=Budgets([Budget(limit_usd=1.0, scope="tenant", tz=NEW_YORK)], prices=PRICES),
        store=redis_url,
        key_prefix=prefix,
        environ={},
    )


def test_a_guards_status_and_the_command_show_the_local_reset(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    guard = _guard(fake, redis_url, redis_prefix)
    try:
        guard.chat(USER, max_tokens=3, tenant="acme")
        (row,) = guard.budget_status(tenant="acme")
    finally:
        guard.close()
    assert row["tz"] == NEW_YORK
    assert row["window"] == "day"
    assert row["spent_usd"] > 0
    assert row["resets_at"] == _next_local_midnight(time.time(), zoneinfo.ZoneInfo(NEW_YORK))
    common = [sys.executable, "-m", "llmguard_sdk.cli", "budget", "status"]
    common += ["--store", redis_url, "--prefix", redis_prefix, "--tenant", "acme"]
    text = subprocess.run(common, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    header, line = text.stdout.splitlines()
    assert header.endswith("resets")
    assert line.endswith(" 00:00:00 America/New_York")  # local midnight, not 04:00 or 05:00
    shown = json.loads(subprocess.run([*common, "--json"], capture_output=True, text=True).stdout)
    assert shown["counters"][0]["tz"] == NEW_YORK
    assert shown["counters"][0]["resets_at"] == row["resets_at"]
