"""Task routing and a cascade: rules send some calls straight to a tier, the rest try the
small model first and escalate to the large one when its answer fails a check.

Runs offline: two local FakeProviders stand in for gpt-4o-mini and gpt-4o (priced by the
shipped price table). The small one answers simple sums in JSON and everything else in prose,
which the cascade's JSON-schema check rejects; the large one always answers in JSON. Each
answer says which tier served it, why the cascade escalated and what the call cost in all
(an escalated call pays for both answers). A cascade's stream is buffered.
"""

import json

from llmguard_sdk import Cascade, Guard, OpenAICompatibleProvider, Rule, TaskRouter
from llmguard_sdk.router import finish_reason, json_schema
from llmguard_sdk.testing import FakeProvider

SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "number"}}}


def small_model(body: dict) -> str:
    question = body["messages"][-1]["content"]
    if question.startswith("What is") and "+" in question:
        left, right = question.removeprefix("What is").rstrip("?").split("+")
        return json.dumps({"answer": int(left) + int(right)})
    return "Hmm, that one is hard to say."


def large_model(body: dict) -> str:
    return json.dumps({"answer": 42})


with (
    FakeProvider(model="gpt-4o-mini", reply=small_model) as small,
    FakeProvider(model="gpt-4o", reply=large_model) as large,
):
    router = TaskRouter(
        tiers={"small": ["mini"], "large": ["big"]},
        cascades={
            "auto": Cascade(["small", "large"], checks=[json_schema(SCHEMA), finish_reason()])
        },
        rules=[Rule("large", feature="legal"), Rule("large", min_tokens=2000)],
        default="auto",
    )
    guard = Guard(
        [
            OpenAICompatibleProvider(small.base_url, model="gpt-4o-mini", name="mini"),
            OpenAICompatibleProvider(large.base_url, model="gpt-4o", name="big"),
        ],
        tasks=router,
    )
    with guard:
        for question, feature in [
            ("What is 2 + 3?", None),
            ("What is the meaning of life?", None),
            ("Is this clause enforceable?", "legal"),
        ]:
            answer = guard.chat([{"role": "user", "content": question}], feature=feature)
            cascade = answer.metadata.get("cascade")
            tried = cascade["escalated_from"] if cascade else []
            why = f", escalated from {tried[0]['tier']}: {tried[0]['reason']}" if tried else ""
            print(f"{question!r:32} -> {answer.route} {answer.text}{why}, ${answer.cost_usd:.6f}")
        # a cascade's stream is buffered: the answer is checked, then delivered as one chunk
        with guard.chat([{"role": "user", "content": "Why?"}], stream=True) as stream:
            chunks = [chunk.text for chunk in stream]
        print(f"streamed in {len(chunks)} chunk: {chunks[0]} from {stream.response.route}")
