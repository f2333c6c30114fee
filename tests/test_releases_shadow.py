"""The shadow's built-in comparators judge what an answer is, its text and its tool calls (a
FakeProvider's Responses endpoint answers a call of the tool its request requires)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.models import ChatResponse, Timings
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.releases import Release, ReleasePlan, ShadowPolicy
from llmguard_sdk.releases.shadow import COMPARATORS
from llmguard_sdk.testing import FakeProvider


def _tool(name: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def _release(fake: FakeProvider, version: str, model: str, tool: str) -> Release:
    """A release whose calls that name no tools call ``tool`` (the call's own tools win)."""
    route = OpenAIResponsesProvider(fake.base_url, model=model, name=f"r{version}")
    return Release(
        "bot", version, route, parameters={"tools": [_tool(tool)], "tool_choice": "required"}
    )


def test_the_shadow_tells_apart_answers_that_call_other_tools() -> None:
    """Two answers with no text were in agreement by ``exact`` whatever tools they called
    (and by ``json_valid`` and ``length`` too): a candidate calling the wrong tool on every
    call agreed with the release on all of them."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        plan = ReleasePlan(
            _release(a, "v1", "fake-a-2025-01-01", "lookup"),
            candidate=_release(b, "v2", "fake-b-2025-02-01", "delete_account"),
            shadow=ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=None),
        )
        guard = Guard(release=plan, environ={}, telemetry=False)
        try:
            user = [{"role": "user", "content": "find my order"}]
            for _ in range(2):  # each release's own tool: other calls
                assert guard.chat(user).tool_calls[0]["function"]["name"] == "lookup"  # type: ignore[index]
            for _ in range(2):  # the call's own tools: the same call from both
                guard.chat(user, tools=[_tool("lookup")], tool_choice="required")
            shadow = guard.releases.shadow  # type: ignore[union-attr]
            assert shadow is not None
            assert shadow.drain(30.0)
            report = shadow.report()
        finally:
            guard.close()
    assert report["pairs"] == 4
    assert report["agreement"]["exact"] == 0.5
    assert report["agreement"]["length"] == 0.5  # "lookup" and "delete_account" differ
    assert report["agreement"]["json_valid"] == 1.0  # every call's arguments parse


def _answer(text: str = "", *calls: tuple[str, str], index: bool = False) -> ChatResponse:
    """An answer with ``text`` and tool ``calls`` (name, arguments), ids of their own."""
    tool_calls = [
        {
            "id": f"call_{id(text)}_{i}",
            **({"index": i} if index else {}),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        for i, (name, arguments) in enumerate(calls)
    ]
    return ChatResponse(text=text, tool_calls=tool_calls or None)


ARGS = json.dumps({"q": "order 7", "limit": 3})
SAME_ARGS = '{ "limit": 3,\n  "q": "order 7" }'  # other key order, other whitespace


JSON = '{"order": 7, "status": "shipped"}'


def test_a_spend_cap_that_cannot_price_the_candidate_says_so_as_the_guard_is_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A candidate's model without a price reserved nothing and spent nothing, as the cap
    counted it: a shadow with ``max_cost_usd`` sent every copy, past the cap, and said
    nothing. The Guard says so as it is built, naming the route and model."""
    priced = OpenAICompatibleProvider("http://127.0.0.1:9", model="a-2025-01-01", name="a")
    unpriced = OpenAICompatibleProvider("http://127.0.0.1:9", model="b-2025-01-01", name="b")
    table = PriceTable({"a-2025-01-01": Price(input=1.0, output=1.0)})

    def build(candidate: OpenAICompatibleProvider, cap: float | None) -> list[str]:
        caplog.clear()
        plan = ReleasePlan(
            Release("bot", "v1", priced),
            candidate=Release("bot", "v2", candidate),
            shadow=ShadowPolicy(max_cost_usd=cap),
        )
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            Guard(release=plan, environ={}, prices=table, telemetry=False).close()
        return [r.getMessage() for r in caplog.records if "max_cost_usd" in r.getMessage()]

    (said,) = build(unpriced, 1.0)
    assert "b/b-2025-01-01" in said
    assert build(unpriced, None) == []  # no cap: nothing to bound
    assert build(priced, 1.0) == []


LONG = " ".join(["word"] * 1500)  # a 1,500-token answer: $0.0015 at $1 per million


def _long_answers(cap: float, calls: int) -> tuple[dict[str, Any], list[Any]]:
    """The shadow's report and the requests its candidate got, the candidate answering
    :data:`LONG` to calls without ``max_tokens``, both models at $1 per million tokens."""
    with FakeProvider(name="a") as a, FakeProvider(name="b", reply=lambda body: LONG) as b:
        current = OpenAICompatibleProvider(a.base_url, model="a-2025-01-01", name="a")
        candidate = OpenAICompatibleProvider(b.base_url, model="b-2025-01-01", name="b")
        plan = ReleasePlan(
            Release("bot", "v1", current),
            candidate=Release("bot", "v2", candidate),
            shadow=ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=cap),
        )
        table = PriceTable({"a-2025-01-01": Price(1.0, 1.0), "b-2025-01-01": Price(1.0, 1.0)})
        guard = Guard(release=plan, environ={}, prices=table, telemetry=False)
        try:
            for _ in range(calls):
                guard.chat([{"role": "user", "content": "hello"}])
            shadow = guard.releases.shadow  # type: ignore[union-attr]
            assert shadow is not None
            assert shadow.drain(30.0)
            return shadow.report(), b.requests
        finally:
            guard.close()


def test_a_copy_without_max_tokens_reserves_its_input_and_an_output_allowance() -> None:
    """A copy of a call without ``max_tokens`` reserved the dearest copy so far: nothing
    for the first, so a long first answer went past the cap ($0.0015 spent against a
    $0.0005 cap). A copy reserves what a budgeted call does, its input (for each attempt
    its Guard may make) and its output limit at the candidate's prices, and is not sent
    when that does not fit. Its output limit is the served answer's length and a margin
    (the served "Echo: hello", 2 tokens: 66), so the candidate's long answer is cut there."""
    report, sent = _long_answers(0.00005, 3)
    assert report["spent_usd"] <= 0.00005
    assert sent == []
    assert report["skipped_budget"] == 3
    report, sent = _long_answers(0.0002, 3)  # room for two copies' reservations (~$0.00009)
    assert report["spent_usd"] <= 0.0002
    assert report["pairs"] == 2
    assert report["skipped_budget"] == 1
    assert [request.body.get("max_tokens") for request in sent] == [66, 66]


@pytest.mark.parametrize(
    ("served", "shadow", "exact", "json_valid"),
    [
        (_answer("", ("lookup", ARGS)), _answer("", ("search", ARGS)), False, True),
        (_answer("", ("lookup", ARGS)), _answer("", ("lookup", '{"q": "x"}')), False, True),
        (_answer("", ("lookup", ARGS)), _answer("", ("lookup", SAME_ARGS), index=True), True, True),
        (_answer("", ("lookup", ARGS)), _answer(""), False, False),
        # the candidate's arguments are JSON where the release's are; its text is for `exact`
        (_answer("", ("lookup", ARGS)), _answer("No.", ("lookup", ARGS)), False, True),
        (_answer("", ("lookup", ARGS)), _answer("", ("lookup", "{broken")), False, False),
        # the release's own arguments are no JSON: nothing to keep, the pair says nothing
        (_answer("", ("lookup", "{broken")), _answer("", ("lookup", "{broken")), True, None),
        (
            _answer("", ("a", "{}"), ("b", ARGS)),
            _answer("", ("b", SAME_ARGS), ("a", "{ }")),  # parallel calls, in another order
            True,
            True,
        ),
        (_answer("", ("a", "{}"), ("a", "{}")), _answer("", ("a", "{}")), False, True),
        (_answer(" Hello "), _answer("Hello"), True, None),  # prose: no JSON to judge
        (_answer("Hello"), _answer("Bye"), False, None),
        (_answer(""), _answer(""), True, None),  # two empty answers: neither is JSON
        (_answer(JSON), _answer('{"order": 7}'), False, True),
        (_answer(JSON), _answer("Your order shipped."), False, False),
        (_answer(JSON), _answer(""), False, False),
        (_answer(JSON), _answer("", ("lookup", ARGS)), False, False),  # no JSON text
        (_answer("Your order shipped."), _answer(JSON), False, None),
    ],
)
def test_exact_and_json_valid_judge_text_and_tool_calls(
    served: ChatResponse, shadow: ChatResponse, exact: bool, json_valid: bool | None
) -> None:
    """``exact`` compares the text (stripped) and the tool calls, by name and arguments (parsed
    JSON where they parse: key order and whitespace aside; ids and indexes aside; parallel
    calls in any order). ``json_valid`` asks whether the candidate's answer is JSON where the
    release's is (its text, its calls' arguments); a release's answer with no JSON (prose, an
    empty answer, broken arguments) says nothing. It said two empty answers, and any two
    prose answers, agreed: a prose feature's shadow showed 100 % JSON agreement."""
    assert COMPARATORS["exact"](served, shadow) is exact
    assert COMPARATORS["exact"](shadow, served) is exact
    assert COMPARATORS["json_valid"](served, shadow) is json_valid


def test_exact_tells_a_refusal_from_an_empty_answer_and_from_another_refusal() -> None:
    """A refusal has no text (OpenAI's is in ``metadata["refusal"]``): it agreed with an empty
    answer and with any other refusal."""
    refused = ChatResponse(text="", metadata={"refusal": "I can't help with that."})
    other = ChatResponse(text="", metadata={"refusal": "No."})
    same = ChatResponse(text="", metadata={"refusal": " I can't help with that. "})
    exact = COMPARATORS["exact"]
    assert not exact(refused, _answer(""))
    assert not exact(_answer(""), refused)
    assert not exact(refused, other)
    assert exact(refused, same)


def test_length_counts_tool_calls() -> None:
    """Two answers without text were always of the same length, whatever they called."""
    long = json.dumps({"q": "x" * 200})
    assert not COMPARATORS["length"](_answer("", ("lookup", "{}")), _answer("", ("lookup", long)))
    assert COMPARATORS["length"](_answer("", ("lookup", ARGS)), _answer("", ("lookup", SAME_ARGS)))
    assert COMPARATORS["length"](_answer("a" * 100), _answer("a" * 110))
    assert not COMPARATORS["length"](_answer("a" * 100), _answer("a" * 130))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_length_judges_a_pair_the_same_both_ways(first: str, second: str) -> None:
    """``length`` measured the difference against the served answer's length: 100 and 124
    characters agreed with the longer one served (24 within 20 % of 124), not with the
    shorter (24 beyond 20 % of 100). It is within 20 % of the longer of the two."""
    length = COMPARATORS["length"]
    assert length(_answer(first), _answer(second)) == length(_answer(second), _answer(first))


def test_length_is_within_a_fifth_of_the_longer_answer() -> None:
    length = COMPARATORS["length"]
    for served, shadow in ((100, 124), (124, 100), (100, 125), (125, 100)):
        assert length(_answer("a" * served), _answer("a" * shadow))
    for served, shadow in ((100, 126), (126, 100), (0, 1), (1, 0)):
        assert not length(_answer("a" * served), _answer("a" * shadow))
    assert length(_answer(""), _answer(""))


def _timed(total_s: float) -> ChatResponse:
    return ChatResponse(text="same", timings=Timings(total_s=total_s))


@pytest.mark.parametrize(
    ("served_s", "shadow_s", "kept"),
    [
        (0.0011, 0.003, True),  # 2 ms slower at millisecond latencies: within the slack
        (0.0011, 0.052, False),  # past the slack and the ratio
        (1.0, 1.49, True),  # within 1.5x
        (1.0, 1.6, False),  # past 1.5x and the slack
        (0.2, 0.28, True),  # 1.4x
    ],
)
def test_latency_is_slow_only_past_the_ratio_and_the_canary_slack(
    served_s: float, shadow_s: float, kept: bool
) -> None:
    # as a canary's slow call (CanaryPolicy.latency_slack_s): a pure 1.5x ratio called a
    # candidate 2 ms slower than a 1.1 ms answer a latency regression in the report
    assert COMPARATORS["latency"](_timed(served_s), _timed(shadow_s)) is kept
