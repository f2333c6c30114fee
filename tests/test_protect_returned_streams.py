"""``@guard.protect`` on a function that returns a provider SDK's stream, and on generators
relaying Anthropic's or the Responses API's events: the call is reported when the stream ends,
with the usage its items carried."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import anyio
import openai
import pytest

from llmguard_sdk import (
    CallEvent,
    Guard,
    ProviderTimeoutError,
    ProviderUnavailableError,
    count_request_tokens,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_telemetry import exporters

USAGE: Any = {"include_usage": True}


def outcomes(events: list[CallEvent]) -> list[tuple[str, object]]:
    return [(e.outcome, e.error) for e in events]


def protected_stream(guard: Guard, client: openai.OpenAI) -> Callable[[], Any]:
    """A protected function returning the openai stream of an answer to :data:`USER`."""

    @guard.protect
    def ask() -> Any:
        return client.chat.completions.create(
            model="gpt-test", messages=USER, stream=True, stream_options=USAGE
        )

    return ask


def test_a_returned_stream_is_reported_when_read_with_its_usage(oai: Any) -> None:
    # the call was reported "ok" with no usage as the stream was returned, before a chunk
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    ask = protected_stream(guard, oai)
    stream = ask()
    assert events == []  # the call is open while the stream is read
    assert stream.response.status_code == 200  # the SDK stream's attributes are forwarded
    with stream:
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: hello there"
    )
    assert [(e.kind, e.outcome, e.model, e.provider) for e in events] == [
        ("protect", "ok", "gpt-test", "openai")
    ]
    usage = events[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (
        chunks[-1].usage.prompt_tokens,
        chunks[-1].usage.completion_tokens,
    )


def test_a_returned_stream_failing_mid_way_is_reported_as_an_error(
    fake: FakeProvider, oai: Any
) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    ask = protected_stream(guard, oai)
    fake.script(Fault(stream_error_after=1))
    chunks: list[Any] = []
    with pytest.raises(openai.APIError) as raised:
        chunks.extend(ask())
    assert chunks
    assert [(e.outcome, e.usage, e.route) for e in events] == [("error", None, None)]
    assert events[0].error is raised.value


def test_a_returned_stream_closed_or_dropped_early_is_cancelled(oai: Any) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def ask() -> Any:
        return oai.chat.completions.create(model="gpt-test", messages=USER, stream=True)

    with ask() as stream:
        for _chunk in stream:
            break
    assert outcomes(events) == [("cancelled", None)]
    stream.close()  # a second close reports nothing more
    assert len(events) == 1

    dropped = ask()
    next(dropped)
    del dropped
    gc.collect()
    assert outcomes(events) == [("cancelled", None)] * 2
    usage = events[1].usage  # what it used so far: its prompt (it was sent), its first chunk
    assert usage is not None
    assert usage.estimated
    assert usage.input_tokens > 0


@pytest.mark.anyio
async def test_a_returned_async_stream_is_reported_when_read(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="x", max_retries=0)

    @guard.protect
    async def ask() -> Any:
        return await client.chat.completions.create(
            model="gpt-test", messages=USER, stream=True, stream_options=USAGE
        )

    stream = await ask()
    assert events == []
    async with stream:
        chunks = [chunk async for chunk in stream]
    assert [(e.outcome, e.model) for e in events] == [("ok", "gpt-test")]
    usage = events[0].usage
    assert usage is not None
    assert usage.output_tokens == chunks[-1].usage.completion_tokens > 0

    fake.script(Fault(stream_error_after=1))
    with pytest.raises(openai.APIError):
        async for _chunk in await ask():
            pass
    assert [e.outcome for e in events] == ["ok", "error"]

    stream = await ask()
    await stream.__anext__()
    await stream.close()  # as openai's AsyncStream closes
    assert [(e.outcome, e.error) for e in events[2:]] == [("cancelled", None)]
    assert events[2].usage is not None
    assert events[2].usage.input_tokens == count_request_tokens(USER, "gpt-test").tokens
    await client.close()


def _timed(
    fake: FakeProvider, timeout: float, messages: Any
) -> tuple[list[CallEvent], Callable[[], Any], openai.AsyncOpenAI]:
    """The events, a function protected with ``timeout`` that returns the async openai
    stream of an answer to ``messages``, and its client (to close)."""
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="x", max_retries=0)

    @guard.protect(timeout=timeout)
    async def ask() -> Any:
        return await client.chat.completions.create(model="m", messages=messages, stream=True)

    return events, ask, client


@pytest.mark.anyio
async def test_a_returned_async_stream_is_bounded_by_the_timeout(fake: FakeProvider) -> None:
    events, ask, client = _timed(fake, 1.0, USER)
    fake.script(Fault(first_token_delay=30))
    stream = await ask()
    with pytest.raises(ProviderTimeoutError):
        async for _chunk in stream:
            pass
    assert [e.outcome for e in events] == ["error"]
    assert isinstance(events[0].error, ProviderTimeoutError)
    await client.close()


LONG: Any = [{"role": "user", "content": "one two three four five six seven eight nine ten eleven"}]


@pytest.mark.anyio
async def test_a_returned_async_stream_longer_than_the_timeout_is_read_whole(
    fake: FakeProvider,
) -> None:
    """The timeout bounds the wait for each item (the first from the call, each later one
    from when it is asked for), not the whole stream: a stream whose tokens keep coming, 0.1 s
    apart, is read whole past its 1 s, the caller's own 1.2 s between two items aside. It was
    cut with a ``ProviderTimeoutError`` 1 s after the call, as sync streams are not."""
    events, ask, client = _timed(fake, 1.0, LONG)
    fake.always(Fault(inter_token_delay=0.1))
    stream = await ask()
    chunks = [await stream.__anext__()]
    await anyio.sleep(1.2)  # the caller's own time
    chunks += [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: " + LONG[0]["content"]
    assert [e.outcome for e in events] == ["ok"]
    await client.close()


async def _read_into(stream: Any, got: list[Any]) -> None:
    async for chunk in stream:
        got.append(chunk)


@pytest.mark.anyio
async def test_a_returned_async_stream_idle_past_the_timeout_times_out(
    fake: FakeProvider,
) -> None:
    """A stream whose next token does not come within the timeout of being asked for ends
    with a ``ProviderTimeoutError``, reported as the call's error."""
    events, ask, client = _timed(fake, 0.5, LONG)
    fake.script(Fault(inter_token_delay=30))
    stream = await ask()
    got: list[Any] = []
    with pytest.raises(ProviderTimeoutError):
        await _read_into(stream, got)
    assert got  # its first token came: the later one did not
    assert [e.outcome for e in events] == ["error"]
    assert isinstance(events[0].error, ProviderTimeoutError)
    await client.close()


def test_anthropic_streams_count_the_input_of_message_start(claude: Any) -> None:
    # a generator relaying the events kept message_delta's usage alone: no input tokens
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    messages: Any = USER

    @guard.protect
    def relayed() -> Iterator[Any]:
        yield from claude.messages.create(
            model="claude-test", max_tokens=50, messages=messages, stream=True
        )

    @guard.protect
    def returned() -> Any:
        return claude.messages.create(
            model="claude-test", max_tokens=50, messages=messages, stream=True
        )

    for ask in (relayed, returned):
        items = list(ask())
        start = next(e for e in items if e.type == "message_start").message.usage
        delta = [e for e in items if e.type == "message_delta"][-1].usage
        usage = events[-1].usage
        assert usage is not None
        assert (usage.input_tokens, usage.output_tokens) == (
            start.input_tokens,
            delta.output_tokens,
        )
        assert usage.input_tokens > 0
        assert (events[-1].outcome, events[-1].model, events[-1].provider) == (
            "ok",
            "claude-test",
            "anthropic",
        )
    assert len(events) == 2


def test_anthropic_streams_count_cache_reads_and_writes() -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    system: Any = [
        {"type": "text", "text": "you answer " * 20, "cache_control": {"type": "ephemeral"}}
    ]
    messages: Any = USER

    with (
        FakeProvider(prefix_cache=True, prefix_cache_min_tokens=8) as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):

        @guard.protect
        def returned() -> Any:
            return claude.messages.create(
                model="claude-test", max_tokens=50, system=system, messages=messages, stream=True
            )

        first_call, second_call = list(returned()), list(returned())  # read to their ends
    written = first_call[0].message.usage  # (message_start)
    read = second_call[0].message.usage
    assert written.cache_creation_input_tokens > 0
    assert read.cache_read_input_tokens == written.cache_creation_input_tokens
    first, second = (e.usage for e in events)
    assert first is not None
    assert second is not None
    assert first.cache_write_input_tokens == written.cache_creation_input_tokens
    assert second.cached_input_tokens == read.cache_read_input_tokens
    assert second.input_tokens == read.input_tokens + read.cache_read_input_tokens


def test_responses_streams_count_the_usage_of_response_completed(oai: Any) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def relayed() -> Iterator[Any]:
        yield from oai.responses.create(model="gpt-test", input="hello there", stream=True)

    @guard.protect
    def returned() -> Any:
        return oai.responses.create(model="gpt-test", input="hello there", stream=True)

    for ask in (relayed, returned):
        items = list(ask())
        completed = items[-1]
        assert completed.type == "response.completed"
        usage = events[-1].usage
        assert usage is not None
        assert (usage.input_tokens, usage.output_tokens) == (
            completed.response.usage.input_tokens,
            completed.response.usage.output_tokens,
        )
        assert (events[-1].outcome, events[-1].model) == ("ok", "gpt-test")
    assert len(events) == 2


@pytest.mark.anyio
async def test_an_async_generator_relaying_anthropic_events_counts_both(
    fake: FakeProvider,
) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="x", max_retries=0)
    messages: Any = USER

    @guard.protect
    async def relayed() -> AsyncIterator[Any]:
        stream = await client.messages.create(
            model="claude-test", max_tokens=50, messages=messages, stream=True
        )
        async for event in stream:
            yield event

    items = [item async for item in relayed()]
    start = items[0].message.usage
    usage = events[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (
        start.input_tokens,
        items[-2].usage.output_tokens,
    )
    await client.close()


def test_a_returned_plain_answer_is_still_reported_at_once(oai: Any) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    def ask() -> Any:
        return oai.chat.completions.create(model="gpt-test", messages=USER)

    answer = ask()
    assert answer.choices[0].message.content == "Echo: hello there"
    usage = events[0].usage
    assert usage is not None
    assert usage.output_tokens == answer.usage.completion_tokens


def test_a_returned_stream_reaches_telemetry_with_its_usage(claude: Any) -> None:
    exported, meter_provider = exporters(log_level=None)
    guard = Guard(telemetry=exported.telemetry, environ={})
    messages: Any = USER

    @guard.protect(route="vendor-sdk")
    def returned() -> Any:
        return claude.messages.create(
            model="claude-test", max_tokens=50, messages=messages, stream=True
        )

    stream = returned()
    assert exported.finished() == []  # no span while the stream is open
    items = list(stream)
    (span,) = exported.finished()
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.input_tokens"] == items[0].message.usage.input_tokens
    assert span.attributes["gen_ai.usage.output_tokens"] == items[-2].usage.output_tokens
    (tokens,) = [
        point.sum
        for point in exported.points("gen_ai.client.token.usage")
        if point.attributes["gen_ai.token.type"] == "output"
    ]
    assert tokens == items[-2].usage.output_tokens
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


def test_an_iterator_with_close_but_no_http_response_is_returned_as_it_is() -> None:
    """A database cursor's shape (an iterator with close()) is not taken for an SDK stream:
    the function's call is reported at once and the cursor handed back unwrapped."""

    class Cursor:
        def __init__(self) -> None:
            self.rows = iter([1, 2])

        def __iter__(self) -> Cursor:
            return self

        def __next__(self) -> int:
            return next(self.rows)

        def close(self) -> None:
            pass

    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    cursor = Cursor()

    @guard.protect
    def rows() -> Cursor:
        return cursor

    assert rows() is cursor
    assert outcomes(events) == [("ok", None)]


def test_an_anthropic_stream_failing_mid_way_is_reported_as_the_event_says(
    fake: FakeProvider, claude: Any
) -> None:
    """Anthropic's error event inside a stream raises its ``APIStatusError`` of the 200
    answer: it reaches the caller, reported as the typed error of the event's kind. Reading
    the unread streamed answer's text raised httpx's ``ResponseNotRead`` in its place, and no
    event was reported."""
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    messages: Any = USER

    @guard.protect
    def returned() -> Any:
        return claude.messages.create(
            model="claude-test", max_tokens=50, messages=messages, stream=True
        )

    fake.script(Fault(stream_error_after=1))
    with pytest.raises(anthropic.APIStatusError) as raised:
        list(returned())
    assert [e.outcome for e in events] == ["error"]
    error = events[0].error
    assert isinstance(error, ProviderUnavailableError)
    assert (error.status_code, error.__cause__) == (529, raised.value)
