"""Audio tokens priced at a model's audio rates, not its text rates.

OpenAI's ``gpt-audio`` bills input audio at $32 per million tokens and output audio at $64
(text: $2.50 and $10); its usage says how many of the tokens carried audio
(``prompt_tokens_details.audio_tokens``, ``completion_tokens_details.audio_tokens``). Priced as
text, a call of mostly audio was charged a seventh of its bill, and so did its budget's spend.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.models import Usage
from llmguard_sdk.providers.wire import usage_from_payload
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, genai_prices_or_skip

genai_prices_or_skip()

# 1,000 input tokens, 800 of them audio; 500 output tokens, 400 of them audio
AUDIO_USAGE: dict[str, Any] = {
    "prompt_tokens": 1000,
    "completion_tokens": 500,
    "total_tokens": 1500,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 800},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 400},
}
# gpt-audio (genai-prices): $2.50 / $10 text, $32 / $64 audio, per million tokens
GPT_AUDIO_USD = (200 * 2.5 + 800 * 32 + 100 * 10 + 400 * 64) / 1e6
AS_TEXT_USD = (1000 * 2.5 + 500 * 10) / 1e6


def _billed(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    return dict(AUDIO_USAGE)


def _guard(fake: FakeProvider, **options: Any) -> Guard:
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="openai"),
        environ={},
        **options,
    )


def test_the_usage_says_which_tokens_carried_audio() -> None:
    usage, _ = usage_from_payload(AUDIO_USAGE)
    assert usage is not None
    assert (usage.audio_input_tokens, usage.audio_output_tokens) == (800, 400)
    responses = {
        "input_tokens": 10,
        "output_tokens": 5,
        "input_tokens_details": {"audio_tokens": 7},
        "output_tokens_details": {"audio_tokens": 3},
    }
    usage, _ = usage_from_payload(responses)
    assert usage is not None
    assert (usage.audio_input_tokens, usage.audio_output_tokens) == (7, 3)
    odd = {**AUDIO_USAGE, "prompt_tokens_details": {"audio_tokens": 5000}}  # more than input
    usage, _ = usage_from_payload(odd)
    assert usage is not None
    assert usage.audio_input_tokens == 1000


def test_a_gpt_audio_call_costs_its_audio_rates_and_its_budget_spends_them(
    redis_url: str, redis_prefix: str
) -> None:
    """The call's cost, its stream's cost and the budget's settled spend: each at the audio
    rates (it was $0.0075, seven times less than the $0.0527 billed)."""
    with FakeProvider(model="gpt-audio", usage=_billed) as fake:
        guard = _guard(
            fake,
            store=redis_url,
            key_prefix=redis_prefix,
            budgets=Budgets([Budget(limit_usd=5.0)]),
        )
        try:
            answer = guard.chat(USER, max_tokens=600)
            assert answer.cost_usd == pytest.approx(GPT_AUDIO_USD)
            assert GPT_AUDIO_USD / AS_TEXT_USD > 7
            with guard.chat(USER, max_tokens=600, stream=True) as stream:
                list(stream)
            assert stream.response.cost_usd == pytest.approx(GPT_AUDIO_USD)
            (row,) = guard.budget_status()
            assert row["spent_usd"] == pytest.approx(2 * GPT_AUDIO_USD)
        finally:
            guard.close()


def test_a_shipped_style_table_prices_audio_and_user_prices_keep_it() -> None:
    table = PriceTable.from_json(
        {
            "prices": [
                {
                    "provider": "acme",
                    "model": "talker",
                    "input": 1.0,
                    "output": 2.0,
                    "input_audio": 10.0,
                    "output_audio": 20.0,
                }
            ]
        }
    )
    usage = Usage(input_tokens=100, output_tokens=50, audio_input_tokens=60, audio_output_tokens=30)
    expected = (40 * 1 + 60 * 10 + 20 * 2 + 30 * 20) / 1e6
    assert table.cost(usage, "talker", provider="acme").usd == pytest.approx(expected)
    # a user's text rates over it keep its audio rates (as they keep its cache rates)
    mine = table.with_prices({"acme/talker": Price(input=2.0, output=4.0)})
    expected = (40 * 2 + 60 * 10 + 20 * 4 + 30 * 20) / 1e6
    assert mine.cost(usage, "talker", provider="acme").usd == pytest.approx(expected)
    # a batch price scales them as it scales every rate
    batch = table.price("talker", provider="acme", tier="batch")
    assert batch.audio_rates == (5.0, 10.0)


def test_audio_tokens_without_an_audio_rate_say_so(caplog: pytest.LogCaptureFixture) -> None:
    """A model whose price lists no audio rate (genai-prices has none for
    gpt-4o-audio-preview): its audio counts at the text rate, and a warning says how to set
    the audio rates."""
    usage = Usage(input_tokens=100, output_tokens=50, audio_input_tokens=60)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        assert Price(input=1.0, output=2.0).cost(usage) == pytest.approx((100 + 100) / 1e6)
    assert "60 input audio tokens were priced at the text rate" in caplog.text
    assert "input_audio" in caplog.text
