"""The quality signals of a finished call (see :mod:`~llmguard_sdk.telemetry._quality`):
what its answer, or its refusal, tells without a grader. No OpenTelemetry here: the response
cache asks it whether an answer may be stored, and ``import llmguard_sdk`` does not import
OpenTelemetry."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import GuardrailRejectedError
from ..models import openai_finish_reason
from ..providers._chat_content import answer_audio

if TYPE_CHECKING:
    from ..models import ChatRequest, ChatResponse

__all__ = ["signals_of"]

_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "number": (int, float),
    "integer": int,
    "boolean": bool,
}


def signals_of(
    request: ChatRequest | None, response: ChatResponse | None, error: BaseException | None
) -> list[str]:
    """The quality signals of one finished call (see :mod:`._quality`'s docs; ``request``
    None: one refused before its request was made, whose error alone tells)."""
    if isinstance(error, GuardrailRejectedError):
        return ["output_filter" if error.stage == "output" else "input_filter"]
    if response is None or response.metadata.get("cache"):
        return []  # a cached answer was judged when it was first served
    found = []
    finish = openai_finish_reason(response.finish_reason)
    refused = finish == "content_filter" or bool(response.metadata.get("refusal"))
    if refused:
        found.append("refusal")
    if finish == "length":  # an incomplete answer
        found.append("truncated")
    if not response.text.strip() and not response.tool_calls:
        # (OpenAI's audio answer has no text; a refusal's text, if any, is its refusal)
        if answer_audio(response.metadata) is None and not refused:
            found.append("empty")
    elif request and request.response_format and not _fits(request.response_format, response.text):
        found.append("json_schema")
    return found


def _fits(response_format: dict[str, Any], text: str) -> bool:
    """Whether ``text`` is the JSON ``response_format`` asks for (top-level type and
    required keys of a ``json_schema``; anything for ``json_object``)."""
    kind = response_format.get("type")
    if kind not in ("json_object", "json_schema"):
        return True
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if kind == "json_object":
        return isinstance(value, dict)
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return True
    expected = _JSON_TYPES.get(str(schema.get("type")))
    if expected is not None and not _is_a(value, expected):
        return False
    required = schema.get("required")
    if isinstance(value, dict) and isinstance(required, list):
        return all(key in value for key in required)
    return True


def _is_a(value: Any, expected: type | tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true is no number
        return expected is bool
    return isinstance(value, expected)
