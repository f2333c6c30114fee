"""OpenAIResponsesProvider against what OpenAI's Responses API takes and sends: a chat request's
parts and tools as the API reads them, and a stream's error events in the shape the live API
sends them."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from llmguard_sdk import (
    ChatRequest,
    ContextLengthExceededError,
    ProviderError,
    RateLimitedError,
)
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, http_response, sse_head

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
ANSWER = json.dumps(
    {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}],
    }
).encode()


def _event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _streamed_error(event: bytes) -> ProviderError:
    """What a stream that opened and then sent ``event`` raised."""
    opened = {"id": "resp_1", "object": "response", "status": "in_progress", "model": "m"}
    head = sse_head() + _event("response.created", sequence_number=0, response=opened)
    with RawServer(head + event) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        try:
            with pytest.raises(ProviderError) as info:
                list(route.stream(REQUEST, model="m", deadline=time.monotonic() + 10))
        finally:
            route.close()
    return info.value


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        ({"type": "tokens", "code": "rate_limit_exceeded"}, RateLimitedError, True),
        ({"type": "insufficient_quota", "code": "insufficient_quota"}, RateLimitedError, False),
        (
            {"type": "invalid_request_error", "code": "context_length_exceeded"},
            ContextLengthExceededError,
            False,
        ),
    ],
)
def test_a_streamed_error_event_is_read_flat_or_nested(
    nested: bool, error: dict[str, Any], kind: type[ProviderError], retryable: bool
) -> None:
    """The API reference gives an ``error`` event's ``code`` and ``message`` on the event; the
    live API nests them in an ``error`` object (openai-dotnet#881). Nested, the route read
    neither: a spent quota was retried, an input too long for the model was no
    ContextLengthExceededError, and the message was "the response failed"."""
    error = {**error, "message": "said by the API", "param": None}
    flat = {k: v for k, v in error.items() if k != "type"}  # (the event's type is "error")
    fields = {"error": error} if nested else flat
    raised = _streamed_error(_event("error", sequence_number=1, **fields))
    assert type(raised) is kind
    assert raised.retryable is retryable
    assert "said by the API" in str(raised)


def test_a_chat_function_tool_keeps_chat_s_non_strict_default(fake: FakeProvider) -> None:
    """Chat completions calls a function tool that does not say ``strict`` non-strict; the
    Responses API calls it strict (its schema normalized: every property required, no other
    property allowed), so a chat caller's tool was sent as a different tool, its optional
    arguments made mandatory, its free-form objects made empty. The route says
    ``strict: false`` where the tool says nothing; a tool's own ``strict`` goes as it is."""
    loose = {"name": "lookup", "parameters": {"type": "object", "properties": {}}}
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": loose},
        {"type": "function", "function": {**loose, "name": "exact", "strict": True}},
        {"name": "claude_shaped", "input_schema": {"type": "object"}},
    ]
    route = OpenAIResponsesProvider(fake.base_url, model="m")
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    try:
        route.complete(
            request.model_copy(update={"tools": tools}), model="m", deadline=time.monotonic() + 10
        )
    finally:
        route.close()
    body = fake.requests[-1].body
    assert body is not None
    assert [(t["name"], t["strict"]) for t in body["tools"]] == [
        ("lookup", False),
        ("exact", True),
        ("claude_shaped", False),
    ]


def test_a_chat_file_part_is_sent_as_an_input_file() -> None:
    """Chat's ``file`` part (a PDF by ``file_id``, or inline as ``file_data`` with its
    ``filename``) was left out of a Responses request without a word: the model answered
    about a document it never saw. It goes as the Responses API's ``input_file``."""
    inline = {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}
    content = [
        {"type": "text", "text": "summarize these"},
        {"type": "file", "file": inline},
        {"type": "file", "file": {"file_id": "file-abc"}},
    ]
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": content}]})
    with RawServer(http_response(ANSWER)) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        try:
            route.complete(request, model="m", deadline=time.monotonic() + 10)
        finally:
            route.close()
    assert json.loads(raw.received[0])["input"][0]["content"] == [
        {"type": "input_text", "text": "summarize these"},
        {"type": "input_file", **inline},
        {"type": "input_file", "file_id": "file-abc"},
    ]
