"""Spend budgets: prices and costs, window maths, and one backend contract run against the
in-memory counters and a real Redis (the Lua scripts)."""

from __future__ import annotations

import calendar
import datetime as dt
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anyio
import pytest

from llmguard_sdk import ChatResponse, ConfigurationError, Usage
from llmguard_sdk.budget import (
    Budget,
    Budgets,
    CounterSpec,
    MemoryBudgetBackend,
    Price,
    PriceTable,
    RedisBudgetBackend,
    RunawayDetector,
    UnknownModelPriceError,
    cost_of_response,
)
from llmguard_sdk.budget.policy import NANO, WindowKind, decide, nano, window_bounds
from llmguard_sdk.providers.wire import usage_from_payload
from llmguard_sdk.store import RedisStore
from tests.conftest import RedisTarget, redis_store

# -- prices and costs: golden fixtures ---------------------------------------------------------

MINI = PriceTable.default_table().price("gpt-4o-mini", at=dt.date(2025, 6, 1))
HAIKU = PriceTable.default_table().price("claude-3-5-haiku", at=dt.date(2025, 6, 1))


def test_openai_shaped_usage_prices_cached_tokens_at_their_rate() -> None:
    usage, reported = usage_from_payload(
        {
            "prompt_tokens": 10_000,
            "completion_tokens": 1_000,
            "prompt_tokens_details": {"cached_tokens": 8_000},
        }
    )
    assert usage is not None
    assert reported is None
    # 2,000 plain input at $0.15/M, 8,000 cached at $0.075/M, 1,000 output at $0.60/M
    assert MINI.cost(usage) == pytest.approx(0.0003 + 0.0006 + 0.0006)


def test_anthropic_shaped_usage_counts_cache_reads_and_writes_once() -> None:
    usage, _ = usage_from_payload(
        {
            "input_tokens": 1_000,
            "output_tokens": 500,
            "cache_read_input_tokens": 20_000,
            "cache_creation_input_tokens": 4_000,
        }
    )
    assert usage is not None
    assert usage.input_tokens == 25_000  # every input token, counted once
    # 1,000 at $0.80/M + 20,000 reads at $0.08/M + 4,000 writes at $1.00/M + 500 at $4/M
    assert HAIKU.cost(usage) == pytest.approx(0.0008 + 0.0016 + 0.004 + 0.002)


_ABSURD_USAGES = [
    {"prompt_tokens": 10, "completion_tokens": 2**31},
    {
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 10**400},
    },
    {"input_tokens": 1, "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 2**31}},
    {"input_tokens": 2**30, "output_tokens": 1, "cache_read_input_tokens": 2**30},  # 2**31 in all
    {"input_tokens": 1, "output_tokens": 1, "cache_creation": {"ephemeral_1h_input_tokens": 2**40}},
]


@pytest.mark.parametrize("raw", _ABSURD_USAGES)
def test_a_count_above_int32_anywhere_in_the_usage_makes_it_unusable(raw: dict[str, int]) -> None:
    """A count above 2**31 - 1 (no context or ``max_tokens`` holds it) is the provider's
    error: the whole usage is unusable (the Guard estimates it), a detail's too (10**400
    cached tokens were clamped and passed; 2**40 written for an hour made the input 2**40)."""
    assert usage_from_payload({**raw, "cost": 0.5}) == (None, 0.5)
    assert usage_from_payload({"prompt_tokens": 2**31 - 1, "completion_tokens": 0})[0] is not None


class _Watched(Mapping[str, Any]):
    """A usage object that notes the keys read from it and cannot be walked (a check that
    walks it fails)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data, self.read = data, set[str]()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the usage was walked, not read")

    def __len__(self) -> int:
        return len(self.data)


@pytest.mark.parametrize("shape", ["chat", "responses", "messages"])
def test_only_the_counts_read_are_checked_however_much_detail_a_usage_has(shape: str) -> None:
    """The bound checked every key of a usage and of its details on every call (its cost grew
    with the detail a provider sent: audio, image, per-modality counts ...); only the counts
    the parser reads are checked, a few lookups whatever the usage holds. A count it does not
    read cannot make the usage unusable; one it reads still does, with its name."""
    extra = {f"modality_{i}_tokens": 2**40 for i in range(1_000)}
    details = _Watched({"cached_tokens": 2, **extra})
    top = _Watched(
        {
            "chat": {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": details},
            "responses": {"input_tokens": 5, "output_tokens": 1, "input_tokens_details": details},
            "messages": {
                "input_tokens": 3,
                "output_tokens": 1,
                "cache_read_input_tokens": 2,
                "cache_creation": details,
            },
        }[shape]
        | extra
    )
    usage, _ = usage_from_payload(top)
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (5, 1)
    assert len(top.read) <= 12  # (the shape's keys, its counts, cost and tier)
    assert len(details.read) <= 4  # (cached, written, the writes' split, audio)
    assert not (top.read | details.read) & set(extra)
    absurd = {"chat": "prompt_tokens_details", "responses": "input_tokens_details"}.get(shape)
    if absurd is not None:
        assert usage_from_payload({**top.data, absurd: {"cached_tokens": 2**31}})[0] is None


def test_a_reported_cost_wins_and_estimates_say_so() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    table = PriceTable.default_table()
    reported = ChatResponse(text="x", usage=usage, cost_usd=0.01, cost_source="reported")
    cost = cost_of_response(reported, table, model="gpt-4o-mini")
    assert cost is not None
    assert (cost.usd, cost.source) == (0.01, "reported")
    estimated = cost_of_response(ChatResponse(text="x", usage=usage), table, model="gpt-4o-mini")
    assert estimated is not None
    assert estimated.source == "estimated"
    assert estimated.usd == pytest.approx(MINI.input)


def test_effective_dates_and_dated_model_names() -> None:
    table = PriceTable.shipped_table()  # genai-prices keeps no history this old
    assert table.price("gpt-4o", at=dt.date(2024, 6, 1)).input == 5.0
    assert table.price("gpt-4o", at=dt.date(2025, 1, 1)).input == 2.5
    mini = table.price("gpt-4o-mini", at=dt.date(2025, 1, 1))
    assert table.price("gpt-4o-mini-2024-07-18", at=dt.date(2025, 1, 1)) == mini
    haiku = table.price("claude-3-5-haiku", at=dt.date(2025, 1, 1))
    assert table.price("claude-3-5-haiku-20241022", at=dt.date(2025, 1, 1)) == haiku
    assert table.find("gpt-4o-mini", at=dt.date(2020, 1, 1)) is None  # before its first price


def test_an_unknown_model_is_an_error_or_the_configured_default_never_zero() -> None:
    table = PriceTable.default_table()
    with pytest.raises(UnknownModelPriceError, match="no-such-model"):
        table.price("no-such-model")
    assert isinstance(UnknownModelPriceError(None, "m"), ConfigurationError)
    fallback = table.with_prices({}, default=Price(input=1.0, output=2.0))
    assert fallback.price("no-such-model").output == 2.0
    usage = Usage(input_tokens=100, output_tokens=100)
    assert cost_of_response(ChatResponse(text="", usage=usage), table, model="nope") is None


def test_a_tables_default_price_is_asked_of_the_table() -> None:
    """The price of a model no layer knows, as the table gives it (``cost_of_response`` read
    the table's private layers for it): the default of its top layer that sets one."""
    assert PriceTable.default_table().default_price() is None
    fallback = PriceTable.default_table().with_prices({}, default=Price(input=3.0, output=4.0))
    assert fallback.default_price() == Price(input=3.0, output=4.0)
    assert fallback.with_prices({"m": Price(1.0, 1.0)}).default_price() == Price(3.0, 4.0)
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    cost = cost_of_response(ChatResponse(text="", usage=usage), fallback, model="unknown")
    assert cost is not None
    assert cost.usd == pytest.approx(3.0)


def test_user_prices_override_by_route_or_model() -> None:
    table = PriceTable.default_table().with_prices(
        {"cheap-route/gpt-4o-mini": Price(input=0.01, output=0.02), "my-model": Price(1, 2)}
    )
    assert table.price("gpt-4o-mini", provider="cheap-route").input == 0.01
    assert table.price("gpt-4o-mini", provider="other", at=dt.date(2025, 1, 1)) == MINI
    assert table.price("my-model").output == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"input": -1, "output": 1},
        {"input": float("inf"), "output": 1},
        {"input": "1", "output": 1},
        {"input": 1, "output": 1, "cached_input": -0.5},
    ],
)
def test_bad_prices(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Price(**bad)


def test_a_price_table_file_round_trips(tmp_path: Any) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        '{"schema": 1, "version": "test", "prices": [{"provider": "acme", "model": "m1",'
        ' "input": 3, "output": 4, "effective_from": "2024-01-01"}]}'
    )
    table = PriceTable.from_json(path)
    assert table.version == "test"
    assert table.price("m1", provider="acme").output == 4
    with pytest.raises(ConfigurationError):
        PriceTable.from_json(tmp_path / "missing.json")
    with pytest.raises(ConfigurationError):
        PriceTable.from_json({"prices": [{"model": "m"}]})


@pytest.mark.parametrize(
    "make",
    [
        lambda: PriceTable({"m": 1.0}),  # type: ignore[dict-item]
        lambda: PriceTable({"m": None}),  # type: ignore[dict-item]
        lambda: PriceTable([("m", Price(input=1, output=1))]),  # type: ignore[arg-type]
        lambda: PriceTable(default=1.0),  # type: ignore[arg-type]
        lambda: PriceTable().with_prices({}, default={"input": 1}),  # type: ignore[arg-type]
        lambda: PriceTable.from_json({"prices": [], "default": {"input": 1}}),
        lambda: PriceTable.from_json({"prices": [], "default": [1, 2]}),
    ],
)
def test_bad_price_tables(make: Any) -> None:
    with pytest.raises(ConfigurationError):
        make()


# -- policy ------------------------------------------------------------------------------------


def _epoch(*parts: int) -> float:
    return float(calendar.timegm((*parts, 0, 0, 0)[:6]))


def test_calendar_windows_end_on_utc_boundaries() -> None:
    now = _epoch(2024, 2, 29, 23, 59, 30)
    assert window_bounds("minute", now)[1] == _epoch(2024, 3, 1, 0, 0, 0)
    assert window_bounds("hour", now)[1] == _epoch(2024, 3, 1, 0, 0, 0)
    assert window_bounds("day", now)[1] == _epoch(2024, 3, 1, 0, 0, 0)
    assert window_bounds("month", now)[1] == _epoch(2024, 3, 1, 0, 0, 0)
    december = window_bounds("month", _epoch(2025, 12, 31, 12, 0, 0))
    assert december[1] == _epoch(2026, 1, 1, 0, 0, 0)
    assert window_bounds("month", _epoch(2026, 1, 1, 0, 0, 0))[0] == december[0] + 1


def test_window_bounds_follow_the_clock_back_and_forth_across_edges() -> None:
    # each kind remembers the window it was last asked about: a clock that leaves it (on
    # either side, by a second or by a fraction, or jumping back) gets that clock's window
    edges = [_epoch(2024, 2, 29, 23, 59, 0), _epoch(2024, 3, 1, 0, 0, 0), _epoch(2025, 1, 1, 0, 0)]
    clocks = [edge + delta for edge in edges for delta in (-1.0, -1e-6, 0.0, 1e-6, 0.5, 1.0)]
    for now in [*clocks, *reversed(clocks), *clocks[::3], *clocks[1::2]]:
        kinds: tuple[tuple[WindowKind, int], ...] = (("minute", 60), ("hour", 3600), ("day", 86400))
        for kind, seconds in kinds:
            index = math.floor(now / seconds)
            assert window_bounds(kind, now) == (index, float((index + 1) * seconds))
        day = dt.datetime.fromtimestamp(math.floor(now), tz=dt.timezone.utc)
        after = (day.year, day.month + 1) if day.month < 12 else (day.year + 1, 1)
        assert window_bounds("month", now) == (
            day.year * 12 + day.month - 1,
            float(calendar.timegm((*after, 1, 0, 0, 0))),
        )
    assert window_bounds("rolling", 12.5) == (0, 12.5)


def test_decide_clamps_between_the_minimum_and_the_wish() -> None:
    assert decide([1000, 5000], base=100, per_token=1.0, want=500, minimum=500) == (500, -1)
    assert decide([400, 5000], base=100, per_token=1.0, want=500, minimum=16) == (300, -1)
    assert decide([5000, 110], base=100, per_token=1.0, want=500, minimum=16) == (-1, 1)
    assert decide([50], base=100, per_token=0.0, want=500, minimum=500) == (-1, 0)


def test_nano_rounds_up_so_holds_are_never_short() -> None:
    assert nano(1.0) == NANO
    assert nano(1e-10) == 1
    assert nano(0.0) == 0


def test_nano_counts_float_noise_as_the_decimal_rounding_did() -> None:
    """``nano`` rounds without going through decimal digits where it can: it gives what
    ``ceil(round(usd * NANO, 3))`` gave, float noise within a thousandth of a nano-dollar of
    a whole one included (0.1 + 0.2 dollars is 300,000,000, not one more)."""
    assert nano(0.1 + 0.2) == 300_000_000
    generator = random.Random(7)
    amounts = [
        (whole + over) / NANO
        for whole in (0, 1, 3, 999, 10**6, 10**12)
        for over in (0, 1e-7, 0.0004, 0.0005, 0.0006, 0.001, 0.3, 0.5, 0.9999)
    ] + [generator.random() * 10 ** generator.randint(-10, 6) for _ in range(5000)]
    for usd in amounts:
        assert nano(usd) == math.ceil(round(usd * NANO, 3)), usd


@pytest.mark.parametrize(
    "bad",
    [
        {"limit_usd": -1},
        {"limit_usd": 1, "scope": "planet"},
        {"limit_usd": 1, "window": "week"},
        {"limit_usd": 1, "on_exhausted": "panic"},
        {"limit_usd": 1, "scope": "tag"},
        {"limit_usd": 1, "id": "x"},
        {"limit_usd": 1, "alerts": (0,)},
        {"limit_usd": 1, "name": "no spaces"},
        {"limit_usd": 1e12},
        {"limit_usd": 1, "window": "rolling", "rolling_seconds": 0},
        {"limit_usd": float("inf")},
        {"limit_usd": 1, "alerts": 0.5},
        {"limit_usd": 1, "alerts": None},
        {"limit_usd": 1, "name": 5},
        # a calendar budget's rolling_seconds went unchecked: every call then raised
        # ValueError / TypeError from float()
        {"limit_usd": 1, "rolling_seconds": "abc"},
        {"limit_usd": 1, "rolling_seconds": None},
        {"limit_usd": 1, "window": "rolling", "rolling_seconds": True},
        {"limit_usd": 1, "alerts": (True,)},
    ],
)
def test_bad_budgets(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Budget(**bad)


@pytest.mark.parametrize(
    "bad",
    [
        {"name": 5},
        {"runaway_factor": "5"},
        {"downgrade_to": None},
        {"local_routes": 3},
        {"on_event": None},
        {"budgets": None},
        # a string was taken for its truth: fail_open="false" failed open
        {"fail_open": "false"},
        {"clamp_max_tokens": "no"},
        {"input_margin": True},
        {"hold_seconds": True},
    ],
)
def test_bad_budget_sets(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Budgets(**{"budgets": [Budget(limit_usd=1)], **bad})


def test_runaway_detector_flags_a_spike_over_five_times_p95() -> None:
    detector = RunawayDetector(factor=5, window=100, min_samples=20)
    for tokens in [100, 120, 90, 110] * 10:
        assert detector.observe("summaries", tokens) is None
    assert detector.observe("summaries", 500) is None  # under 5 x p95 (120)
    assert detector.observe("summaries", 700) == 120.0
    assert detector.observe("other", 10_000) is None  # no history yet: no verdict


# -- the backend contract: memory and a real Redis -----------------------------------------------


class Backends:
    """One backend and a way to set its clock (epoch seconds)."""

    def __init__(self, backend: Any, set_clock: Callable[[float], None]) -> None:
        self.backend = backend
        self.set_clock = set_clock
        self.now = time.time()

    def at(self, when: float) -> None:
        self.now = when
        self.set_clock(when)

    def advance(self, seconds: float) -> None:
        self.at(self.now + seconds)

    def clock(self) -> float:
        """The clock the backend reads now: a Redis script's clock runs on from ``at``."""
        offset = getattr(self.backend, "clock_offset", None)
        return self.now if offset is None else time.time() + offset


@pytest.fixture(params=["memory", "redis", "cluster"])
def backends(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Backends]:
    if request.param == "memory":
        now = [time.time()]
        memory = MemoryBudgetBackend(clock=lambda: now[0])

        def put(when: float) -> None:
            now[0] = when

        yield Backends(memory, put)
        return
    store = redis_store(*redis_target(request.param))
    backend = RedisBudgetBackend(store, name="contract")

    def shift(when: float) -> None:
        backend.clock_offset = when - time.time()

    yield Backends(backend, shift)
    store.close()


def spec(
    key: str,
    limit_usd: float,
    window: Any = "day",
    *,
    alerts: tuple[float, ...] = (0.5, 0.8, 1.0),
    rolling: float = 3600.0,
    index: int = 0,
) -> CounterSpec:
    return CounterSpec(key, nano(limit_usd), window, rolling, alerts, f"test:{key}", index)


def hold(backend: Any, rid: str, specs: list[CounterSpec], usd: float, **kw: Any) -> Any:
    """Reserve a fixed ``usd`` (no output tokens to clamp)."""
    return backend.reserve(
        rid, specs, base=nano(usd), per_token=0.0, want=0, minimum=0, ttl=kw.get("ttl", 60)
    )


def test_contract_reserve_is_all_or_nothing_across_scopes(backends: Backends) -> None:
    backend = backends.backend
    backends.at(_epoch(2030, 5, 10, 12, 0, 0))
    tenant, user = spec("tenant", 1.0), spec("user", 0.3, index=1)
    assert hold(backend, "a", [tenant, user], 0.25).allowed
    refused = hold(backend, "b", [tenant, user], 0.25)
    assert not refused.allowed
    assert refused.refused_index == 1  # the user budget is the one without room
    assert refused.reserved == nano(0.25)
    assert refused.resets_at == _epoch(2030, 5, 11, 0, 0, 0)
    # nothing was taken from the tenant by the refused call
    assert backend.status([tenant]) == [(0, nano(0.25), _epoch(2030, 5, 11, 0, 0, 0))]
    assert hold(backend, "c", [tenant], 0.75).allowed
    assert not hold(backend, "d", [tenant], 0.01).allowed


def test_contract_settle_replaces_the_hold_once(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("t", 1.0)
    assert hold(backend, "r1", [budget], 0.6).allowed
    first = backend.settle("r1", [budget], actual=nano(0.2), ttl=600)
    assert first.applied
    assert first.spent == (nano(0.2),)
    again = backend.settle("r1", [budget], actual=nano(0.2), ttl=600)
    assert not again.applied  # idempotent: a retry of the same settle changes nothing
    spent, reserved, _ = backend.status([budget])[0]
    assert (spent, reserved) == (nano(0.2), 0)
    assert hold(backend, "r2", [budget], 0.5).allowed
    assert backend.settle("r2", [budget], actual=0, ttl=600).applied  # a release
    assert backend.status([budget])[0][:2] == (nano(0.2), 0)


def test_contract_holds_expire_so_a_dead_process_leaks_nothing(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("t", 1.0)
    backends.at(_epoch(2030, 5, 10, 12, 0, 0))
    assert hold(backend, "crashed", [budget], 0.9, ttl=30).allowed
    assert not hold(backend, "x", [budget], 0.2).allowed
    backends.advance(31)
    assert backend.status([budget])[0][1] == 0
    assert hold(backend, "y", [budget], 0.9).allowed
    late = backend.settle("crashed", [budget], actual=nano(0.05), ttl=600)
    assert late.applied  # a late settle still counts what was really spent
    assert backend.status([budget])[0][:2] == (nano(0.05), nano(0.9))


def test_contract_calendar_windows_roll_over(backends: Backends) -> None:
    backend = backends.backend
    month = spec("m", 1.0, "month")
    minute = spec("min", 0.5, "minute", index=1)
    backends.at(_epoch(2031, 12, 31, 23, 59, 10))
    assert hold(backend, "a", [month, minute], 0.4).allowed
    backend.settle("a", [month, minute], actual=nano(0.4), ttl=600)
    refused = hold(backend, "b", [month, minute], 0.2)
    assert not refused.allowed
    assert refused.refused_index == 1
    assert refused.resets_at == _epoch(2032, 1, 1, 0, 0, 0)
    backends.at(_epoch(2032, 1, 1, 0, 0, 20))  # a new minute, a new month
    assert backend.status([month, minute]) == [
        (0, 0, _epoch(2032, 2, 1, 0, 0, 0)),
        (0, 0, _epoch(2032, 1, 1, 0, 1, 0)),
    ]
    assert hold(backend, "c", [month, minute], 0.45).allowed


def test_contract_rolling_windows_free_room_as_spend_ages(backends: Backends) -> None:
    backend = backends.backend
    rolling = spec("r", 1.0, "rolling", rolling=600)
    backends.at(_epoch(2030, 5, 10, 12, 0, 5))
    assert hold(backend, "a", [rolling], 0.7).allowed
    backend.settle("a", [rolling], actual=nano(0.7), ttl=600)
    backends.advance(300)
    assert hold(backend, "b", [rolling], 0.3).allowed
    backend.settle("b", [rolling], actual=nano(0.3), ttl=600)
    refused = hold(backend, "c", [rolling], 0.1)
    assert not refused.allowed
    # its 10 s bucket leaves 610 s after it began: spend counts at least 600 s, wherever in it
    assert refused.resets_at == pytest.approx(_epoch(2030, 5, 10, 12, 10, 10), abs=0.01)
    backends.advance(306)  # the first 0.70 is out of the last 600 s
    assert backend.status([rolling])[0][0] == nano(0.3)
    assert hold(backend, "d", [rolling], 0.6).allowed


def test_contract_rolling_spend_late_in_its_bucket_counts_a_whole_window(
    backends: Backends,
) -> None:
    """$1 spent 59.9 s into a minute's bucket of an hour's rolling window left it 59 buckets
    on, 3540.2 s later, and another $1 was allowed: $2 within the hour of a $1 budget."""
    backend = backends.backend
    rolling = spec("late", 1.0, "rolling", rolling=3600)
    backends.at(_epoch(2030, 5, 10, 12, 0, 0) + 59.9)
    before = backends.clock()
    assert hold(backend, "a", [rolling], 1.0).allowed
    after = backends.clock()  # a Redis script's clock ran on: the spend is somewhere between
    backend.settle("a", [rolling], actual=nano(1.0), ttl=600)
    backends.advance(3540.2)
    refused = hold(backend, "b", [rolling], 1.0)
    assert not refused.allowed

    def leaves(spent_at: float) -> float:  # a minute's bucket leaves 61 minutes after it began
        return (math.floor(spent_at / 60) + 61) * 60.0

    # 13:01:00 for a spend at 12:00:59.9, whichever bucket a slow call's spend landed in
    assert refused.resets_at >= before + 3600  # spend counts at least a whole window
    assert any(refused.resets_at == pytest.approx(leaves(t), abs=1e-6) for t in (before, after))
    backends.at(refused.resets_at + 0.4)  # an hour and a moment after the spend: out
    assert backend.status([rolling])[0][0] == 0
    assert hold(backend, "c", [rolling], 1.0).allowed


def test_contract_alerts_fire_once_per_threshold_per_window(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("a", 1.0, "hour")
    backends.at(_epoch(2030, 5, 10, 12, 0, 0))
    fired: list[tuple[float, ...]] = []
    for index, usd in enumerate([0.3, 0.3, 0.1, 0.25, 0.05]):
        rid = f"x{index}"
        assert hold(backend, rid, [budget], usd).allowed
        fired.append(backend.settle(rid, [budget], actual=nano(usd), ttl=600).fired[0])
    assert fired == [(), (0.5,), (), (0.8,), (1.0,)]
    backends.at(_epoch(2030, 5, 10, 13, 0, 1))  # next hour: re-armed
    assert hold(backend, "y", [budget], 0.9).allowed
    assert backend.settle("y", [budget], actual=nano(0.9), ttl=600).fired == ((0.5, 0.8),)


def test_contract_clamps_output_tokens_to_the_room_left(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("c", 0.001)  # 1,000,000 nano-dollars
    args = {"base": 200_000, "per_token": 1_000.0, "ttl": 60}
    full = backend.reserve("a", [budget], want=500, minimum=16, **args)
    assert (full.allowed, full.tokens, full.amount) == (True, 500, 700_000)
    clamped = backend.reserve("b", [budget], want=500, minimum=16, **args)
    assert (clamped.allowed, clamped.tokens, clamped.amount) == (True, 100, 300_000)
    assert not backend.reserve("c", [budget], want=500, minimum=16, **args).allowed


def test_contract_async_twins(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("as", 1.0)

    async def run() -> list[Any]:
        got = [
            await backend.areserve(
                "a", [budget], base=nano(0.8), per_token=0.0, want=0, minimum=0, ttl=60
            )
        ]
        got.append(await backend.asettle("a", [budget], actual=nano(0.1), ttl=60))
        got.append(await backend.astatus([budget]))
        return got

    reserved, settled, status = anyio.run(run)
    assert reserved.allowed
    assert settled.spent == (nano(0.1),)
    assert status[0][:2] == (nano(0.1), 0)


def test_contract_concurrent_reservations_never_overspend(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("race", 1.0)
    granted: list[bool] = []
    barrier = threading.Barrier(8)

    def worker(number: int) -> None:
        barrier.wait(timeout=10)
        for call in range(25):
            rid = f"w{number}-{call}"
            if hold(backend, rid, [budget], 0.01).allowed:
                granted.append(True)
                backend.settle(rid, [budget], actual=nano(0.0075), ttl=60)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    spent, reserved, _ = backend.status([budget])[0]
    assert reserved == 0
    assert spent <= nano(1.0)
    assert spent == len(granted) * nano(0.0075)
    assert len(granted) >= 132  # at most one hold short of the limit: 0.99 / 0.0075


def test_redis_keys_of_one_set_share_a_hash_tag(redis_url: str, redis_prefix: str) -> None:
    import redis

    store = RedisStore(redis_url, key_prefix=redis_prefix)
    backend = RedisBudgetBackend(store, name="tagged")
    specs = [spec("global", 1.0), spec("tenant.abc", 1.0, index=1)]
    assert hold(backend, "r", specs, 0.1).allowed
    backend.settle("r", specs, actual=1, ttl=60)
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.scan_iter(match=f"{redis_prefix}:*")]
    client.close()
    tags = {key.split("{")[1].split("}")[0] for key in keys}
    assert len(keys) == 4  # two counters, the settled marker, the set's processes (no holds)
    assert len(tags) == 1
    assert all(":budget:" in key for key in keys)
    store.close()


def test_contract_the_first_refusal_of_a_window_is_its_100_percent_alert(
    backends: Backends,
) -> None:
    backend = backends.backend
    budget = spec("x", 1.0, "hour")
    backends.at(_epoch(2030, 5, 10, 12, 0, 0))
    assert hold(backend, "a", [budget], 0.9).allowed
    assert backend.settle("a", [budget], actual=nano(0.9), ttl=600).fired == ((0.5, 0.8),)
    assert [hold(backend, r, [budget], 0.2).alerted for r in "bc"] == [True, False]
    backends.at(_epoch(2030, 5, 10, 13, 0, 0))
    assert not hold(backend, "d", [budget], 1.5).alerted  # over the limit, 0 %: no alert
    assert hold(backend, "e", [budget], 0.95).allowed
    assert not hold(backend, "f", [budget], 0.2).alerted  # only held, not spent yet
    backend.settle("e", [budget], actual=nano(0.95), ttl=600)
    assert hold(backend, "g", [budget], 0.2).alerted


def test_contract_refusals_caused_by_holds_in_flight_are_no_alert(backends: Backends) -> None:
    backend = backends.backend
    budget = spec("y", 1.0, "hour")
    backends.at(_epoch(2030, 5, 10, 12, 0, 0))
    assert hold(backend, "a", [budget], 0.7).allowed  # in flight, nothing settled yet
    refused = hold(backend, "b", [budget], 0.5)
    assert not refused.allowed
    assert not refused.alerted
