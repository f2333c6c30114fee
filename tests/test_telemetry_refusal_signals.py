"""A refusal is one quality signal, ``refusal``: OpenAI's refusal comes with ``content:
null`` and the refusal's text in ``message.refusal`` (structured outputs refuse so), a
content filter's stop (Azure OpenAI's) with no content at all. Both were counted ``empty``
as well, so every refusal counted twice on ``llmguard.quality.signals`` and the empty-answer
rate read off it rose with the refusals. A blank answer that is no refusal stays ``empty``.

A raw loopback server answers; the real OpenTelemetry SDK with in-memory exporters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider

from .rawserver import RawServer, http_response
from .test_telemetry import Exported, otel
from .test_telemetry_quality import USER, events, signals

__all__ = ["otel"]  # (the fixture, imported for its name)

_REFUSAL = "I'm sorry, I can't help with that."


@pytest.mark.parametrize(
    ("message", "finish", "said"),
    [
        ({"role": "assistant", "content": None, "refusal": _REFUSAL}, "stop", "refusal"),
        ({"role": "assistant", "content": None}, "content_filter", "refusal"),
        ({"role": "assistant", "content": ""}, "stop", "empty"),
    ],
    ids=["openai-refusal", "content-filter", "blank"],
)
def test_a_refusal_without_content_is_a_refusal_not_also_empty(
    message: dict[str, Any], finish: str, said: str, otel: Exported
) -> None:
    choice = {"index": 0, "message": message, "finish_reason": finish}
    body = {"id": "c-1", "object": "chat.completion", "model": "m", "choices": [choice]}
    with RawServer(http_response(json.dumps(body).encode())) as raw:
        provider = OpenAICompatibleProvider(raw.base_url, model="m", name="strict")
        with Guard(provider, telemetry=otel.telemetry, retry=None, environ={}) as guard:
            answer = guard.chat(USER, feature="faq", response_format={"type": "json_object"})
    assert answer.text == ""
    assert signals(otel) == {(said, "faq", None): 1}
    assert events(otel) == [said]
