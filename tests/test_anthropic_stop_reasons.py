"""Claude's ``stop_reason`` kept where the OpenAI-shaped ``finish_reason`` has no word for it:
a paused turn (``pause_turn``: a long server-tool turn Claude stopped, to be sent back to
continue) is no complete ``stop``, and the raw reason stays in ``metadata["stop_reason"]``,
through the provider and through the transport seam."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llmguard_sdk import (
    AnthropicProvider,
    Cascade,
    ChatRequest,
    ChatResponse,
    Guard,
    GuardedClient,
    OpenAICompatibleProvider,
    TaskRouter,
)
from llmguard_sdk._core.tasks import metric_reason
from llmguard_sdk.cache._storable import storable
from llmguard_sdk.router import finish_reason
from llmguard_sdk.telemetry._signals import signals_of
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.transport import http_client

from .conftest import require_module
from .rawserver import RawServer, http_response, sse_head

QUESTION: Any = [{"role": "user", "content": "Search the web for the latest release."}]


def _message(stop_reason: str) -> bytes:
    return json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "Searching"}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 2},
        }
    ).encode()


def _event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _stream(stop_reason: str) -> bytes:
    start = {"id": "msg_1", "model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 0}}
    return (
        _event("message_start", message=start)
        + _event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Searching"})
        + _event("content_block_stop", index=0)
        + _event("message_delta", delta={"stop_reason": stop_reason}, usage={"output_tokens": 2})
        + _event("message_stop")
    )


@contextmanager
def _claude(stop_reason: str, *, streaming: bool) -> Iterator[Guard]:
    """A Guard over an Anthropic route whose answer (plain or streamed) stops for
    ``stop_reason``."""
    answer = (
        (sse_head(), (_stream(stop_reason),))
        if streaming
        else (http_response(_message(stop_reason)),)
    )
    with RawServer(*answer) as raw:
        route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        with Guard(route, timeout=10, retry=None, environ={}) as guard:
            yield guard


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("pause_turn", "pause_turn"),  # was "stop": the incomplete turn looked finished
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("model_context_window_exceeded", "length"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_a_paused_turn_is_not_a_complete_stop_and_the_raw_reason_is_kept(
    streaming: bool, stop_reason: str, finish_reason: str
) -> None:
    with _claude(stop_reason, streaming=streaming) as guard:
        if streaming:
            with guard.chat(QUESTION, stream=True) as stream:
                assert "".join(chunk.text for chunk in stream) == "Searching"
            response = stream.response
        else:
            response = guard.chat(QUESTION)
    assert response is not None
    assert response.finish_reason == finish_reason
    assert response.metadata["stop_reason"] == stop_reason


def test_a_provider_call_reports_a_paused_turn() -> None:
    with RawServer(http_response(_message("pause_turn"))) as raw:
        provider = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x")
        try:
            request = ChatRequest.model_validate({"messages": QUESTION})
            answer = provider.complete(request, model="claude-x", deadline=time.monotonic() + 10)
        finally:
            provider.close()
    assert answer.finish_reason != "stop"
    assert answer.metadata["stop_reason"] == "pause_turn"
    assert not storable(request, answer)  # an unfinished turn is no answer to cache


@pytest.mark.parametrize("stop_reason", ["pause_turn", "stop_sequence"])
@pytest.mark.parametrize("streaming", [False, True])
def test_anthropic_s_sdk_through_the_seam_sees_claude_s_own_stop_reason(
    streaming: bool, stop_reason: str
) -> None:
    """The seam's Messages answer said ``end_turn`` for a paused turn (and for a stop
    sequence): anthropic's SDK, pointed at the Guard, read a complete answer."""
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    with _claude(stop_reason, streaming=streaming) as guard:
        sdk = anthropic.Anthropic(
            api_key="unused", base_url="http://guard.test", http_client=http_client(guard)
        )
        options: Any = {"model": "claude-x", "max_tokens": 50, "messages": QUESTION}
        if streaming:
            with sdk.messages.stream(**options) as stream:
                message = stream.get_final_message()
        else:
            message = sdk.messages.create(**options)
    assert message.stop_reason == stop_reason


@pytest.mark.parametrize("streaming", [False, True])
def test_openai_s_sdk_through_the_seam_sees_a_paused_turn_as_unfinished(streaming: bool) -> None:
    """Chat completions have no word for a paused turn: the finish reason is Claude's own
    (it was ``stop``); the Responses API says ``incomplete`` (it said ``completed``)."""
    openai = require_module("openai", "openai is a dev dependency")
    with _claude("pause_turn", streaming=streaming) as guard:
        sdk = openai.OpenAI(
            api_key="unused", base_url="http://guard.test/v1", http_client=http_client(guard)
        )
        if streaming:
            chunks = list(
                sdk.chat.completions.create(model="claude-x", messages=QUESTION, stream=True)
            )
            finish = [c.choices[0].finish_reason for c in chunks if c.choices]
            events = list(sdk.responses.create(model="claude-x", input="hi", stream=True))
            status = events[-1].response.status
            assert events[-1].type == "response.incomplete"
        else:
            completion = sdk.chat.completions.create(model="claude-x", messages=QUESTION)
            finish = [completion.choices[0].finish_reason]
            response = sdk.responses.create(model="claude-x", input="hi")
            status = response.status
            assert response.incomplete_details is not None
            assert response.incomplete_details.reason is None  # openai's types have no word
    # OpenAI's schema has no pause_turn (openai-python's Literal: stop, length, tool_calls,
    # content_filter, function_call): an unfinished answer is "length" there
    assert "length" in finish
    assert "pause_turn" not in finish
    assert "stop" not in finish
    assert status == "incomplete"


@pytest.mark.parametrize("streaming", [False, True])
def test_a_paused_turn_s_responses_body_is_valid_by_openai_s_own_types(streaming: bool) -> None:
    """The Responses API said ``incomplete_details.reason: "pause_turn"``, which openai's
    ``IncompleteDetails.reason`` (``max_output_tokens``, ``max_messages``, ``content_filter``,
    ``steered`` or null) refuses: a client validating the body (``Response.model_validate``,
    as frameworks over openai's types may) failed on it. The answer is ``incomplete`` with
    ``reason: null``, as an abort's is: no token limit cut it, and what Claude said is kept."""
    openai = require_module("openai", "openai is a dev dependency")
    from openai.types.responses import Response

    with _claude("pause_turn", streaming=streaming) as guard:
        sdk = openai.OpenAI(
            api_key="unused", base_url="http://guard.test/v1", http_client=http_client(guard)
        )
        if streaming:
            events = list(sdk.responses.create(model="claude-x", input="hi", stream=True))
            assert events[-1].type == "response.incomplete"
            body = events[-1].response.model_dump(mode="json")
        else:
            raw = sdk.responses.with_raw_response.create(model="claude-x", input="hi")
            body = raw.http_response.json()
    response = Response.model_validate(body)  # strict: raised on "pause_turn"
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason is None
    assert response.output_text == "Searching"


@pytest.mark.parametrize("streaming", [False, True])
def test_the_openai_look_alike_client_says_length_and_keeps_the_raw_reason(
    streaming: bool,
) -> None:
    """``GuardedClient`` (the look-alike without openai) gave ``finish_reason="pause_turn"``,
    no value of OpenAI's schema; the Guard's own view keeps Claude's reason."""
    with _claude("pause_turn", streaming=streaming) as guard:
        client = GuardedClient(guard)
        if streaming:
            chunks = list(
                client.chat.completions.create(model="claude-x", messages=QUESTION, stream=True)
            )
            finish = [c.choices[0].finish_reason for c in chunks if c.choices]
        else:
            completion = client.chat.completions.create(model="claude-x", messages=QUESTION)
            finish = [completion.choices[0].finish_reason]
            assert completion.llmguard is not None
            assert completion.llmguard.finish_reason == "pause_turn"
            assert completion.llmguard.metadata["stop_reason"] == "pause_turn"
    assert "length" in finish
    assert "pause_turn" not in finish


def test_incomplete_finish_reasons_are_one_definition() -> None:
    from llmguard_sdk.models import INCOMPLETE_FINISH_REASONS, openai_finish_reason

    assert {"length", "pause_turn"} <= INCOMPLETE_FINISH_REASONS
    assert openai_finish_reason("pause_turn") == "length"
    assert openai_finish_reason("stop") == "stop"
    assert openai_finish_reason(None) is None


def test_a_paused_turn_is_truncated_and_a_cascade_escalates_past_it() -> None:
    """The cascade's default check and the quality signal ``truncated`` knew only ``length``:
    a paused (unfinished) small-tier answer was served and counted as complete."""
    with (
        RawServer(http_response(_message("pause_turn"))) as raw,
        FakeProvider(model="large-model", name="large", reply=lambda body: "Done.") as large,
    ):
        small = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x", name="small")
        router = TaskRouter(
            {"small": ["small"], "large": ["large"]},
            cascades={"auto": Cascade(["small", "large"])},
            default="auto",
        )
        routes = [
            small,
            OpenAICompatibleProvider(large.base_url, model="large-model", name="large"),
        ]
        with Guard(routes, tasks=router, timeout=10, retry=None, environ={}) as guard:
            answer = guard.chat(QUESTION)
    assert answer.route == "large"
    (escalation,) = answer.metadata["cascade"]["escalated_from"]
    assert escalation["reason"] == "finish_reason:pause_turn"
    assert metric_reason("finish_reason:pause_turn") == "finish_reason:pause_turn"
    paused = ChatResponse(text="Searching", finish_reason="pause_turn")
    request = ChatRequest.model_validate({"messages": QUESTION})
    assert signals_of(request, paused, None) == ["truncated"]
    assert finish_reason()(request, paused) == "finish_reason:pause_turn"
