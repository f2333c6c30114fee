"""A stream that breaks after the caller got a model's reasoning and no answer text yet
(chat completions' reasoning deltas, a Responses route's reasoning summary, one of Claude's
thinking blocks): the caller was shown something, so the stream is interrupted, as after
text (never replayed on its route: the caller would see that reasoning twice), and
``continue_interrupted_streams`` has the next route answer the question as asked (there is
no answer text to continue from)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    AnthropicProvider,
    AsyncChatStream,
    ChatResponse,
    Guard,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    RetryPolicy,
    StreamChunk,
    StreamInterruptedError,
)
from llmguard_sdk._core.assembly import merge_metadata
from llmguard_sdk.providers.base import Provider
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, chat_chunk_event, sse_head

ASK: Any = [{"role": "user", "content": "two and two?"}]


def _sse(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _chat(key: str) -> bytes:
    """A chat-completions stream that breaks after two pieces of reasoning (``key``: where
    the server puts them)."""
    return (
        chat_chunk_event({"role": "assistant", "content": ""})
        + chat_chunk_event({"content": None, key: "Two and "})
        + chat_chunk_event({"content": None, key: "two."})
    )


def _responses() -> bytes:
    """A Responses stream that breaks after a piece of its reasoning item's summary."""
    created = {"id": "resp_1", "object": "response", "model": "m", "status": "in_progress"}
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    where = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
    return (
        _sse("response.created", response={**created, "output": []})
        + _sse("response.output_item.added", output_index=0, item=item)
        + _sse("response.reasoning_summary_text.delta", **where, delta="Two and two.")
    )


def _claude(*, whole: bool) -> bytes:
    """A Messages stream that breaks after a thinking block (``whole``: after its end; else
    in its middle, before any of it was given out)."""
    start: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
    }
    start.update(content=[], usage={"input_tokens": 5, "output_tokens": 1})
    block = {"type": "thinking", "thinking": "", "signature": ""}
    delta = {"type": "thinking_delta", "thinking": "Two and two."}
    events = (
        _sse("message_start", message=start)
        + _sse("content_block_start", index=0, content_block=block)
        + _sse("content_block_delta", index=0, delta=delta)
    )
    if whole:
        signed = {"type": "signature_delta", "signature": "sig"}
        events += _sse("content_block_delta", index=0, delta=signed)
        events += _sse("content_block_stop", index=0)
    return events


def _openai(url: str) -> Provider:
    return OpenAICompatibleProvider(url, model="m", name="first")


def _responses_route(url: str) -> Provider:
    return OpenAIResponsesProvider(url, model="m", name="first")


def _anthropic(url: str) -> Provider:
    return AnthropicProvider(url, api_key="sk-ant", model="claude-x", name="first")


def _shown(metadata: dict[str, Any]) -> Any:
    return metadata.get("reasoning") or metadata.get("thinking") or metadata.get("refusal")


def _fold(into: dict[str, Any], metadata: dict[str, Any]) -> None:
    """Add a chunk's reasoning (its pieces of text, its thinking blocks) to ``into``."""
    for key in ("reasoning", "thinking", "refusal"):
        if key in metadata:
            into[key] = into.get(key, metadata[key][:0]) + metadata[key]


def _read(chat: Iterable[StreamChunk], got: dict[str, Any]) -> None:
    """Read ``chat`` to its end (or its error), its reasoning into ``got``: no text comes."""
    for chunk in chat:
        assert chunk.text == ""
        _fold(got, chunk.metadata)


async def _aread(chat: AsyncChatStream, got: dict[str, Any]) -> None:
    """The async twin of :func:`_read`."""
    async with chat:
        async for chunk in chat:
            assert chunk.text == ""
            _fold(got, chunk.metadata)


# (the route, the stream it breaks, the reasoning the caller got)
BROKEN: dict[str, tuple[Callable[[str], Provider], bytes, Any]] = {
    "reasoning_content": (_openai, _chat("reasoning_content"), "Two and two."),
    "reasoning": (_openai, _chat("reasoning"), "Two and two."),
    "responses": (_responses_route, _responses(), "Two and two."),
    "thinking": (
        _anthropic,
        _claude(whole=True),
        [{"type": "thinking", "thinking": "Two and two.", "signature": "sig"}],
    ),
}


# a piece of OpenAI's refusal is shown to the caller as reasoning is
REFUSED = (_openai, _chat("refusal"), "Two and two.")


@pytest.mark.parametrize("kind", [*BROKEN, "refusal"])
def test_a_stream_broken_after_reasoning_alone_is_interrupted(kind: str) -> None:
    """It raised ProviderUnavailableError, as if the caller had got nothing: a caller
    retrying that would be shown the reasoning twice, and the Guard could not continue it."""
    route, stream, reasoning = BROKEN.get(kind, REFUSED)
    got: dict[str, Any] = {}
    with (
        RawServer(sse_head(), (stream,)) as raw,
        Guard(route(raw.base_url), environ={}, retry=RetryPolicy(base=0.01)) as guard,
    ):
        with pytest.raises(StreamInterruptedError) as info, guard.chat(ASK, stream=True) as chat:
            _read(chat, got)
        assert len(raw.received) == 1  # never replayed
    assert info.value.partial_text == ""
    assert info.value.route == "first"
    assert _shown(got) == reasoning


@pytest.mark.parametrize("kind", list(BROKEN))
def test_the_next_route_answers_a_stream_broken_after_reasoning_alone(
    kind: str, fake: FakeProvider
) -> None:
    """With ``continue_interrupted_streams`` the call failed outright; now the next route
    answers the question as asked: the caller has no answer text for it to continue, so
    it is sent no empty assistant turn and no prompt to go on."""
    route, stream, reasoning = BROKEN[kind]
    chunks = []
    with RawServer(sse_head(), (stream,)) as raw:
        routes = [
            route(raw.base_url),
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="next"),
        ]
        options: dict[str, Any] = {"environ": {}, "retry": None}
        with (
            Guard(routes, continue_interrupted_streams=True, **options) as guard,
            guard.chat(ASK, stream=True) as chat,
        ):
            chunks = list(chat)
    assert "".join(c.text for c in chunks) == chat.response.text == "Echo: two and two?"
    assert chat.response.route == "next"
    assert chat.response.metadata["continued_after"] == ["first"]
    got: dict[str, Any] = {}
    for chunk in chunks:
        _fold(got, chunk.metadata)
    assert _shown(got) == reasoning  # the first route's, before the next route's answer
    # the response says what the caller was shown: it held the next route's metadata alone
    assert _shown(chat.response.metadata) == reasoning
    assert fake.requests[-1].body["messages"] == ASK


def test_a_thinking_block_cut_before_its_end_was_not_shown_and_moves_on(
    fake: FakeProvider,
) -> None:
    """A thinking block is given out whole at its end: one cut before it showed the caller
    nothing, so the next route takes the call as after any failure before content (no
    continuation asked)."""
    with RawServer(sse_head(), (_claude(whole=False),)) as raw:
        routes = [
            _anthropic(raw.base_url),
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="next"),
        ]
        with (
            Guard(routes, environ={}, retry=None) as guard,
            guard.chat(ASK, stream=True) as chat,
        ):
            chunks = list(chat)
    assert "".join(c.text for c in chunks) == "Echo: two and two?"
    assert not any(_shown(c.metadata) for c in chunks)
    assert "continued_after" not in chat.response.metadata


def test_an_async_stream_broken_after_reasoning_alone_is_interrupted() -> None:
    """The async twin raises the same interruption."""

    async def run(url: str) -> str:
        async with Guard(_openai(url), environ={}, retry=RetryPolicy(base=0.01)) as guard:
            got: dict[str, Any] = {}
            with pytest.raises(StreamInterruptedError) as info:
                await _aread(await guard.achat(ASK, stream=True), got)
            assert info.value.partial_text == ""
            return str(got["reasoning"])

    with RawServer(sse_head(), (_chat("reasoning"),)) as raw:
        assert anyio.run(run, raw.base_url) == "Two and two."
        assert len(raw.received) == 1


def _answered(reasoning: str, text: str) -> bytes:
    """A whole chat-completions stream: ``reasoning`` (``reasoning_content``), then ``text``."""
    return (
        chat_chunk_event({"role": "assistant", "content": ""})
        + chat_chunk_event({"content": None, "reasoning_content": reasoning})
        + chat_chunk_event({"content": text})
        + chat_chunk_event({}, "stop")
        + b"data: [DONE]\n\n"
    )


def _folded(chunks: Iterable[StreamChunk]) -> dict[str, Any]:
    """What the chunks' metadata adds up to, as a stream folds it."""
    folded: dict[str, Any] = {}
    for chunk in chunks:
        merge_metadata(folded, chunk.metadata)
    return folded


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_continued_stream_s_response_keeps_every_route_s_reasoning(asynchronous: bool) -> None:
    """A stream broken after reasoning and text, continued by a route that reasons too: the
    response's reasoning was the continuing route's alone, though the caller had been
    streamed the first route's before it; now it is both, in the order streamed."""
    broken = _chat("reasoning_content") + chat_chunk_event({"content": "Four"})
    with (
        RawServer(sse_head(), (broken,)) as first,
        RawServer(sse_head(), (_answered("Carry on.", ", surely."),)) as then,
    ):
        routes = [
            OpenAICompatibleProvider(first.base_url, model="m", name="first"),
            OpenAICompatibleProvider(then.base_url, model="m", name="then"),
        ]
        options: dict[str, Any] = {"environ": {}, "retry": None}
        guard = Guard(routes, continue_interrupted_streams=True, **options)
        if asynchronous:

            async def read() -> tuple[list[StreamChunk], ChatResponse]:
                async with guard, await guard.achat(ASK, stream=True) as chat:
                    return [c async for c in chat], chat.response

            chunks, response = anyio.run(read)
        else:
            with guard, guard.chat(ASK, stream=True) as chat:
                chunks, response = list(chat), chat.response
    assert response.text == "".join(c.text for c in chunks) == "Four, surely."
    assert response.metadata["reasoning"] == "Two and two.Carry on."
    added = {"continued_after": ["first"], "call_id": response.metadata["call_id"]}
    assert response.metadata == {**_folded(chunks), **added}
