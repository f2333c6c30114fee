"""The spend stage remembers the price it costs a call at: per route, model, tier, UTC day and
stretch of the day between the price table's time-of-day windows' edges. A call like the last
looks nothing up, and every cost is still the table's own, to the last digit."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.context import CallContext, Scope
from llmguard_sdk.models import ChatRequest, ChatResponse, Message, Usage

from .conftest import genai_prices_or_skip

_DAY = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)
_USAGE = Usage(input_tokens=1_000_000, output_tokens=0)


class _CountingTable(PriceTable):
    """A price table that counts the lookups asked of it."""

    lookups = 0

    def find(self, model: str, **options: Any) -> Price | None:
        type(self).lookups += 1
        return super().find(model, **options)


@pytest.fixture
def make_guard() -> Iterator[Any]:
    guards: list[Guard] = []

    def build(table: PriceTable, model: str, name: str) -> Guard:
        # nothing is sent: the route's address is never asked
        route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model=model, name=name)
        guard = Guard(route, prices=table, environ={})
        guards.append(guard)
        return guard

    yield build
    for guard in guards:
        guard.close()


def _cost(guard: Guard, at: dt.datetime, usage: Usage = _USAGE, **request: Any) -> float:
    spend = guard._stages.spend
    assert spend is not None
    ctx = CallContext(
        request=ChatRequest(messages=[Message(role="user", content="hi")], **request),
        scope=Scope(),
        deadline=time.monotonic() + 60,
        started_ns=int(at.timestamp() * 10**6) * 1000,
    )
    response = ChatResponse(text="hi", usage=usage, route=guard._stages.routes[0].name)
    cost = spend.cost(ctx, guard._stages, response)
    assert cost is not None
    assert cost.source == "estimated"
    return cost.usd


def test_a_call_like_the_last_looks_no_price_up(make_guard: Any) -> None:
    table = _CountingTable({"my-model": Price(input=2.0, output=8.0)})
    guard = make_guard(table, "my-model", "mine")
    assert _cost(guard, _DAY) == pytest.approx(2.0)
    asked = _CountingTable.lookups
    for minute in range(1, 50):
        assert _cost(guard, _DAY + dt.timedelta(minutes=minute)) == pytest.approx(2.0)
    assert _CountingTable.lookups == asked


def test_a_time_of_day_price_change_is_still_seen(make_guard: Any) -> None:
    """DeepSeek's peak hours (00:30-16:30 UTC, $0.27/M input) and off-peak ($0.135/M),
    asked in turn, on one day and the next: each call at its start's price."""
    genai_prices_or_skip()
    table = PriceTable.default_table()
    guard = make_guard(table, "deepseek-chat", "deepseek")
    hours = [20, 8, 20.5, 8.5, 23.99, 0.6, 16.49, 16.5, 0.25, 24 + 8, 24 + 20, 8]
    costs = [_cost(guard, _DAY + dt.timedelta(hours=h)) for h in hours]
    expected = [0.135, 0.27, 0.135, 0.27, 0.135, 0.27, 0.27, 0.135, 0.135, 0.27, 0.135, 0.27]
    assert costs == pytest.approx(expected)


def test_remembered_prices_stay_exact(make_guard: Any) -> None:
    """Dated prices (a change at a day's start), a tier asked, a tier the usage reports and
    a model the table does not know (its default): each cost is the table's own."""
    later = _DAY.date() + dt.timedelta(days=1)
    table = PriceTable(
        {
            "mine/my-model": [
                Price(input=1.1, output=3.3, cached_input=0.11),
                Price(input=1.7, output=5.1, effective_from=later),
                Price(input=0.7, output=2.9, tier="flex"),
            ]
        },
        default=Price(input=9.0, output=9.0),
    )
    guard = make_guard(table, "my-model", "mine")
    other = make_guard(table, "unknown-model", "mine")
    usage = Usage(input_tokens=123_457, output_tokens=7_891, cached_input_tokens=1_000)
    flex = usage.model_copy(update={"service_tier": "flex"})
    asked = {"extra_body": {"service_tier": "flex"}}
    for at in [_DAY, _DAY + dt.timedelta(hours=23.99), _DAY + dt.timedelta(hours=24), _DAY]:
        for used, request in [(usage, {}), (flex, {}), (usage, asked), (usage, {})]:
            for served, model in [(guard, "my-model"), (other, "unknown-model")]:
                tier = used.service_tier or request.get("extra_body", {}).get("service_tier")
                want = table.cost(used, model, provider="mine", at=at, tier=tier).usd
                assert _cost(served, at, used, **request) == want, (at, used, request, model)
