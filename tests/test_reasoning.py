"""A model's reasoning beside its content, as OpenAI-compatible servers send it
(``reasoning_content``: DeepSeek, vLLM, llama.cpp; ``reasoning``: OpenRouter, Ollama), through
the chat-completions route and the seams: carried in ``metadata["reasoning"]``, never in the
content, and no empty chunk where the seam's wire has no place for it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, OpenAIResponsesProvider
from llmguard_sdk.client import ChunkStream
from llmguard_sdk.transport import http_client

from .conftest import require_module
from .rawserver import RawServer, chat_chunk_event, http_response, sse_head

ASK: Any = [{"role": "user", "content": "two and two?"}]


def _thinking(text: str) -> list[dict[str, Any]]:
    """Mistral's content chunks of a piece of reasoning (its reasoning models')."""
    return [{"type": "thinking", "thinking": [{"type": "text", "text": text}]}]


def _reasoned(key: str, text: str) -> dict[str, Any]:
    """A delta (or message) with ``text`` as its reasoning, where ``key`` puts it."""
    return {"content": _thinking(text)} if key == "thinking" else {"content": None, key: text}


def _answer(key: str, text: str) -> dict[str, Any]:
    """A delta (or message) with ``text`` as its content (chunks where Mistral's are)."""
    return {"content": [{"type": "text", "text": text}] if key == "thinking" else text}


def _stream(key: str) -> bytes:
    return (
        chat_chunk_event({"role": "assistant", "content": ""})
        + chat_chunk_event(_reasoned(key, "Two and "))
        + chat_chunk_event(_reasoned(key, "two."))
        + chat_chunk_event(_answer(key, "Four."))
        + chat_chunk_event({}, "stop")
        + b"data: [DONE]\n\n"
    )


KEYS = ["reasoning_content", "reasoning", "thinking"]


@pytest.mark.parametrize("key", KEYS)
def test_streamed_reasoning_is_carried_apart_and_makes_no_empty_chunk(key: str) -> None:
    """The reasoning deltas made chunks with nothing in them: openai's SDK got a chunk with
    an empty delta for each, through the seam and the stand-in client, and the reasoning
    itself was lost (it is given back under the name the route gave it); Mistral's content
    chunks (a list) were dropped whole, its answer's text
    with them."""
    openai = require_module("openai", "openai is a dev dependency")
    with (
        RawServer(sse_head(), (_stream(key),)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        with guard.chat(ASK, stream=True) as chat:
            assert "".join(chunk.text for chunk in chat) == "Four."
        sdk = openai.OpenAI(
            api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
        )
        chunks = list(sdk.chat.completions.create(model="m", messages=ASK, stream=True))
        stand_in = list(ChunkStream(guard.chat(ASK, stream=True)))
        events = list(sdk.responses.create(model="m", input="two and two?", stream=True))
    assert chat.response.text == "Four."
    assert chat.response.metadata["reasoning"] == "Two and two."
    for stream in (chunks, stand_in):
        choices = [c.choices[0] for c in stream if c.choices]
        assert "".join(choice.delta.content or "" for choice in choices) == "Four."
        # (the first chunk may carry the role alone, as OpenAI's do); a reasoning delta
        # carries its piece under the route's own name (delta.reasoning_content ...)
        said = [getattr(choice.delta, key, None) for choice in choices]
        pairs = zip(choices[1:], said[1:], strict=True)
        assert all(c.delta.content or c.finish_reason or s for c, s in pairs)
        assert "".join(s or "" for s in said) == ("" if key == "thinking" else "Two and two.")
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["Four."]


@pytest.mark.parametrize("key", KEYS)
def test_a_whole_answer_s_reasoning_is_carried_apart(key: str) -> None:
    """(Mistral's content as a list of chunks was a MalformedResponseError.)"""
    message = {"role": "assistant", **_answer(key, "Four."), key: "Two and two."}
    if key == "thinking":
        message = {"role": "assistant", "content": _thinking("Two and two.")}
        message["content"] += _answer(key, "Four.")["content"]
    body = {"id": "c", "model": "m", "choices": [{"index": 0, "message": message}]}
    with (
        RawServer(http_response(json.dumps(body).encode())) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        answer = guard.chat(ASK)
    assert (answer.text, answer.metadata["reasoning"]) == ("Four.", "Two and two.")


def _responses_event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


_SUMMARY = [("Two and ", 0, 0), ("two.", 0, 0), ("Sure.", 0, 1)]  # (delta, item, part)
_USAGE = {"input_tokens": 3, "output_tokens": 9, "total_tokens": 12}


def _responses_stream() -> bytes:
    created = {"id": "resp_1", "model": "m", "status": "in_progress", "output": []}
    done = {**created, "status": "completed", "usage": _USAGE}
    return (
        _responses_event("response.created", response=created)
        + b"".join(
            _responses_event(
                "response.reasoning_summary_text.delta",
                item_id="rs_1",
                output_index=item,
                summary_index=part,
                delta=delta,
            )
            for delta, item, part in _SUMMARY
        )
        + _responses_event(
            "response.output_text.delta", item_id="msg_1", output_index=1, delta="Four."
        )
        + _responses_event("response.completed", response=done)
    )


def test_a_responses_route_carries_reasoning_summaries_apart() -> None:
    """A Responses route skipped the reasoning summary (streamed, and in a whole answer's
    ``reasoning`` items) while a chat-completions route carries a model's reasoning: it is
    ``metadata["reasoning"]`` now, its parts joined by a blank line in both."""
    summary = [{"type": "summary_text", "text": "Two and two."}]
    summary.append({"type": "summary_text", "text": "Sure."})
    body = {
        "id": "resp_1",
        "model": "m",
        "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": summary},
            {"type": "message", "role": "assistant", "content": [_text("Four.")]},
        ],
        "usage": _USAGE,
    }
    with (
        RawServer(sse_head(), (_responses_stream(),)) as raw,
        Guard(OpenAIResponsesProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
        guard.chat(ASK, stream=True) as chat,
    ):
        assert "".join(chunk.text for chunk in chat) == "Four."
    with (
        RawServer(http_response(json.dumps(body).encode())) as raw,
        Guard(OpenAIResponsesProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        answer = guard.chat(ASK)
    assert answer.text == chat.response.text == "Four."
    assert answer.metadata["reasoning"] == chat.response.metadata["reasoning"]
    assert answer.metadata["reasoning"] == "Two and two.\n\nSure."


def _text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}
