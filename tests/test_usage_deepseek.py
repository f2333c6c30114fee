"""DeepSeek's OpenAI-compatible usage: ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``
beside ``prompt_tokens`` (no ``prompt_tokens_details.cached_tokens``, or both). Its cache hits
read 0 cached tokens, and the spend budget priced them as uncached input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import Guard, Price, PriceTable
from llmguard_sdk.budget._usage import usage_from_payload
from llmguard_sdk.testing import FakeProvider

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices(
    {"fake-model": Price(input=1.0, output=2.0, cached_input=0.1)}
)
SYSTEM = " ".join(["You answer questions about the bicycle shop's opening hours."] * 30)


def deepseek(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """The FakeProvider's usage as DeepSeek reports it."""
    hit = counted["prompt_tokens_details"]["cached_tokens"]
    return {
        "prompt_tokens": counted["prompt_tokens"],
        "completion_tokens": counted["completion_tokens"],
        "total_tokens": counted["total_tokens"],
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": counted["prompt_tokens"] - hit,
    }


HITS = {"prompt_cache_hit_tokens": 768, "prompt_cache_miss_tokens": 232}


@pytest.mark.parametrize(
    ("payload", "counted"),
    [
        ({"prompt_tokens": 1000, "completion_tokens": 20, **HITS}, (1000, 768)),
        # DeepSeek's newer answers carry both shapes: the same tokens, counted once
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 768},
                **HITS,
            },
            (1000, 768),
        ),
        # hits and misses alone: they are the input
        ({"completion_tokens": 20, **HITS}, (1000, 768)),
    ],
    ids=["hit-miss", "both-shapes", "no-prompt-tokens"],
)
def test_the_hits_are_the_cached_input(payload: dict[str, Any], counted: tuple[int, int]) -> None:
    usage, _ = usage_from_payload(payload)
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (*counted, 20)


@pytest.mark.parametrize("bad", [-1, "768", True, 2**40])
def test_a_hit_count_that_is_none_is_not_read(bad: object) -> None:
    usage, _ = usage_from_payload(
        {"prompt_tokens": 1000, "completion_tokens": 2, "prompt_cache_hit_tokens": bad}
    )
    if bad == 2**40:  # (above MOST_TOKENS: a provider's bad answer, as every count's)
        assert usage is None
    else:
        assert usage is not None
        assert (usage.input_tokens, usage.cached_input_tokens) == (1000, 0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_deepseek_route_reads_its_cache_hits_and_the_budget_prices_them(
    make_guard: MakeGuard, stream: bool
) -> None:
    with FakeProvider(
        model="fake-model", name="deepseek", prefix_cache=True, usage=deepseek
    ) as api:
        guard = make_guard(api, prices=PRICES)
        answers = []
        for question in ("When do you open?", "When do you close?"):
            messages: Any = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
            ]
            if stream:
                with guard.chat(messages, stream=True) as chunks:
                    list(chunks)
                answers.append(chunks.response)
            else:
                answers.append(guard.chat(messages))
        hits = api.stats.cached_input_tokens
    second = answers[1].usage
    assert second is not None
    assert second.cached_input_tokens == hits > 200
    plain = second.input_tokens - hits
    expected = (plain * 1.0 + hits * 0.1 + second.output_tokens * 2.0) / 1e6
    assert answers[1].cost_usd == pytest.approx(expected)
