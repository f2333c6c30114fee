"""FakeProvider's emulated prefix cache (OpenAI-style) and cached tokens through the Guard."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import Guard, PromptBuilder
from llmguard_sdk.testing import FakeProvider

SYSTEM = "You answer questions about the shop handbook and cite its rules. " * 10


def ask(guard: Guard, system: str, question: str, *, stream: bool = False) -> tuple[int, int]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    if stream:
        with guard.chat(messages, stream=True) as chunks:
            for _ in chunks:
                pass
        usage = chunks.response.usage if chunks.response else None
    else:
        usage = guard.chat(messages).usage
    assert usage is not None
    return usage.input_tokens, usage.cached_input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_the_common_prefix_with_earlier_requests_is_reported_cached(
    make_guard: Callable[..., Guard], stream: bool
) -> None:
    with FakeProvider(prefix_cache=True) as api:
        guard = make_guard(api)
        system_tokens = len(SYSTEM.split()) + 4
        first = ask(guard, SYSTEM, "Where is my order?", stream=stream)
        second = ask(guard, SYSTEM, "Can I return it?", stream=stream)
        third = ask(guard, "Now: 10:31. " + SYSTEM, "Can I return it?", stream=stream)
        assert first == (system_tokens + 4 + 4, 0)
        # the system message, the user message's role and opening token
        assert second == (system_tokens + 4 + 4, system_tokens + 2)
        assert third[1] == 2  # a changed first word: only the framing before it is shared
        stats = api.stats
        assert stats.cached_input_tokens == second[1] + third[1]
        api.clear_prefix_cache()
        assert ask(guard, SYSTEM, "Can I return it?")[1] == 0


def test_without_prefix_cache_nothing_is_cached_and_the_minimum_applies(
    make_guard: Callable[..., Guard],
) -> None:
    with (
        FakeProvider() as plain,
        FakeProvider(prefix_cache=True, prefix_cache_min_tokens=500) as big,
    ):
        for api in (plain, big):
            guard = make_guard(api)
            ask(guard, SYSTEM, "one")
            assert ask(guard, SYSTEM, "two")[1] == 0
    with pytest.raises(ValueError, match="prefix_cache_min_tokens"):
        FakeProvider(prefix_cache_min_tokens=-1)


def test_tools_are_part_of_the_prefix(make_guard: Callable[..., Guard]) -> None:
    tool = {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}
    other = {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}}
    with FakeProvider(prefix_cache=True) as api:
        guard = make_guard(api)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q"}]
        guard.chat(messages, tools=[tool])
        same = guard.chat(messages, tools=[tool]).usage
        changed = guard.chat(messages, tools=[other]).usage
    assert same is not None
    assert changed is not None
    assert same.cached_input_tokens > 0
    assert changed.cached_input_tokens == 0


def test_builder_prompts_share_their_prefix_and_naive_ones_do_not(
    make_guard: Callable[..., Guard],
) -> None:
    builder = PromptBuilder("handbook", instructions=SYSTEM, drift=None)
    with FakeProvider(prefix_cache=True) as api:
        guard = make_guard(api)
        for i, question in enumerate(("One?", "Two?", "Three?")):
            guard.chat(request=builder.build(question, context=f"now: 10:0{i}").request())
        built = api.stats
        api.reset_stats()
        api.clear_prefix_cache()
        for i, question in enumerate(("One?", "Two?", "Three?")):
            guard.chat(
                [
                    {"role": "system", "content": f"Now: 10:0{i}. {SYSTEM}"},
                    {"role": "user", "content": question},
                ]
            )
        naive = api.stats
    assert built.cached_input_tokens / built.input_tokens > 0.6
    assert naive.cached_input_tokens / naive.input_tokens < 0.05
