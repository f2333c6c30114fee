"""The shadow's built-in comparators on JSON nested past Python's recursion limit: a
RecursionError escaped them (``json.loads`` in ``json_valid``, ``exact`` and ``length``), so
each such pair was logged as a failed comparison and counted by none."""

from __future__ import annotations

import logging

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.models import ChatResponse
from llmguard_sdk.releases import COMPARATORS, Release, ReleasePlan, ShadowPolicy
from llmguard_sdk.testing import FakeProvider

DEEP = "[" * 100_000 + "]" * 100_000


def _called(arguments: str) -> ChatResponse:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return ChatResponse(text="", tool_calls=[call])


def test_deep_json_is_not_json_and_compares_as_text() -> None:
    deep, shallow = ChatResponse(text=DEEP), ChatResponse(text="[[]]")
    assert COMPARATORS["json_valid"](deep, deep) is None  # no JSON served: not judged
    assert COMPARATORS["json_valid"](shallow, deep) is False
    assert COMPARATORS["exact"](deep, deep) is True
    assert COMPARATORS["length"](deep, deep) is True
    served, same, other = _called(DEEP), _called(DEEP), _called("[" + DEEP + "]")
    assert COMPARATORS["exact"](served, same) is True
    assert COMPARATORS["exact"](served, other) is False
    assert COMPARATORS["json_valid"](served, same) is None
    assert COMPARATORS["json_valid"](_called("[[]]"), served) is False
    assert COMPARATORS["length"](served, same) is True


def test_arguments_nested_past_the_bound_compare_as_their_text() -> None:
    # 200 levels parse, but written back (json.dumps, from deeper in a stack) they could
    # raise RecursionError: past 64 levels arguments are compared as given
    nested, spaced = "[" * 200 + "]" * 200, "[ " * 200 + "]" * 200
    assert COMPARATORS["exact"](_called(nested), _called(nested)) is True
    assert COMPARATORS["exact"](_called(nested), _called(spaced)) is False
    assert COMPARATORS["json_valid"](_called(nested), _called(spaced)) is True
    shallow, shallow_spaced = "[" * 60 + "]" * 60, "[ " * 60 + "]" * 60
    assert COMPARATORS["exact"](_called(shallow), _called(shallow_spaced)) is True


def test_a_shadow_compares_deep_json_answers_without_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        FakeProvider(name="a", reply=lambda _: DEEP) as a,
        FakeProvider(name="b", reply=lambda _: DEEP) as b,
    ):
        plan = ReleasePlan(
            Release("bot", "v1", OpenAICompatibleProvider(a.base_url, model="m-2025-01-01")),
            candidate=Release(
                "bot", "v2", OpenAICompatibleProvider(b.base_url, model="m-2025-02-01")
            ),
            shadow=ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=None),
        )
        guard = Guard(release=plan, environ={}, telemetry=False)
        try:
            with caplog.at_level(logging.ERROR, logger="llmguard_sdk"):
                assert guard.chat([{"role": "user", "content": "nest"}]).text == DEEP
                shadow = guard.releases.shadow  # type: ignore[union-attr]
                assert shadow is not None
                assert shadow.drain(30.0)
            report = shadow.report()
        finally:
            guard.close()
    assert "comparator" not in caplog.text
    assert report["pairs"] == 1
    assert report["agreement"]["exact"] == 1.0
    assert report["agreement"]["length"] == 1.0
