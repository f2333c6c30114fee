"""Assemble prompts so that provider prefix caches hit, and measure the hit ratio.

A support bot's template keeps its static part (instructions, tools, documents) first and
byte-identical; the current time and the question go last. Against a local FakeProvider that
emulates a prefix cache, the OpenAI route reports cached tokens from the second call on, the
Anthropic route reads the cache written at its breakpoints, and a PrefixCacheStats hook gives
the hit ratio per feature. The linter and the drift monitor catch what would break the prefix.

Prints: the cached tokens of each call, the hit ratio per feature, a lint finding of a strict
template, and a drift event.
"""

from __future__ import annotations

import datetime as dt

from llmguard_sdk import (
    AnthropicProvider,
    Guard,
    OpenAICompatibleProvider,
    PrefixCacheStats,
    PromptBuilder,
    PromptLintError,
)
from llmguard_sdk.prompts import DriftMonitor, PrefixDrift
from llmguard_sdk.testing import FakeProvider

HANDBOOK = [
    {"id": "returns", "title": "Returns", "text": "Unridden bikes: 30 days. Accessories: 14 days."},
    {"id": "delivery", "title": "Delivery", "text": "Three to five working days; cargo bikes ten."},
    {"id": "warranty", "title": "Warranty", "text": "Frames two years, parts one year."},
]
OPENING = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
ORDER_STATUS = {
    "type": "function",
    "function": {
        "name": "order_status",
        "description": "Look up an order.",
        "parameters": {"type": "object", "properties": {"order_number": {"type": "string"}}},
    },
}


def main() -> None:
    drifts: list[PrefixDrift] = []
    monitor = DriftMonitor([drifts.append])
    support = PromptBuilder(
        "support-bot",
        instructions=("You are Pedal, the support assistant of a bicycle shop. " * 20).strip(),
        tools=[ORDER_STATUS],
        documents=HANDBOOK,
        drift=monitor,
    )
    stats = PrefixCacheStats()
    with FakeProvider(prefix_cache=True) as api:
        routes = {
            "openai": OpenAICompatibleProvider(api.base_url, model="gpt-4o-mini", name="openai"),
            "anthropic": AnthropicProvider(api.base_url, model="claude-haiku", name="anthropic"),
        }
        for feature, route in routes.items():
            with Guard(route, hooks=[stats], environ={}) as guard:
                for minute, question in enumerate(
                    ("Can I return my bike?", "When will my order arrive?")
                ):
                    at = OPENING + dt.timedelta(minutes=minute)  # the clock moves between calls
                    now = at.strftime("%Y-%m-%d %H:%M:%S")
                    prompt = support.build(question, context={"now": now}, tenant="acme")
                    answer = guard.chat(request=prompt.request(max_tokens=50), feature=feature)
                    assert answer.usage is not None
                    print(
                        f"{feature}: {answer.usage.input_tokens} input tokens, "
                        f"{answer.usage.cached_input_tokens} cached, "
                        f"{answer.usage.cache_write_input_tokens} written"
                    )
            api.clear_prefix_cache()
    for feature in routes:
        print(f"hit ratio {feature}: {stats.hit_ratio(feature):.2f}")

    strict = PromptBuilder(
        "greeter", instructions="Today is 2025-03-01. Greet the user.", strict=True, drift=None
    )
    try:
        strict.build("Hi!")
    except PromptLintError as error:
        warning = error.warnings[0]
        print(f"lint: {warning.rule} in {warning.section} at {warning.start}: {warning.text!r}")

    support.set_instructions("You are Pedal. Today's special: 10 % off helmets.")
    support.build("Any deals?", tenant="acme")  # drift is tracked per template and tenant
    print(f"drift: {drifts[0].template} changed in {', '.join(drifts[0].sections)}")


if __name__ == "__main__":
    main()
