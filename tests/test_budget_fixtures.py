"""Golden usage fixtures: one recorded usage object per provider shape, each with its cost
worked out by hand from the provider's published prices (``formula`` in the file).

Each fixture is priced from the usage the SDK reads; the chat and messages fixtures, streamed
and not, are also served by a loopback server through the real providers and a Guard with a
budget: the hold covers the call's worst case and the settled spend equals the fixture's cost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk import Guard
from llmguard_sdk._state.steps import in_place
from llmguard_sdk.budget import Budget, Budgets, MemoryBudgetBackend, PriceTable
from llmguard_sdk.budget.policy import NANO, nano
from llmguard_sdk.models import Usage
from llmguard_sdk.providers import AnthropicProvider, OpenAICompatibleProvider
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.providers.wire import usage_from_payload

from .conftest import genai_prices_or_skip
from .rawserver import RawServer, http_response, sse_head

genai_prices_or_skip()
FIXTURES = sorted((Path(__file__).parent / "fixtures" / "usage").glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _recorded_usage(fixture: dict[str, Any]) -> Usage | None:
    """The usage a fixture's body or events carry, read as the providers read it."""
    shape = fixture["shape"]
    if "body" in fixture:
        body = fixture["body"]
        return usage_from_payload(body["usage"], service_tier=body.get("service_tier"))[0]
    events = fixture["events"]
    if shape == "openai_chat_stream":
        last = next(e for e in reversed(events) if e.get("usage"))
        return usage_from_payload(last["usage"], service_tier=last.get("service_tier"))[0]
    if shape == "openai_responses_stream":
        done = next(e["response"] for e in events if e["type"] == "response.completed")
        return usage_from_payload(done["usage"], service_tier=done.get("service_tier"))[0]
    merged: dict[str, Any] = {}  # Anthropic: message_start's usage, then message_delta's
    for event in events:
        raw = event.get("usage") or event.get("message", {}).get("usage") or {}
        merged.update({k: v for k, v in raw.items() if v is not None})
    return usage_from_payload(merged)[0]


def test_every_shape_has_a_fixture() -> None:
    shapes = {_load(path)["shape"] for path in FIXTURES}
    assert shapes >= {
        "openai_chat",
        "openai_chat_stream",
        "openai_responses",
        "openai_responses_stream",
        "anthropic",
        "anthropic_stream",
    }


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_each_fixture_costs_what_the_provider_bills(path: Path) -> None:
    fixture = _load(path)
    usage = _recorded_usage(fixture)
    assert usage is not None
    cost = PriceTable.default_table().cost(usage, fixture["model"], provider=fixture["route"])
    assert cost.usd == pytest.approx(fixture["expected_usd"], rel=1e-12)


def test_usage_shapes_are_read_whole() -> None:
    by_name = {path.stem: _load(path) for path in FIXTURES}
    chat = _recorded_usage(by_name["openai_chat_gpt5_reasoning_cached"])
    assert chat == Usage(
        input_tokens=12000,
        output_tokens=3000,
        cached_input_tokens=8192,
        reasoning_tokens=2304,
        service_tier="default",
    )
    responses = _recorded_usage(by_name["openai_responses_o4mini_reasoning_cached"])
    assert responses is not None
    assert (responses.input_tokens, responses.cached_input_tokens) == (20000, 16000)
    assert (responses.cache_write_input_tokens, responses.reasoning_tokens) == (0, 4096)
    # OpenAI's cache writes (input_tokens_details / prompt_tokens_details.cache_write_tokens),
    # billed above an input token on newer models (they were read as plain input)
    for name, read, written in [
        ("openai_responses_gpt61terra_cache_write", 2000, 6000),
        ("openai_chat_stream_gpt61terra_cache_write", 1000, 4000),
    ]:
        usage = _recorded_usage(by_name[name])
        assert usage is not None
        assert (usage.cached_input_tokens, usage.cache_write_input_tokens) == (read, written)
        assert usage.cache_write_1h_input_tokens == usage.cache_write_12h_input_tokens == 0
    anthropic = _recorded_usage(by_name["anthropic_messages_sonnet45_cache_5m_1h"])
    assert anthropic is not None
    assert anthropic.input_tokens == 1500 + 40000 + 10000  # every input token, once
    assert (anthropic.cache_write_input_tokens, anthropic.cache_write_1h_input_tokens) == (
        10000,
        6000,
    )
    batch = _recorded_usage(by_name["anthropic_batch_sonnet45"])
    assert batch is not None
    assert batch.service_tier == "batch"


class _Recording(MemoryBudgetBackend):
    """The in-memory backend, noting every amount it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[int] = []

    def reserve(self, /, rid: str, specs: Any, **hold: Any) -> Any:
        result = super().reserve(rid, specs, **hold)
        if result.allowed:
            self.held.append(result.amount)
        return result

    reserve_steps, areserve = in_place(reserve)


def _served(fixture: dict[str, Any]) -> tuple[bytes, tuple[bytes, ...]]:
    if "body" in fixture:
        return http_response(json.dumps(fixture["body"]).encode()), ()
    lines = []
    for event in fixture["events"]:
        kind = f"event: {event['type']}\n" if fixture["shape"] == "anthropic_stream" else ""
        lines.append(f"{kind}data: {json.dumps(event)}\n\n")
    if fixture["shape"] == "openai_chat_stream":
        lines.append("data: [DONE]\n\n")
    if fixture["shape"] == "openai_responses_stream":
        lines = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in fixture["events"]]
    return sse_head(), ("".join(lines).encode(),)


SERVED = [p for p in FIXTURES if _load(p)["shape"] != "unserved"]


@pytest.mark.parametrize("path", SERVED, ids=lambda p: p.stem)
def test_a_budgeted_call_holds_its_worst_case_and_settles_to_the_bill(path: Path) -> None:
    fixture = _load(path)
    stream = fixture["shape"].endswith("_stream")
    usage = _recorded_usage(fixture)
    assert usage is not None
    head, parts = _served(fixture)
    # a prompt of at least as many tokens as the recorded call read (the hold is sized from
    # the prompt the SDK counts), and the recorded call's output limit: reasoning and
    # thinking count against max_completion_tokens like the visible answer
    prompt = " hello" * usage.input_tokens
    limit = fixture["max_completion_tokens"]
    assert usage.output_tokens <= limit
    backend = _Recording()
    with RawServer(head, parts) as raw:
        kinds: dict[str, Any] = {
            "anthropic": AnthropicProvider,
            "openai_responses": OpenAIResponsesProvider,
        }
        kind = kinds.get(fixture["shape"].removesuffix("_stream"), OpenAICompatibleProvider)
        route = kind(raw.base_url, model=fixture["model"], name=fixture["route"])
        guard = Guard(route, budgets=Budgets([Budget(limit_usd=100.0)]), environ={}, timeout=30)
        spend = guard._stages.spend
        assert spend is not None
        spend.backend = backend
        with guard:
            extra = {"service_tier": fixture["service_tier"]} if "service_tier" in fixture else None
            messages = [{"role": "user", "content": prompt}]
            if stream:
                with guard.chat(
                    messages, stream=True, max_completion_tokens=limit, extra_body=extra
                ) as chunks:
                    "".join(c.text for c in chunks)
                answer = chunks.response
            else:
                answer = guard.chat(messages, max_completion_tokens=limit, extra_body=extra)
            status = spend.status()
    assert answer is not None
    assert answer.usage is not None
    tokens: tuple[str, ...] = (
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "reasoning_tokens",
    )
    tokens += ("cache_write_input_tokens", "cache_write_1h_input_tokens")
    tokens += ("cache_write_12h_input_tokens",)
    assert [getattr(answer.usage, t) for t in tokens] == [getattr(usage, t) for t in tokens]
    assert answer.cost_usd == pytest.approx(fixture["expected_usd"], rel=1e-12)
    (held,) = backend.held
    assert held >= nano(fixture["expected_usd"])  # the hold covered the bill
    (row,) = status
    assert row["spent_usd"] == nano(fixture["expected_usd"]) / NANO  # settled to the bill
    assert row["held_usd"] == 0


_COUNT = st.integers(0, 10**7)
_JUNK = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.floats(), st.integers(-5, -1))


@settings(max_examples=200, deadline=None)
@given(
    plain=_COUNT,
    read=_COUNT,
    short=_COUNT,
    hour=_COUNT,
    output=_COUNT,
    tier=st.sampled_from(["standard", "batch", "priority", None]),
)
def test_anthropic_usage_counts_every_input_token_once(
    plain: int, read: int, short: int, hour: int, output: int, tier: str | None
) -> None:
    raw: dict[str, Any] = {
        "input_tokens": plain,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": short + hour,
        "cache_creation": {"ephemeral_5m_input_tokens": short, "ephemeral_1h_input_tokens": hour},
        "output_tokens": output,
    }
    if tier is not None:
        raw["service_tier"] = tier
    usage = usage_from_payload(raw)[0]
    assert usage is not None
    assert usage.input_tokens == plain + read + short + hour
    assert (usage.cached_input_tokens, usage.cache_write_input_tokens) == (read, short + hour)
    assert usage.cache_write_1h_input_tokens == hour
    assert usage.service_tier == tier


@settings(max_examples=200, deadline=None)
@given(
    prompt=_COUNT,
    cached=_COUNT,
    written=st.one_of(st.none(), _COUNT),
    completion=_COUNT,
    reasoning=_COUNT,
    responses=st.booleans(),
)
def test_openai_usage_keeps_cached_and_reasoning_within_their_totals(
    prompt: int, cached: int, written: int | None, completion: int, reasoning: int, responses: bool
) -> None:
    """Cache reads and writes (``cache_write_tokens``, absent from older answers) are among
    the input tokens, each counted once: together never more than the input."""
    details: dict[str, Any] = {"cached_tokens": cached}
    if written is not None:
        details["cache_write_tokens"] = written
    if responses:
        raw: dict[str, Any] = {
            "input_tokens": prompt,
            "input_tokens_details": details,
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
        }
    else:
        raw = {
            "prompt_tokens": prompt,
            "prompt_tokens_details": details,
            "completion_tokens": completion,
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        }
    usage = usage_from_payload(raw, service_tier="flex")[0]
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (prompt, completion)
    assert usage.cached_input_tokens == min(cached, prompt)
    assert usage.reasoning_tokens == min(reasoning, completion)
    assert usage.cache_write_input_tokens == min(written or 0, prompt - min(cached, prompt))
    assert usage.cache_write_1h_input_tokens == 0
    assert usage.service_tier == "flex"


@settings(max_examples=300, deadline=None)
@given(
    raw=st.dictionaries(
        st.sampled_from(
            [
                "prompt_tokens",
                "completion_tokens",
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
                "cache_creation",
                "prompt_tokens_details",
                "input_tokens_details",
                "output_tokens_details",
                "service_tier",
                "cost",
            ]
        ),
        st.one_of(_JUNK, _COUNT, st.dictionaries(st.text(max_size=30), _JUNK, max_size=3)),
    )
)
def test_a_malformed_usage_object_never_raises(raw: dict[str, Any]) -> None:
    usage, cost = usage_from_payload(raw)
    assert usage is None or usage.input_tokens >= usage.cached_input_tokens
    assert cost is None or cost >= 0
