"""OpenAI-shaped answers say a finish reason of OpenAI's schema (``stop``, ``length``,
``tool_calls``, ``content_filter``, ``function_call``), whatever reason the answer came with:
the degraded answer's ``degraded``, a compatible server's own words (Mistral's
``model_length``, TGI's ``eos_token``, a relayed ``refusal``, a word nobody knows). The raw
reason stays in the Guard's own view (``completion.llmguard.finish_reason``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseCompletedEvent, ResponseIncompleteEvent

from llmguard_sdk import Guard, GuardedClient, OpenAICompatibleProvider
from llmguard_sdk.models import openai_finish_reason
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .rawserver import RawServer, chat_answer, chat_chunk_event, sse_head

MakeGuard = Callable[..., Guard]
OPENAI_WORDS = {"stop", "length", "tool_calls", "content_filter", "function_call"}
DEGRADED = "Answers are limited right now; please try again shortly."


@pytest.mark.parametrize(
    ("reason", "word"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("content_filter", "content_filter"),
        ("function_call", "function_call"),
        ("pause_turn", "length"),  # Claude's paused turn: unfinished
        ("degraded", "stop"),  # the configured degraded answer: a whole answer of its own
        ("refusal", "content_filter"),  # Claude's, relayed raw by a compatible server
        ("end_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_length", "length"),  # Mistral's: the context window ended it
        ("eos_token", "stop"),  # TGI's
        ("SAFETY", "content_filter"),  # Gemini's, relayed raw
        ("something_new", "stop"),  # a word nobody knows
        ("", None),  # a chunk that does not finish (some servers send "" for null)
        (None, None),
    ],
)
def test_every_finish_reason_has_its_openai_word(reason: str | None, word: str | None) -> None:
    assert openai_finish_reason(reason) == word


def _sdk(guard: Guard) -> openai.OpenAI:
    """openai's own client over the Guard's transport (the seam), as ``guard.client()``
    gives it where openai is installed."""
    client = guard.client()
    assert isinstance(client, openai.OpenAI)
    return client


def _finishes(client: Any, streaming: bool) -> tuple[list[str | None], Any]:
    """The finish reasons a client's answer to USER says (a stream's, on its chunks with a
    choice), and its completion (``None`` for a stream)."""
    if streaming:
        chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
        return [c.choices[0].finish_reason for c in chunks if c.choices], None
    completion = client.chat.completions.create(model="m", messages=USER)
    return [completion.choices[0].finish_reason], completion


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("client", ["openai", "look-alike"])
def test_the_degraded_answer_finishes_with_stop(
    fake: FakeProvider, make_guard: MakeGuard, client: str, streaming: bool
) -> None:
    """It said ``finish_reason: "degraded"``, no value of OpenAI's schema."""
    guard = make_guard(fake, retry=None, breaker=None, degraded=DEGRADED)
    fake.always(Fault(status=503))
    sdk = _sdk(guard) if client == "openai" else GuardedClient(guard)
    finish, completion = _finishes(sdk, streaming)
    assert finish[-1] == "stop"
    assert set(finish) <= OPENAI_WORDS | {None}
    if completion is not None:
        assert completion.choices[0].message.content == DEGRADED
        assert completion.llmguard.finish_reason == "degraded"
        assert completion.llmguard.metadata["degraded"] is True


def _server(reason: str, streaming: bool) -> RawServer:
    """A compatible server whose answer "Done." finishes for ``reason``."""
    if streaming:
        events = chat_chunk_event({"role": "assistant", "content": "Done."})
        events += chat_chunk_event({}, reason) + b"data: [DONE]\n\n"
        return RawServer(sse_head(), (events,))
    return RawServer(chat_answer("Done.", reason))


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("reason", "word"),
    [("model_length", "length"), ("refusal", "content_filter"), ("something_new", "stop")],
)
def test_a_server_s_own_finish_reason_reaches_openai_s_sdk_in_openai_s_words(
    reason: str, word: str, streaming: bool
) -> None:
    """A compatible server's reason reached the SDK as it was sent."""
    with _server(reason, streaming) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="server")
        with Guard(route, retry=None, timeout=10, environ={}) as guard:
            finish, completion = _finishes(_sdk(guard), streaming)
            if not streaming:
                assert completion.llmguard.finish_reason == reason  # the raw reason kept
            else:
                with guard.chat(USER, stream=True) as stream:
                    list(stream)
                assert stream.response is not None
                assert stream.response.finish_reason == reason
    assert finish[-1] == word
    assert set(finish) <= OPENAI_WORDS | {None}


def _responses_answer(reason: str, streaming: bool) -> Response:
    """The Responses API's answer, through openai's SDK, to a server whose answer "Done."
    finishes for ``reason`` (a stream's: its last event's), validated strictly by openai's
    own types."""
    with _server(reason, streaming) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="server")
        with Guard(route, retry=None, timeout=10, environ={}) as guard:
            sdk = _sdk(guard)
            if streaming:
                events = list(sdk.responses.create(model="m", input="hi", stream=True))
                assert isinstance(events[-1], ResponseCompletedEvent | ResponseIncompleteEvent)
                body = events[-1].response.model_dump(mode="json")
            else:
                answer = sdk.responses.with_raw_response.create(model="m", input="hi")
                body = answer.http_response.json()
    return Response.model_validate(body)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("reason", "status", "why"),
    [
        ("model_length", "incomplete", "max_output_tokens"),
        ("MAX_TOKENS", "incomplete", "max_output_tokens"),  # Gemini's, relayed raw
        ("model_context_window_exceeded", "incomplete", "max_output_tokens"),
        ("refusal", "incomplete", "content_filter"),
        ("degraded", "completed", None),
        ("something_new", "completed", None),
    ],
)
def test_the_responses_api_reads_a_server_s_own_finish_reason_in_openai_s_words(
    reason: str, status: str, why: str | None, streaming: bool
) -> None:
    """The Responses API's status read only OpenAI's words: Mistral's ``model_length`` (a
    cut answer) said ``completed``, as chat completions said the raw word."""
    response = _responses_answer(reason, streaming)
    assert response.status == status
    details = response.incomplete_details
    assert (details.reason if details is not None else None) == why


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("reason", ["abort", "error", "insufficient_system_resource"])
def test_an_answer_broken_off_is_incomplete_without_a_reason_it_did_not_have(
    reason: str, streaming: bool
) -> None:
    """vLLM's ``abort``, Mistral's and vLLM's ``error``, DeepSeek's
    ``insufficient_system_resource``: the Responses API said ``incomplete_details.reason:
    "max_output_tokens"``, as if the token limit had cut the answer. It is incomplete, with
    ``reason: null`` (openai-python's ``IncompleteDetails.reason`` is Optional, so a client
    reading openai's types parses it; ``failed`` would turn a delivered answer into an error
    for a client, and for a Guard reading this Guard)."""
    response = _responses_answer(reason, streaming)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason is None
    assert response.output_text == "Done."  # what the server said before it broke off
