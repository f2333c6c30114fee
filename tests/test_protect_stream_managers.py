"""``@guard.protect`` on a function that returns an SDK's stream manager
(``client.chat.completions.stream(...)``, ``client.messages.stream(...)``): the stream entered
is watched as a returned stream is; and a returned stream closed early reports what it used so
far."""

from __future__ import annotations

import gc
from collections.abc import Callable, Generator
from typing import Any

import anthropic
import openai
import pytest

from llmguard_sdk import (
    CallEvent,
    Guard,
    ProviderUnavailableError,
    RetryPolicy,
    count_request_tokens,
    count_text_tokens,
)
from llmguard_sdk.retry.budget import MemoryRetryBudget, RetryBudgetPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_protect_returned_streams import protected_stream

USAGE: Any = {"include_usage": True}
MESSAGES: Any = USER
FAST_TWICE = RetryPolicy(attempts=2, base=0.001, cap=0.002)
FAST_THRICE = RetryPolicy(attempts=3, base=0.001, cap=0.002)


def claude_stream(claude: Any) -> tuple[list[CallEvent], Callable[[], Any]]:
    """The events of a Guard, and a function it protects returning ``claude``'s stream
    manager of an answer to :data:`USER`."""
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def ask() -> Any:
        return claude.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES)

    return events, ask


def test_an_openai_stream_manager_is_watched_until_its_end(oai: Any) -> None:
    # the call was reported "ok" without usage as the manager was returned, before a request
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def ask() -> Any:
        return oai.chat.completions.stream(model="gpt-test", messages=USER, stream_options=USAGE)

    manager = ask()
    assert events == []
    with manager as stream:
        assert events == []  # the call is open while the stream is read
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "content.done" in kinds
    assert final.choices[0].message.content == "Echo: hello there"
    assert [(e.kind, e.outcome, e.model, e.provider) for e in events] == [
        ("protect", "ok", "gpt-test", "openai")
    ]
    usage = events[0].usage
    assert usage is not None
    assert final.usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (
        final.usage.prompt_tokens,
        final.usage.completion_tokens,
        False,
    )


def test_a_responses_stream_manager_is_watched(oai: Any) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def ask() -> Any:
        return oai.responses.stream(model="gpt-test", input="hello there")

    with ask() as stream:
        response = stream.get_final_response()
    assert response.usage is not None
    assert [(e.outcome, e.provider) for e in events] == [("ok", "openai")]
    usage = events[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )


def test_an_anthropic_stream_manager_is_watched_through_its_helpers(claude: Any) -> None:
    events, ask = claude_stream(claude)
    with ask() as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == "Echo: hello there"
    assert [(e.outcome, e.model, e.provider) for e in events] == [
        ("ok", "claude-test", "anthropic")
    ]
    usage = events[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (
        message.usage.input_tokens,
        message.usage.output_tokens,
    )


def test_a_stream_manager_failing_mid_way_or_at_its_request_is_an_error(
    fake: FakeProvider, oai: Any
) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={}, retry=FAST_TWICE)

    @guard.protect
    def ask() -> Any:
        return oai.chat.completions.stream(model="gpt-test", messages=USER)

    fake.script(Fault(stream_error_after=1))
    with pytest.raises(openai.APIError) as raised, ask() as stream:
        stream.get_final_completion()
    assert [(e.outcome, e.usage, e.route) for e in events] == [("error", None, None)]
    assert events[0].error is raised.value

    fake.script(Fault(status=500), Fault(status=500))  # (entered: retried, as a call is)
    with pytest.raises(openai.InternalServerError) as refused, ask():
        pass
    assert [(e.outcome, e.attempts) for e in events] == [("error", 1), ("error", 2)]
    assert isinstance(events[1].error, ProviderUnavailableError)
    assert events[1].error.__cause__ is refused.value


def test_a_stream_manager_closed_early_is_cancelled_with_what_it_used(claude: Any) -> None:
    events, ask = claude_stream(claude)
    with ask() as stream:
        for event in stream:
            if event.type == "message_start":
                start = event.message.usage
                break
    assert [(e.outcome, e.error) for e in events] == [("cancelled", None)]
    usage = events[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (start.input_tokens, start.output_tokens)

    ask()  # never entered: no request went out
    gc.collect()
    assert [(e.outcome, e.usage) for e in events[1:]] == [("cancelled", None)]


@pytest.mark.anyio
async def test_async_stream_managers_are_watched(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    oai = openai.AsyncOpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=fake.url, api_key="x", max_retries=0)

    @guard.protect
    async def chat() -> Any:
        return oai.chat.completions.stream(model="gpt-test", messages=USER, stream_options=USAGE)

    @guard.protect
    def message() -> Any:
        return claude.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES)

    async with await chat() as stream:
        completion = await stream.get_final_completion()
    async with message() as claude_stream:
        text = "".join([piece async for piece in claude_stream.text_stream])
        final = await claude_stream.get_final_message()
    assert text == "Echo: hello there"
    assert [(e.outcome, e.provider) for e in events] == [("ok", "openai"), ("ok", "anthropic")]
    first, second = (e.usage for e in events)
    assert first is not None
    assert second is not None
    assert completion.usage is not None
    assert first.output_tokens == completion.usage.completion_tokens
    assert second.input_tokens == final.usage.input_tokens

    fake.script(Fault(stream_error_after=1))
    with pytest.raises(anthropic.APIError):
        async with message() as claude_stream:
            await claude_stream.get_final_message()
    async with message() as claude_stream:
        await claude_stream.__anext__()
    assert [e.outcome for e in events[2:]] == ["error", "cancelled"]
    await oai.close()
    await claude.close()


def test_a_returned_stream_closed_early_reports_its_prompt_and_what_came(oai: Any) -> None:
    # an abandoned stream's usage was None, though its prompt was billed
    events: list[CallEvent] = []
    ask = protected_stream(Guard(hooks=[events.append], environ={}), oai)
    with ask() as stream:
        chunks = [next(stream), next(stream)]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert [(e.outcome, e.error) for e in events] == [("cancelled", None)]
    usage = events[0].usage
    assert usage is not None
    assert usage.estimated
    assert usage.input_tokens == count_request_tokens(USER, "gpt-test").tokens > 0
    assert usage.output_tokens == count_text_tokens(text, "gpt-test").tokens > 0

    dropped = ask()
    next(dropped)
    del dropped
    gc.collect()
    assert [e.outcome for e in events] == ["cancelled", "cancelled"]
    assert events[1].usage is not None
    assert events[1].usage.input_tokens == usage.input_tokens


def test_a_generator_closed_early_reports_the_usage_its_items_told(claude: Any) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def relayed() -> Generator[Any]:
        yield from claude.messages.create(
            model="claude-test", max_tokens=50, messages=MESSAGES, stream=True
        )

    items = relayed()
    start = next(items).message.usage  # message_start: the input billed
    items.close()
    assert [(e.outcome, e.model) for e in events] == [("cancelled", "claude-test")]
    usage = events[0].usage
    assert usage is not None
    assert usage.input_tokens == start.input_tokens > 0


def test_a_stream_manager_whose_request_fails_as_it_is_entered_is_retried(
    fake: FakeProvider, oai: Any
) -> None:
    """A 429 or a 500 raised by the manager's ``__enter__`` (where its request goes out) was
    the call's error at once; a plain call failing so is retried. The function is called
    again for each retry: a manager sends its request once."""
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={}, retry=FAST_THRICE)
    made: list[Any] = []

    @guard.protect
    def ask() -> Any:
        made.append(oai.chat.completions.stream(model="gpt-test", messages=USER))
        return made[-1]

    fake.script(Fault(status=429), Fault(status=500))
    with ask() as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "Echo: hello there"
    assert (len(made), fake.stats.requests) == (3, 3)
    assert [(e.outcome, e.attempts, e.route) for e in events] == [("ok", 3, "protected")]
    causes = [type(r.cause) for r in events[0].retries]
    assert causes == [openai.RateLimitError, openai.InternalServerError]


@pytest.mark.anyio
async def test_an_async_stream_manager_whose_request_fails_as_it_is_entered_is_retried(
    fake: FakeProvider,
) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={}, retry=FAST_THRICE)
    oai = openai.AsyncOpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=fake.url, api_key="x", max_retries=0)

    @guard.protect
    async def chat() -> Any:
        return oai.chat.completions.stream(model="gpt-test", messages=USER)

    @guard.protect
    def message() -> Any:  # (a plain def returning an async manager)
        return claude.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES)

    fake.script(Fault(status=503))
    async with await chat() as stream:
        completion = await stream.get_final_completion()
    fake.script(Fault(status=429), Fault(status=529))
    async with message() as claude_stream:
        final = await claude_stream.get_final_message()
    assert completion.choices[0].message.content == "Echo: hello there"
    assert final.content[0].type == "text"
    assert [(e.outcome, e.attempts) for e in events] == [("ok", 2), ("ok", 3)]
    fake.script(*[Fault(status=500)] * 3)
    with pytest.raises(openai.InternalServerError):
        async with await chat():
            pass
    assert [(e.outcome, e.attempts) for e in events[2:]] == [("error", 3)]
    await oai.close()
    await claude.close()


def test_a_retried_stream_manager_is_one_request_to_the_retry_budget(
    fake: FakeProvider, oai: Any
) -> None:
    """The retries as the manager is entered spend the call's retry budget, the call counted
    once (as the request it is), not once when the function returned it and again when it was
    entered: that would have let a fleet's entry failures retry twice as much."""
    guard = Guard(environ={}, retry=FAST_THRICE, retry_budget=RetryBudgetPolicy(window=86400))
    budget = guard._stages.retry_budget
    assert isinstance(budget, MemoryRetryBudget)

    @guard.protect
    def ask() -> Any:
        return oai.chat.completions.stream(model="gpt-test", messages=USER)

    fake.script(Fault(status=500))
    with ask() as stream:
        stream.get_final_completion()
    state = budget.state("protected")  # (a day's window: the counts barely decayed)
    assert (round(state.requests, 3), round(state.retries, 3)) == (1.0, 1.0)
