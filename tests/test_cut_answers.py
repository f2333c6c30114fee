"""A compatible server's word for a cut answer (Mistral's ``model_length``, vLLM's ``abort``,
DeepSeek's ``insufficient_system_resource``, a raw ``max_tokens``, ``error``) is an
incomplete answer wherever the SDK asks: the cascade escalates past it, the quality signal
``truncated`` counts it and the response cache does not keep it. One definition:
:data:`~llmguard_sdk.models.INCOMPLETE_FINISH_REASONS` is what
:func:`~llmguard_sdk.models.openai_finish_reason` says ``length`` for."""

from __future__ import annotations

import socket

import pytest

from llmguard_sdk import (
    Cascade,
    ChatRequest,
    ChatResponse,
    Guard,
    OpenAICompatibleProvider,
    TaskRouter,
)
from llmguard_sdk.cache._storable import storable
from llmguard_sdk.models import INCOMPLETE_FINISH_REASONS, openai_finish_reason
from llmguard_sdk.router import finish_reason
from llmguard_sdk.telemetry._signals import signals_of
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .rawserver import RawServer, chat_answer

CUT = ["model_length", "abort", "insufficient_system_resource", "max_tokens", "error", "MAX_TOKENS"]


class _Counting(RawServer):
    """A RawServer that counts the requests it answered (one per connection)."""

    def __init__(self, head: bytes) -> None:
        self.requests = 0
        super().__init__(head)

    def handle(self, conn: socket.socket) -> None:
        self.requests += 1
        super().handle(conn)


def test_the_incomplete_reasons_are_those_said_as_length() -> None:
    """The set held ``length`` and ``pause_turn`` only; the mapping said ``length`` for more."""
    from llmguard_sdk import models

    table = models._NEAREST_OPENAI_REASON
    said_length = {reason for reason in table if openai_finish_reason(reason) == "length"}
    assert said_length | {"length"} == INCOMPLETE_FINISH_REASONS
    assert {"model_length", "abort", "insufficient_system_resource", "error"} <= said_length
    assert all(openai_finish_reason(reason) == "length" for reason in INCOMPLETE_FINISH_REASONS)


@pytest.mark.parametrize("reason", CUT)
def test_a_cut_answer_is_truncated_and_fails_the_cascade_s_default_check(reason: str) -> None:
    request = ChatRequest.model_validate({"messages": USER})
    cut = ChatResponse(text="Half an", finish_reason=reason)
    assert signals_of(request, cut, None) == ["truncated"]
    assert finish_reason()(request, cut) == f"finish_reason:{reason}"
    whole = ChatResponse(text="Whole.", finish_reason="eos_token")  # TGI's natural stop
    assert finish_reason()(request, whole) is None
    assert finish_reason(reason)(request, cut) == f"finish_reason:{reason}"  # named: as it is


def test_a_cascade_escalates_past_a_server_s_cut_answer() -> None:
    """Mistral's ``model_length`` was a complete answer to the cascade: served from the small
    tier, half an answer."""
    with (
        RawServer(chat_answer("Half an", "model_length")) as raw,
        FakeProvider(model="large-model", name="large", reply=lambda body: "Done.") as large,
    ):
        router = TaskRouter(
            {"small": ["small"], "large": ["large"]},
            cascades={"auto": Cascade(["small", "large"])},
            default="auto",
        )
        routes = [
            OpenAICompatibleProvider(raw.base_url, model="m", name="small"),
            OpenAICompatibleProvider(large.base_url, model="large-model", name="large"),
        ]
        with Guard(routes, tasks=router, timeout=10, retry=None, environ={}) as guard:
            answer = guard.chat(USER)
    assert answer.route == "large"
    assert answer.text == "Done."
    (escalation,) = answer.metadata["cascade"]["escalated_from"]
    assert escalation["reason"] == "finish_reason:model_length"


@pytest.mark.parametrize("reason", ["model_length", "abort"])
def test_a_cut_answer_is_not_cached(reason: str) -> None:
    with _Counting(chat_answer("Half an", reason)) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="server")
        with Guard(route, cache=True, retry=None, timeout=10, environ={}) as guard:
            first = guard.chat(USER)
            again = guard.chat(USER)
    assert first.finish_reason == again.finish_reason == reason
    assert again.route == "server"  # asked again, not the cut answer from the cache
    assert raw.requests == 2


@pytest.mark.parametrize("reason", ["refusal", "SAFETY", "prohibited_content", "content_filter"])
def test_a_refused_or_blocked_answer_relayed_raw_is_a_refusal_and_fails_the_default_check(
    reason: str,
) -> None:
    """Claude's ``refusal`` or Gemini's ``SAFETY`` relayed raw by a compatible server is what
    OpenAI calls ``content_filter``: the quality signal counted no refusal and the cascade
    served the small tier's refusal."""
    request = ChatRequest.model_validate({"messages": USER})
    refused = ChatResponse(text="I can't help with that.", finish_reason=reason)
    assert signals_of(request, refused, None) == ["refusal"]
    assert finish_reason()(request, refused) == f"finish_reason:{reason}"


@pytest.mark.parametrize(
    ("reason", "kept"),
    [("STOP", True), ("eos_token", True), ("End_Turn", True), ("SAFETY", False), ("odd", False)],
)
def test_a_natural_stop_is_cached_in_any_case_and_an_unknown_word_is_not(
    reason: str, kept: bool
) -> None:
    """Gemini's raw ``STOP`` and TGI's ``eos_token`` end a whole answer: it was never cached
    (only the lower-case OpenAI and Claude words were); a word of no known meaning may be a
    cut answer, so it stays out."""
    request = ChatRequest.model_validate({"messages": USER})
    answer = ChatResponse(text="Paris is the capital of France.", finish_reason=reason)
    assert storable(request, answer) is kept
