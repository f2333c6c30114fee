"""FakeProvider's tool calls have ids shaped as the real APIs' and new at every call: chat
completions' (and the Responses API's ``call_id``) ``call_`` and 24 letters and digits,
Messages' ``toolu_01`` and 22 base58 characters. Every call was ``call_fake_0`` /
``toolu_fake_0``, so an agent loop's second call repeated the first one's id (Claude refuses
a conversation whose tool uses share an id) and code keyed on ids was never exercised. Its
in-stream ``event: error`` keeps the shape anthropic-python's ``ErrorResponse`` reads (a
``details`` object only where a cause is named: the SDK's error objects have none)."""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic
import httpx
import openai
from anthropic.types.shared import ErrorResponse

from llmguard_sdk.testing import FakeProvider, Fault

from .test_fake_api_shapes import CHAT_CALL, CLAUDE_CALL, RESPONSES_CALL

CHAT_ID = re.compile(r"call_[A-Za-z0-9]{24}")
CLAUDE_ID = re.compile(r"toolu_01[1-9A-HJ-NP-Za-km-z]{22}")


def _chat_ids(oai: openai.OpenAI) -> list[str]:
    plain = [
        c.id for c in oai.chat.completions.create(**CHAT_CALL).choices[0].message.tool_calls or ()
    ]
    stream = oai.chat.completions.create(**CHAT_CALL, stream=True)
    deltas = [c for chunk in stream for c in chunk.choices[0].delta.tool_calls or ()]
    streamed = [c.id for c in deltas if c.id is not None]
    responses = [
        i.call_id
        for i in oai.responses.create(**RESPONSES_CALL).output
        if i.type == "function_call"
    ]
    return [*plain, *streamed, *responses]


def test_chat_and_responses_call_ids_are_openai_s_shape_and_new_each_call(
    oai: openai.OpenAI,
) -> None:
    ids = _chat_ids(oai) + _chat_ids(oai)
    assert len(ids) == 6
    assert all(CHAT_ID.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == 6


def test_messages_tool_use_ids_are_anthropic_s_shape_and_new_each_call(
    claude: anthropic.Anthropic,
) -> None:
    ids = []
    for _ in range(2):
        ids += [b.id for b in claude.messages.create(**CLAUDE_CALL).content if b.type == "tool_use"]
        with claude.messages.stream(**CLAUDE_CALL) as stream:
            final = stream.get_final_message()
        ids += [b.id for b in final.content if b.type == "tool_use"]
    assert len(ids) == 4
    assert all(CLAUDE_ID.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == 4


def _stream_error(fake: FakeProvider, fault: Fault) -> dict[str, Any]:
    fake.script(fault)
    body = {**CLAUDE_CALL, "messages": [{"role": "user", "content": "hi there"}], "stream": True}
    del body["tools"], body["tool_choice"]
    sent = httpx.post(
        fake.url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
    )
    event = sent.text.split("event: error\ndata: ", 1)[1].split("\n", 1)[0]
    found: dict[str, Any] = json.loads(event)
    return found


def test_the_in_stream_error_event_is_the_sdk_s_error_response(fake: FakeProvider) -> None:
    plain = _stream_error(fake, Fault(stream_error_after=1))
    assert ErrorResponse.model_validate(plain).error.type == "overloaded_error"
    assert set(plain["error"]) == {"type", "message"}  # (no "details": null)
    named = _stream_error(fake, Fault(stream_error_after=1, error_code="x_cause"))
    assert named["error"]["details"] == {"error_code": "x_cause"}
