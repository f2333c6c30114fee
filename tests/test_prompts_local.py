"""The local llama.cpp route keeps its KV prefix between calls, so builder prompts reuse it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from llmguard_sdk import Guard, PromptBuilder
from tests.localmodel import loaded_model

pytestmark = pytest.mark.local_model

RULES = "\n".join(
    f"Rule {i}: bicycles bought in store {i % 4 + 1} may be returned within {14 + i % 3 * 7} days."
    for i in range(12)
)


@pytest.fixture(scope="module")
def guard() -> Iterator[Guard]:
    with (
        loaded_model(n_ctx=1024, wait=60) as provider,
        Guard(provider, timeout=60, environ={}) as guard,
    ):
        yield guard


def usage_of(guard: Guard, messages: list[dict[str, str]]) -> tuple[int, int]:
    answer = guard.chat(messages, temperature=0, max_tokens=4)
    assert answer.usage is not None
    return answer.usage.input_tokens, answer.usage.cached_input_tokens


def test_builder_prompts_reuse_the_static_prefix_on_the_local_model(guard: Guard) -> None:
    builder = PromptBuilder(
        "returns", instructions="Answer from these rules.\n" + RULES, drift=None
    )
    prompts = [
        [
            m.model_dump(exclude_none=True)
            for m in builder.build(q, context=f"now: 10:0{i}").messages
        ]
        for i, q in enumerate(("Can I return a bike?", "How long do returns take?"))
    ]
    usage_of(guard, prompts[0])
    total, cached = usage_of(guard, prompts[1])
    assert cached > 0.8 * total  # only the per-call tail is computed again
    assert cached < total


def test_a_naive_prompt_with_the_time_first_reuses_almost_nothing(guard: Guard) -> None:
    for _ in range(2):
        stamp = time.strftime("%H:%M:%S") + f".{time.monotonic_ns() % 1_000_000:06d}"
        messages = [
            {
                "role": "system",
                "content": f"Current time: {stamp}.\nAnswer from these rules.\n{RULES}",
            },
            {"role": "user", "content": "Can I return a bike?"},
        ]
        total, cached = usage_of(guard, messages)
    assert cached < 0.1 * total
