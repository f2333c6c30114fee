"""Spend budgets: costs on every answer, a daily tenant budget that downgrades to a cheaper
route when it runs low, alerts, a hard cap that refuses, and a monthly estimate.

Runs offline: two local FakeProviders stand in for a large and a small model, priced here at
$30 / $60 and $1 / $2 per million tokens so that a few calls move the budgets. With a Redis
store (``Guard(..., store="redis://...")``) the same budgets hold across every process.
"""

from llmguard_sdk import (
    Budget,
    BudgetEvent,
    BudgetExceededError,
    Budgets,
    Guard,
    OpenAICompatibleProvider,
    Price,
    PriceTable,
)
from llmguard_sdk.budget.estimate import estimate
from llmguard_sdk.testing import FakeProvider

PRICES = PriceTable.default_table().with_prices(
    {"large-model": Price(input=30.0, output=60.0), "small-model": Price(input=1.0, output=2.0)}
)
QUESTION = [{"role": "user", "content": "Summarise our refund policy in one line"}]


def on_event(event: BudgetEvent) -> None:
    if event.kind == "alert":
        print(f"  alert: {event.scope} reached {event.threshold:.0%} (${event.spent_usd:.4f})")
    elif event.kind == "exhausted":
        print(f"  {event.scope}: no room for this call, {event.action}")


with FakeProvider(model="large-model") as large, FakeProvider(model="small-model") as small:
    guard = Guard(
        [
            OpenAICompatibleProvider(large.base_url, model="large-model", name="large"),
            OpenAICompatibleProvider(small.base_url, model="small-model", name="small"),
        ],
        budgets=Budgets(
            [
                Budget(limit_usd=0.006, scope="tenant", window="day", on_exhausted="downgrade"),
                Budget(limit_usd=0.003, scope="user", id="u-trial", window="month"),
            ],
            prices=PRICES,
            downgrade_to=["small"],
            on_event=[on_event],
        ),
    )
    print("tenant acme, $0.006 a day, downgrade when low:")
    for number in range(1, 8):
        answer = guard.chat(QUESTION, max_tokens=20, tenant="acme")
        print(
            f"call {number}: {answer.route:<5} cost ${answer.cost_usd:.6f} ({answer.cost_source})"
        )
    print("user u-trial, $0.003 a month, hard cap:")
    try:
        for _ in range(3):
            guard.chat(QUESTION, max_tokens=20, tenant="beta", user="u-trial")
    except BudgetExceededError as exc:
        print(f"refused: scope={exc.scope} limit=${exc.limit_usd} spent=${exc.spent_usd:.6f}")
    guard.close()

(mini, split) = estimate(
    PriceTable.default_table(),
    requests_per_day=20_000,
    input_tokens=(900, 3_000),
    output_tokens=(250, 800),
    options=[("gpt-4o-mini", {"gpt-4o-mini": 1.0}), ("70/30", {"gpt-4o-mini": 0.7, "gpt-4o": 0.3})],
    cache_hit_rate=0.25,
)
print(f"estimate: gpt-4o-mini ${mini.monthly_p50_usd:,.0f}/month,", end=" ")
print(f"70/30 split ${split.monthly_p50_usd:,.0f}/month")
