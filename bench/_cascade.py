"""The cascade part of bench/routing.py: a small tier first, the large one when a check
rejects the answer, against every call on the large tier, on a labelled workload.

The workload: ``items`` arithmetic questions (``"What is 23 + 58? Answer in JSON."``), each
labelled with its answer and as easy or hard (``hard_share`` of them hard, spread evenly). Two
FakeProviders stand for the models, priced as ``gpt-4o-mini`` and ``gpt-4o`` by the SDK's
shipped price table: the small one answers the easy items right (``{"answer": 81}``) and the
hard ones wrong in a way the check sees (prose, no JSON); the large one answers every item
right. The cascade's check is :func:`~llmguard_sdk.router.json_schema` with the answer's
schema.

Both sides make one call per item through a Guard and count what the responses say they cost
(``cost_usd``: for an escalated call, the small tier's answer plus the large tier's) and how
many answers equal the label. ``cost_saved_share`` = 1 - cascade cost / all-large cost.
"""

from __future__ import annotations

import contextlib
import json
import re
from contextlib import ExitStack
from typing import Any

from llmguard_sdk import Cascade, Guard, OpenAICompatibleProvider, TaskRouter
from llmguard_sdk.router import json_schema
from llmguard_sdk.testing import FakeProvider

SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}}
_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def workload(items: int, hard_share: float) -> list[tuple[str, int, bool]]:
    """``items`` (question, label, hard) triples, deterministic, the hard ones spread evenly."""
    found = []
    for i in range(items):
        a, b = 10 + (i * 37) % 90, 10 + (i * 53) % 90
        hard = int((i + 1) * hard_share) > int(i * hard_share)
        found.append((f"Item {i}: What is {a} + {b}? Answer in JSON.", a + b, hard))
    return found


def _answer(body: dict[str, Any]) -> int:
    found = _QUESTION.search(body["messages"][-1]["content"])
    assert found is not None
    return int(found.group(1)) + int(found.group(2))


def cascade_bench(items: int, hard_share: float = 0.3) -> dict[str, Any]:
    """``{cost_saved_share, accuracy_all_large, accuracy_cascade}`` and the figures behind
    them (see the module docs)."""
    work = workload(items, hard_share)
    hard = {question for question, _label, is_hard in work if is_hard}

    def small_reply(body: dict[str, Any]) -> str:
        if body["messages"][-1]["content"] in hard:
            return "I am not sure, it could be around a hundred or so."
        return json.dumps({"answer": _answer(body)})

    with ExitStack() as stack:
        small = stack.enter_context(FakeProvider(model="gpt-4o-mini", reply=small_reply))
        large = stack.enter_context(
            FakeProvider(model="gpt-4o", reply=lambda b: json.dumps({"answer": _answer(b)}))
        )
        routes = [
            OpenAICompatibleProvider(small.base_url, model="gpt-4o-mini", name="small"),
            OpenAICompatibleProvider(large.base_url, model="gpt-4o", name="large"),
        ]
        sides = {}
        for side, default in (("all_large", "large"), ("cascade", "cascade")):
            router = TaskRouter(
                {"small": ["small"], "large": ["large"]},
                cascades={"cascade": Cascade(["small", "large"], checks=[json_schema(SCHEMA)])},
                default=default,
            )
            guard = stack.enter_context(Guard(routes, tasks=router, environ={}, telemetry=False))
            sides[side] = _run(guard, work)
    all_large, cascade = sides["all_large"], sides["cascade"]
    return {
        "items": items,
        "hard_share": hard_share,
        "cost_saved_share": round(1 - cascade["cost_usd"] / all_large["cost_usd"], 4),
        "accuracy_all_large": all_large["accuracy"],
        "accuracy_cascade": cascade["accuracy"],
        "escalation_rate": cascade["escalation_rate"],
        "cost_all_large_usd": round(all_large["cost_usd"], 8),
        "cost_cascade_usd": round(cascade["cost_usd"], 8),
        "models": {"small": "gpt-4o-mini", "large": "gpt-4o"},
    }


def _run(guard: Guard, work: list[tuple[str, int, bool]]) -> dict[str, Any]:
    cost, right, escalated = 0.0, 0, 0
    for question, label, _hard in work:
        answer = guard.chat([{"role": "user", "content": question}], max_tokens=64)
        assert answer.cost_usd is not None, "a priced model has a cost"
        cost += answer.cost_usd
        escalated += bool(answer.metadata.get("cascade", {}).get("escalated_from"))
        with contextlib.suppress(ValueError, AttributeError):  # prose: a wrong answer
            right += json.loads(answer.text).get("answer") == label
    return {
        "cost_usd": cost,
        "accuracy": round(right / len(work), 4),
        "escalation_rate": round(escalated / len(work), 4),
    }
