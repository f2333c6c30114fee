"""Per-request fees (``Price.per_request``, genai-prices' ``requests_kcount``): charged once
per request a provider bills, held at the reservation and settled, a billed attempt that
served nothing included. Perplexity's ``sonar`` bills $12 per thousand requests besides its
tokens: 100 tokens in and 100 out cost $0.0122, of which the tokens $0.0002."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from llmguard_sdk import Guard, Message, Usage
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.budget.estimate import estimate
from llmguard_sdk.budget.policy import nano
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

from .conftest import USER, genai_prices_or_skip
from .test_budget_fixtures import _Recording

MakeGuard = Callable[..., Guard]
FEE = 0.01  # USD per request
PRICES = PriceTable.default_table().with_prices(
    {
        "fake-model": Price(input=100.0, output=200.0, per_request=FEE),
        "backup-model": Price(input=10.0, output=20.0, per_request=FEE / 2),
    }
)
_SONAR = Usage(input_tokens=100, output_tokens=100)


def _prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return count_request_tokens([Message(**m) for m in messages]).tokens


def _spent(guard: Guard) -> float:
    (row,) = guard.budget_status()
    assert row["held_usd"] == 0
    return float(row["spent_usd"])


def test_a_price_charges_its_per_request_fee_once_per_call() -> None:
    price = Price(input=1.0, output=1.0, per_request=0.012)
    assert price.cost(_SONAR) == pytest.approx(0.0122)
    assert price.worst_case(100, 100) == pytest.approx(0.0122)
    assert Price(input=1.0, output=1.0).cost(_SONAR) == pytest.approx(0.0002)  # no fee


@pytest.mark.parametrize("fee", [-0.01, True, float("inf"), "0.1"])
def test_a_per_request_fee_is_a_number_at_least_zero(fee: Any) -> None:
    with pytest.raises(ConfigurationError, match="per_request"):
        Price(input=1.0, output=1.0, per_request=fee)


def test_genai_prices_per_request_fees_are_read() -> None:
    genai_prices = genai_prices_or_skip()
    table = PriceTable.default_table()
    price = table.price("sonar", provider="perplexity")
    assert price.per_request == pytest.approx(0.012)
    theirs = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=100, output_tokens=100),
        "sonar",
        provider_id="perplexity",
    )
    assert float(theirs.total_price) == pytest.approx(0.0122)
    assert table.cost(_SONAR, "sonar", provider="perplexity").usd == pytest.approx(0.0122)


def test_a_users_price_keeps_the_fee_it_leaves_unset() -> None:
    """``with_prices`` fills a price's unset rates from the layers below, the fee too;
    ``replace=True`` makes the price the model's whole one (no fee unless it sets one)."""
    genai_prices_or_skip()
    base = PriceTable.default_table()
    mine = {"perplexity/sonar": Price(input=2.0, output=2.0)}
    assert base.with_prices(mine).price("sonar", provider="perplexity").per_request == 0.012
    replaced = base.with_prices(mine, replace=True)
    assert replaced.price("sonar", provider="perplexity").per_request is None
    assert replaced.cost(_SONAR, "sonar", provider="perplexity").usd == pytest.approx(0.0004)


def test_a_json_price_row_sets_a_per_request_fee() -> None:
    table = PriceTable.from_json(
        {"prices": [{"model": "m", "input": 1.0, "output": 1.0, "per_request": 0.012}]}
    )
    assert table.cost(_SONAR, "m").usd == pytest.approx(0.0122)


def test_an_estimate_counts_the_fee_of_every_request() -> None:
    table = PriceTable({"m": Price(input=1.0, output=1.0, per_request=0.012)})
    (option,) = estimate(
        table,
        requests_per_day=1000,
        input_tokens=(100, 100),
        output_tokens=(100, 100),
        options=[("m", {"m": 1.0})],
        days=30,
        at=dt.date(2026, 1, 1),
    )
    assert option.per_request_p50_usd == pytest.approx(0.0122)
    assert option.monthly_p50_usd == pytest.approx(0.0122 * 30_000)


def test_a_call_is_held_and_settled_with_its_fee(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES), retry=None)
    spend = guard._stages.spend
    assert spend is not None
    spend.backend = backend = _Recording()
    answer = guard.chat(USER, max_tokens=10)
    usage = answer.usage
    assert usage is not None
    tokens_usd = (usage.input_tokens * 100 + usage.output_tokens * 200) / 1e6
    assert answer.cost_usd == pytest.approx(tokens_usd + FEE)
    (held,) = backend.held
    worst = _prompt_tokens(USER) * 1.1 * 100 / 1e6 + 10 * 200 / 1e6  # (the input margin)
    assert held / 1e9 == pytest.approx(worst + FEE, abs=1e-8)
    assert _spent(guard) == pytest.approx(answer.cost_usd)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_billed_attempt_that_served_nothing_pays_its_fee_too(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    request: pytest.FixtureRequest,
    store: str,
) -> None:
    """The primary times out after its request went out (billed: its prompt and its fee);
    the backup serves. The top-up before the backup's attempt holds its fee as well."""
    budgets = Budgets([Budget(limit_usd=1.0)], prices=PRICES)
    options: dict[str, Any] = {"retry": None, "attempt_timeout": 0.3, "timeout": 10}
    if store == "redis":
        options["store"] = request.getfixturevalue("redis_url")
        options["key_prefix"] = request.getfixturevalue("redis_prefix")
    guard = make_guard(fake, fake2, budgets=budgets, **options)
    spend = guard._stages.spend
    assert spend is not None
    backend = _Recording()
    if store == "memory":
        spend.backend = backend
    fake.always(Fault(latency=1.0))
    answer = guard.chat(USER, max_tokens=10)
    assert answer.route == "backup"
    usage = answer.usage
    assert usage is not None
    primary = _prompt_tokens(USER) * 100 / 1e6 + FEE
    backup = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6 + FEE / 2
    assert answer.cost_usd == pytest.approx(primary + backup)
    assert _spent(guard) == pytest.approx(primary + backup)
    if store == "memory":
        assert sum(backend.held) >= nano(primary + backup)  # the holds covered the bill
