"""Cache writes priced at the rate of the retention they were made with: Anthropic's 5-minute
and 1-hour writes, OpenAI's 30-minute and 12-hour ones, as the usage splits them or, when it
does not, as the request asked for them (every breakpoint's TTL)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.models import Usage
from llmguard_sdk.providers import AnthropicProvider, OpenAICompatibleProvider
from llmguard_sdk.providers.wire import usage_from_payload

from .rawserver import RawServer, http_response

# gpt-6.1-terra's rates (genai-prices lists no 12-hour write rate: the 12-hour one is OpenAI's
# published 2x input); a Claude at Anthropic's multiples (5 minutes 1.25x, 1 hour 2x)
TERRA = Price(input=1.0, output=5.0, cached_input=0.05, cache_write=1.25, cache_write_12h=2.0)
CLAUDE = Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75, cache_write_1h=6.0)
PRICES = PriceTable.default_table().with_prices({"terra": TERRA, "claude": CLAUDE})


def _written(total: int, thirty: int, twelve: int) -> dict[str, Any]:
    """OpenAI's input details of a call that read 1,000 tokens from the cache and wrote
    ``total``, split by retention."""
    split = {"ttl_30m_tokens": thirty, "ttl_12h_tokens": twelve}
    return {"cached_tokens": 1000, "cache_write_tokens": total, "cache_write_tokens_details": split}


@pytest.mark.parametrize("shape", ["chat", "responses"])
def test_openai_12_hour_writes_are_read_apart_from_30_minute_ones(shape: str) -> None:
    top, details = ("prompt", "prompt_tokens_details")
    if shape == "responses":
        top, details = ("input", "input_tokens_details")
    out = "completion" if shape == "chat" else "output"
    raw: dict[str, Any] = {f"{top}_tokens": 10000, f"{out}_tokens": 10}
    raw[details] = _written(6000, 2000, 4000)
    usage, _ = usage_from_payload(raw)
    assert usage is not None
    assert (usage.cached_input_tokens, usage.cache_write_input_tokens) == (1000, 6000)
    assert (usage.cache_write_12h_input_tokens, usage.cache_write_1h_input_tokens) == (4000, 0)
    # (3,000 plain + 1,000 read x 0.05 + 2,000 x 1.25 + 4,000 x 2.0 + 10 x 5) / 1e6
    assert TERRA.cost(usage) == pytest.approx((3000 + 50 + 2500 + 8000 + 50) / 1e6)
    absurd = {**raw, details: _written(6000, 2000, 2**31)}
    assert usage_from_payload(absurd)[0] is None  # (a count read: bounded)


@pytest.mark.parametrize("shape", ["chat", "responses"])
@pytest.mark.parametrize("thirty", [None, 2000])
def test_a_flat_12_hour_write_count_is_read_as_the_split_one(
    shape: str, thirty: int | None
) -> None:
    """A usage that gives the 12-hour writes beside the others in its input details
    (``cache_write_12h_tokens``, as OpenAI's usage API names them ``input_cache_write_12h_
    tokens``; a proxy's flattening of ``cache_write_tokens_details``) was read as no 12-hour
    write: priced at the 30-minute rate."""
    top, details = ("prompt", "prompt_tokens_details")
    if shape == "responses":
        top, details = ("input", "input_tokens_details")
    out = "completion" if shape == "chat" else "output"
    flat = {"cached_tokens": 1000, "cache_write_tokens": 6000, "cache_write_12h_tokens": 4000}
    if thirty is not None:
        flat["cache_write_30m_tokens"] = thirty
    raw: dict[str, Any] = {f"{top}_tokens": 10000, f"{out}_tokens": 10, details: flat}
    usage, _ = usage_from_payload(raw)
    assert usage is not None
    assert (usage.cached_input_tokens, usage.cache_write_input_tokens) == (1000, 6000)
    assert usage.cache_write_12h_input_tokens == 4000
    assert TERRA.cost(usage) == pytest.approx((3000 + 50 + 2500 + 8000 + 50) / 1e6)
    split = {**raw, details: {**flat, **_written(6000, 6000, 0)}}  # the split's word wins
    usage, _ = usage_from_payload(split)
    assert usage is not None
    assert usage.cache_write_12h_input_tokens == 0
    absurd = {**raw, details: {**flat, "cache_write_12h_tokens": 2**31}}
    assert usage_from_payload(absurd)[0] is None  # (a count read: bounded)


def test_a_price_without_a_12_hour_rate_says_so_and_uses_its_write_rate(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmguard_sdk.telemetry import _repeats

    monkeypatch.setattr(_repeats, "repeats", _repeats.RepeatedLog(background=False))
    usage = Usage(
        input_tokens=1000, cache_write_input_tokens=1000, cache_write_12h_input_tokens=1000
    )
    assert Price(input=1.0, output=1.0, cache_write=1.25).write_12h_rate == 1.25
    with caplog.at_level("WARNING", logger="llmguard_sdk"):
        assert Price(input=1.0, output=1.0, cache_write=1.25).cost(usage) == pytest.approx(1.25e-3)
    assert any("cache_write_12h" in r.getMessage() for r in caplog.records)
    assert TERRA.worst_case(1000, 0) == pytest.approx(2.0e-3)  # the dearest write counts


def test_the_shipped_table_prices_anthropics_1_hour_writes() -> None:
    """The shipped table had no 1-hour rate: an hour's write was priced at the 5-minute rate
    (1.25x input, not 2x) wherever it was the table used (Python 3.10, ``shipped_table()``)."""
    table = PriceTable.shipped_table()
    for model in ("claude-3-haiku", "claude-3-5-haiku", "claude-sonnet-4", "claude-opus-4"):
        price = table.price(model, provider="anthropic")
        assert price.write_1h_rate == pytest.approx(2 * price.input)


def _openai_body(details: dict[str, Any]) -> bytes:
    body = {
        "id": "c", "object": "chat.completion", "model": "terra",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hi"}}],
        "usage": {"prompt_tokens": 10000, "completion_tokens": 10,
                  "prompt_tokens_details": details},
    }  # fmt: skip
    return http_response(json.dumps(body).encode())


def _anthropic_body(usage: dict[str, Any]) -> bytes:
    body = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1000, "output_tokens": 10, **usage},
    }  # fmt: skip
    return http_response(json.dumps(body).encode())


def _cost(route: Any, head: bytes, request: dict[str, Any]) -> float:
    with RawServer(head) as raw:
        provider = route(
            raw.base_url, model="terra" if route is not AnthropicProvider else "claude"
        )
        guard = Guard(
            provider, budgets=Budgets([Budget(limit_usd=10.0)], prices=PRICES), environ={}
        )
        with guard:
            answer = guard.chat(max_tokens=20, **request)
            spent = guard.budget_status()[0]["spent_usd"]
    cost = answer.cost_usd
    assert cost is not None
    assert spent == pytest.approx(cost, abs=1e-9)  # the budget settled to it
    return float(cost)


_PLAIN = [{"role": "user", "content": "hi"}]
# 3,000 plain + 1,000 read at 0.05 + 6,000 written + 10 out at 5, in micro-USD
_OPENAI = 3000 + 50 + 50


@pytest.mark.parametrize(
    ("options", "rate"),
    [
        ({}, 1.25),
        ({"prompt_cache_options": {"ttl": "30m"}}, 1.25),
        # a maximum retention, independent of the writes' lifetime: billed alike
        ({"prompt_cache_retention": "24h"}, 1.25),
        ({"prompt_cache_options": {"ttl": "12h"}}, 2.0),
    ],
)
def test_openai_writes_are_priced_at_the_ttl_the_request_asked_for(
    options: dict[str, Any], rate: float
) -> None:
    """A usage that does not split its writes by retention: the request's
    ``prompt_cache_options.ttl`` is every breakpoint's minimum lifetime, so its writes'."""
    unsplit = {"cached_tokens": 1000, "cache_write_tokens": 6000}
    cost = _cost(
        OpenAICompatibleProvider,
        _openai_body(unsplit),
        {"messages": _PLAIN, "extra_body": options or None},
    )
    assert cost == pytest.approx((_OPENAI + 6000 * rate) / 1e6)


def test_openai_writes_split_by_the_usage_keep_their_split() -> None:
    split = _written(6000, 2000, 4000)
    options = {"prompt_cache_options": {"ttl": "12h"}}
    for extra in (None, options):  # (the usage's split wins over the request)
        cost = _cost(
            OpenAICompatibleProvider,
            _openai_body(split),
            {"messages": _PLAIN, "extra_body": extra},
        )
        assert cost == pytest.approx((_OPENAI + 2000 * 1.25 + 4000 * 2.0) / 1e6)


def _control(ttl: str | None) -> dict[str, str]:
    return {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}


def _marked(*ttls: str | None) -> list[dict[str, Any]]:
    """A system prompt and a user turn, each part a cache breakpoint of the TTL given."""
    parts = [
        {"type": "text", "text": f"part {i}", "cache_control": _control(ttl)}
        for i, ttl in enumerate(ttls)
    ]
    return [{"role": "system", "content": parts}, {"role": "user", "content": "hi"}]


# 1,000 plain + 2,000 read at 0.3 + 10 out at 15, in micro-USD
_CLAUDE = 3000 + 600 + 150


@pytest.mark.parametrize(
    ("ttls", "rate"),
    [
        ((None,), 3.75),
        (("5m", "1h"), 3.75),  # mixed, and the usage does not say which: the 5-minute rate
        (("1h",), 6.0),
        (("1h", "1h"), 6.0),
    ],
)
def test_anthropic_writes_are_priced_at_the_ttl_the_request_asked_for(
    ttls: tuple[str | None, ...], rate: float
) -> None:
    """A usage without ``cache_creation``'s split by TTL (an older API version, a proxy):
    the writes of a request whose every breakpoint asks for an hour are hour-long ones."""
    usage = {"cache_read_input_tokens": 2000, "cache_creation_input_tokens": 4000}
    cost = _cost(AnthropicProvider, _anthropic_body(usage), {"messages": _marked(*ttls)})
    assert cost == pytest.approx((_CLAUDE + 4000 * rate) / 1e6)


def test_anthropic_writes_split_by_the_usage_keep_their_split() -> None:
    split = {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 3000}
    usage = {
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 4000,
        "cache_creation": split,
    }
    cost = _cost(AnthropicProvider, _anthropic_body(usage), {"messages": _marked("1h", "5m")})
    assert cost == pytest.approx((_CLAUDE + 1000 * 3.75 + 3000 * 6.0) / 1e6)
