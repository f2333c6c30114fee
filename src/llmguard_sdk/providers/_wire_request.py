"""The request half of the chat-completions wire format: a call's JSON body (its payload, the
``extra_body`` a route sends, an Anthropic-shaped tool as a function tool) and its encoding.
Re-exported by :mod:`~llmguard_sdk.providers.wire`, where callers import it from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import RequestValidationError
from ..models import ChatRequest
from ._anthropic_only import leave_out_for_chat

__all__ = [
    "ANTHROPIC_ONLY_KEY",
    "OPENAI_HINT_KEY",
    "RESPONSES_ONLY_KEY",
    "build_payload",
    "encode_payload",
    "function_tool",
    "named_keys",
    "sent_extra_body",
]

ANTHROPIC_ONLY_KEY = "llmguard.anthropic_only"
"""``ChatRequest.metadata`` key: the ``extra_body`` keys (comma-separated) that only Anthropic
routes send, parameters of Anthropic's Messages API that chat completions and Responses lack
(the transport seam's ``/messages`` names here every field of a Messages request it does not
translate: ``top_k``, ``thinking``, ``container`` ...), and what else of the request only
they send (:data:`CACHE_CONTROL`, :data:`SERVER_TOOLS`, Claude's own tool fields and headers)."""
RESPONSES_ONLY_KEY = "llmguard.responses_only"
"""``ChatRequest.metadata`` key: the ``extra_body`` keys (comma-separated) that only OpenAI
Responses routes send, parameters of the Responses API that chat completions and Anthropic's
Messages lack (the transport seam's ``/responses`` names ``include`` here)."""
OPENAI_HINT_KEY = "llmguard.openai_hints"
"""``ChatRequest.metadata`` key: the ``extra_body`` keys (comma-separated) that are hints for
OpenAI's own API (a :class:`~llmguard_sdk.prompts.PromptBuilder`'s ``prompt_cache_key``): a
chat-completions route sends them only where its provider's ``send_cache_key`` is on (OpenAI's
and Azure OpenAI's APIs by default), as other servers refuse fields they do not know (Groq
with a 400, Mistral with a 422)."""
_PAYLOAD_FIELDS = set(
    {
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "tools",
        "tool_choice",
        "response_format",
    }
)


def build_payload(
    request: ChatRequest, *, model: str, stream: bool, hints: bool = True
) -> dict[str, Any]:
    """The JSON body of a chat-completions call for ``request``; without ``hints``, less the
    ``extra_body`` keys ``request.metadata[OPENAI_HINT_KEY]`` names."""
    payload: dict[str, Any] = {
        "model": model,
        # a tool message's is_error and an assistant's thinking are Anthropic's: chat
        # completions has no such fields
        "messages": [
            m.model_dump(exclude_none=True, exclude={"is_error", "thinking"})
            for m in request.messages
        ],
    }
    payload.update(request.model_dump(include=_PAYLOAD_FIELDS, exclude_none=True))
    if request.tools and any("type" not in tool for tool in request.tools):  # Anthropic's
        payload["tools"] = [function_tool(tool) for tool in payload["tools"]]
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    payload.update(sent_extra_body(request))
    if not hints:
        leave_out_hints(payload, request)
    leave_out_for_chat(payload, named_keys(request, ANTHROPIC_ONLY_KEY), request.extra_body)
    return payload


def leave_out_hints(payload: dict[str, Any], request: ChatRequest) -> None:
    """Take the OpenAI hints a builder added (the keys ``request.metadata[OPENAI_HINT_KEY]``
    names: its ``prompt_cache_key``) out of ``payload``, for a route whose ``send_cache_key``
    is off (chat completions and Responses alike)."""
    for key in named_keys(request, OPENAI_HINT_KEY):
        payload.pop(key, None)


def function_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """``tool`` as chat completions takes it: one in Anthropic's shape (a ``name`` and an
    ``input_schema``, no ``type``) as a function tool (its name, description, schema and
    ``strict``: none of Claude's own fields, its ``cache_control``, ``input_examples`` ...);
    any other as it is."""
    if "type" in tool or not isinstance(tool.get("name"), str):
        return dict(tool)
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema") or {"type": "object"}
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def named_keys(request: ChatRequest, key: str) -> list[str]:
    """The ``extra_body`` keys ``request.metadata[key]`` names (:data:`ANTHROPIC_ONLY_KEY`,
    :data:`RESPONSES_ONLY_KEY`); a new list, at once where none are (as for most calls)."""
    named = request.metadata.get(key) if request.metadata else None
    return [name for name in named.split(",") if name] if named else []


def sent_extra_body(request: ChatRequest, *, responses: bool = False) -> dict[str, Any]:
    """``request.extra_body`` as a route that does not speak Anthropic's API sends it: less
    the keys ``request.metadata[ANTHROPIC_ONLY_KEY]`` names, and unless ``responses`` (a
    Responses route) those ``request.metadata[RESPONSES_ONLY_KEY]`` names (all of it when
    none are named)."""
    extra = dict(request.extra_body or {})
    dropped = named_keys(request, ANTHROPIC_ONLY_KEY)
    if not responses:
        dropped += named_keys(request, RESPONSES_ONLY_KEY)
    for key in dropped:
        extra.pop(key, None)
    return extra


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """``payload`` as compact JSON; NaN, infinity or unencodable values are a request error."""
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise RequestValidationError(f"request cannot be sent as JSON: {exc}") from None
