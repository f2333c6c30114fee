"""What a chat-completions route's answer says beyond the content, given back through the
drop-in clients' other shapes where those APIs have a place for it (the chat shape gives
it back: ``tests/test_client_message_fields.py``). Through the Responses API
(``client.responses.create``): a message's ``annotations`` (web search's ``url_citation``)
as the text part's annotations, in Responses' shape (plain, and streamed as
``response.output_text.annotation.added``), the answer's ``service_tier`` and its
``created`` as ``created_at``. Through Anthropic's client: the service tier as
``usage.service_tier``, in Claude's words (OpenAI's ``default`` is Claude's
``standard``). All were dropped (the Guard's clock was given as ``created_at``).

What has no place there is left out: a message's ``audio`` (neither API answers audio),
``system_fingerprint``; a citation in Claude's shape needs the ``encrypted_index`` of
Claude's own search, and a thinking block Claude's ``signature``, which a chat route's
answer has not (a Claude route sent them back would refuse the turn)."""

from __future__ import annotations

import json
from typing import Any

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.client import anthropic_client

from .conftest import require_module
from .rawserver import RawServer, http_response, sse_head

_URL = {"url": "https://x.test", "title": "t", "start_index": 0, "end_index": 6}
_CITATION = {"type": "url_citation", "url_citation": _URL}
_HEAD = {"created": 1700000000, "system_fingerprint": "fp_abc", "service_tier": "default"}
_MESSAGE = {"role": "assistant", "content": "Answer.", "annotations": [_CITATION]}
_USAGE = {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}


def _plain() -> bytes:
    choice = {"index": 0, "finish_reason": "stop", "message": _MESSAGE}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m", **_HEAD}
    return http_response(json.dumps({**body, "choices": [choice], "usage": _USAGE}).encode())


def _streamed() -> tuple[bytes, ...]:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", **_HEAD}
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": ""}, None),
        ({"content": "Answer."}, None),
        ({"annotations": [_CITATION]}, None),
        ({}, "stop"),
    ]
    events = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        for delta, finish in deltas
    ]
    events.append({**head, "choices": [], "usage": _USAGE})
    sent = [b"data: %s\n\n" % json.dumps(e).encode() for e in events]
    return (*sent, b"data: [DONE]\n\n")


def _guard(raw: RawServer) -> Guard:
    return Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None)


_RESPONSES_CITATION = {"type": "url_citation", **_URL}


def test_a_response_gives_back_annotations_service_tier_and_created() -> None:
    require_module("openai", "openai is a dev dependency")
    with RawServer(_plain()) as raw, _guard(raw) as guard:
        response = guard.client().responses.create(model="m", input="hi")
    text = response.output[-1].model_dump()["content"][0]
    assert (text["text"], text["annotations"]) == ("Answer.", [_RESPONSES_CITATION])
    assert (response.service_tier, response.created_at) == ("default", 1700000000)


def test_a_responses_stream_gives_back_annotations_service_tier_and_created() -> None:
    require_module("openai", "openai is a dev dependency")
    with RawServer(sse_head(), _streamed()) as raw, _guard(raw) as guard:
        stream = guard.client().responses.create(model="m", input="hi", stream=True)
        events = [event.model_dump() for event in stream]
    added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    assert [(e["annotation"], e["annotation_index"]) for e in added] == [(_RESPONSES_CITATION, 0)]
    assert events[0]["response"]["created_at"] == 1700000000
    done = events[-1]["response"]
    assert done["output"][-1]["content"][0]["annotations"] == [_RESPONSES_CITATION]
    assert (done["service_tier"], done["created_at"]) == ("default", 1700000000)


def test_a_claude_message_gives_back_the_service_tier() -> None:
    require_module("anthropic", "anthropic is a dev dependency")
    with RawServer(_plain()) as raw, _guard(raw) as guard:
        message = anthropic_client(guard).messages.create(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.usage.service_tier == "standard"
