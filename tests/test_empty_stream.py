"""A stream that ends without any answer (an empty 200, or its last event alone) is never an
empty successful answer: it is an :class:`EmptyStreamError` (a ProviderUnavailableError) that
says so, and the call moves on at once: neither retried on the route nor a failure of its
breaker. llama-cpp-python's server answers a stream request it failed before it began so
(a prompt past its context window among them: a 200, no event; a plain call gets its 400),
run here with the bundled model; any route of the user's own whose stream gives no chunk is
held to the same."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    BreakerPolicy,
    CallEvent,
    ChatRequest,
    ChatResponse,
    EmptyStreamError,
    Guard,
    OpenAICompatibleProvider,
    ProviderUnavailableError,
    StreamChunk,
)
from llmguard_sdk.providers.base import Provider
from llmguard_sdk.testing import FakeProvider

from .llamaserver import llama_server
from .rawserver import RawServer, raised_by, sse_head
from .test_provider_usage_bounds import _Reporting

ASK: Any = [{"role": "user", "content": "two and two?"}]

# llama-cpp-python's server's answer to a stream it failed as it began: its headers, then
# the chunked body's end at once (uvicorn's), no event
_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n"
)
_CLAUDE_END = b'event: message_stop\ndata: {"type": "message_stop"}\n\n'

# (what the server sends, the route that reads it)
EMPTY: dict[str, tuple[bytes, tuple[bytes, ...]]] = {
    "chunked": (_CHUNKED, ()),
    "closed": (sse_head(), ()),
    "done alone": (sse_head(), (b"data: [DONE]\n\n",)),
    "done without its blank line": (sse_head(), (b"data: [DONE]",)),
    "comments alone": (sse_head(), (b": ping\n\n",)),
}


def _says_empty(error: BaseException) -> None:
    assert type(error) is EmptyStreamError
    assert isinstance(error, ProviderUnavailableError)  # (what it was before it had a class)
    assert "empty stream: it ended without any answer" in str(error)
    assert error.status_code == 200
    assert not error.retryable  # the route failed this request: the chain moves on at once


@pytest.mark.parametrize("kind", list(EMPTY))
def test_an_empty_stream_is_no_answer(kind: str) -> None:
    """A ``[DONE]`` alone was an empty successful answer; an empty body said the stream
    "ended before it was complete", as for a stream cut in its middle."""
    head, parts = EMPTY[kind]
    with RawServer(head, parts) as raw:
        _says_empty(raised_by(OpenAICompatibleProvider(raw.base_url, model="m"), True))


def test_claude_s_last_event_alone_is_no_answer() -> None:
    with RawServer(sse_head(), (_CLAUDE_END,)) as raw:
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        with pytest.raises(ProviderUnavailableError) as info:
            list(route.stream(ChatRequest(messages=ASK), model="claude-x", deadline=1e12))
        route.close()
    _says_empty(info.value)


def test_a_stream_cut_in_its_first_event_is_still_a_cut() -> None:
    with RawServer(sse_head(), (b'data: {"id": "chatcmpl-1", "cho',)) as raw:
        error = raised_by(OpenAICompatibleProvider(raw.base_url, model="m"), True)
    assert type(error) is ProviderUnavailableError
    assert "stream ended before it was complete" in str(error)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["chunked", "done alone"])
def test_an_empty_stream_moves_the_call_on(
    kind: str, asynchronous: bool, fake: FakeProvider
) -> None:
    head, parts = EMPTY[kind]
    events: list[CallEvent] = []
    with RawServer(head, parts) as raw:
        routes = [
            OpenAICompatibleProvider(raw.base_url, model="m", name="llama"),
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="backup"),
        ]
        guard = Guard(routes, environ={}, retry=None, hooks=[events.append])
        text, response = _read(guard, asynchronous)
    assert text == response.text == "Echo: two and two?"
    assert response.route == "backup"
    assert events[-1].route_errors == (("llama", "llmguard_sdk.errors.EmptyStreamError"),)


def _read(guard: Guard, asynchronous: bool) -> tuple[str, ChatResponse]:
    """The text streamed for ``ASK`` and the stream's response (``guard`` closed after)."""
    if asynchronous:

        async def read() -> tuple[str, ChatResponse]:
            async with guard, await guard.achat(ASK, stream=True) as chat:
                return "".join([c.text async for c in chat]), chat.response

        return anyio.run(read)
    with guard, guard.chat(ASK, stream=True) as chat:
        return "".join(c.text for c in chat), chat.response


# a breaker that opens after 4 failures of 6 calls (the default retries: 3 attempts a call)
_BREAKER = BreakerPolicy(window=6, minimum_calls=4, failure_rate=0.5)


def _calls(
    routes: list[Provider], asynchronous: bool, calls: int
) -> tuple[str, list[CallEvent | BaseException]]:
    """``calls`` streams of ``ASK``, one after another, read whole through a Guard of
    ``routes`` (the default retries, :data:`_BREAKER`): its first route's breaker state after
    them, and what each call gave (its event, or its error)."""
    events: list[CallEvent] = []
    guard = Guard(routes, environ={}, breaker=_BREAKER, hooks=[events.append])

    async def read() -> None:
        async with await guard.achat(ASK, stream=True) as chat:
            assert "".join([c.text async for c in chat]) == chat.response.text

    outcomes: list[CallEvent | BaseException] = []
    with guard:
        for _ in range(calls):
            try:
                if asynchronous:
                    anyio.run(read)
                else:
                    with guard.chat(ASK, stream=True) as chat:
                        assert "".join(c.text for c in chat) == chat.response.text
                outcomes.append(events[-1])
            except ProviderUnavailableError as exc:
                outcomes.append(exc)
        assert guard.breakers is not None
        return guard.breakers.state(routes[0].name), outcomes


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_empty_stream_is_neither_retried_nor_a_breaker_failure(
    asynchronous: bool, fake: FakeProvider
) -> None:
    """A server that answers a stream it failed before it began with an empty 200 fails that
    request, not every one (llama-cpp-python's server, a prompt past its context): each call
    was sent to it 3 times (the default retries), each attempt a failure of its breaker, and
    6 such calls opened a healthy server's breaker (the later calls then went to the backup
    without trying it, its probes sent it pings). The call moves on at once, the breaker
    counts none of them."""
    head, parts = EMPTY["chunked"]
    with RawServer(head, parts) as raw:
        routes: list[Provider] = [
            OpenAICompatibleProvider(raw.base_url, model="m", name="llama"),
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="backup"),
        ]
        state, outcomes = _calls(routes, asynchronous, 6)
        assert len(raw.received) == 6  # one attempt a call
    assert state == "closed"
    for event in outcomes:
        assert isinstance(event, CallEvent)
        assert (event.route, event.attempts, event.retries) == ("backup", 2, ())
        assert event.route_errors == (("llama", "llmguard_sdk.errors.EmptyStreamError"),)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_empty_stream_of_the_only_route_is_its_error_at_once(asynchronous: bool) -> None:
    head, parts = EMPTY["done alone"]
    with RawServer(head, parts) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="llama")
        state, outcomes = _calls([route], asynchronous, 6)
        assert len(raw.received) == 6
    assert state == "closed"
    for error in outcomes:
        assert isinstance(error, EmptyStreamError)
        _says_empty(error)


class _Silent(_Reporting):
    """A provider of the user's own whose stream ends without a chunk."""

    def __init__(self) -> None:
        super().__init__(input_tokens=1)
        self.name = "silent"

    def stream(self, request: ChatRequest, **_: Any) -> Generator[StreamChunk, None, None]:
        yield from ()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_route_of_the_user_s_own_that_streams_nothing_gives_no_answer(
    asynchronous: bool, fake: FakeProvider
) -> None:
    """It was an empty successful answer (no text, no finish)."""
    with pytest.raises(ProviderUnavailableError) as info:
        _read(Guard(_Silent(), environ={}, retry=None), asynchronous)
    assert "stream ended without any chunk" in str(info.value)
    assert type(info.value) is EmptyStreamError
    assert not info.value.retryable
    assert info.value.route == "silent"
    routes: list[Provider] = [
        _Silent(),
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="next"),
    ]
    text, response = _read(Guard(routes, environ={}, retry=None), asynchronous)
    assert (text, response.route) == ("Echo: two and two?", "next")


# -- llama-cpp-python's server, with the bundled model -------------------------------------


@pytest.mark.local_model
def test_llama_cpp_python_s_empty_stream_moves_the_call_on(fake: FakeProvider) -> None:
    """Its answer to a stream whose prompt is past its context: a 200 and no event."""
    long: Any = [{"role": "user", "content": " ".join(["word"] * 400)}]
    events: list[CallEvent] = []
    with llama_server(n_ctx=256) as base_url:
        route = OpenAICompatibleProvider(base_url, model="smollm2", name="llama")
        with (
            Guard(route, environ={}, retry=None, timeout=60) as guard,
            pytest.raises(ProviderUnavailableError) as refused,
            guard.chat(long, max_tokens=10, stream=True) as chat,
        ):
            list(chat)
        backup = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="backup")
        guard = Guard([route, backup], environ={}, retry=None, hooks=[events.append])
        with guard, guard.chat(long, max_tokens=10, stream=True) as chat:
            assert "".join(c.text for c in chat).startswith("Echo: word word")
    _says_empty(refused.value)
    assert chat.response.route == "backup"
    assert events[-1].route_errors == (("llama", "llmguard_sdk.errors.EmptyStreamError"),)
    assert fake.requests[-1].body["stream"] is True
