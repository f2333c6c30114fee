"""OpenAI-shaped request parameters as Claude's Messages API takes them: a request's
``extra_body`` less OpenAI's own parameters (Claude answers 400 "Extra inputs are not
permitted" to each) and the Responses API's, its ``user``, ``metadata`` and
``parallel_tool_calls`` as Claude's counterparts, and a ``service_tier`` only where Claude has
it (anthropic's ``MessageCreateParams`` is the list: tests/test_anthropic_params.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..models import ChatRequest
from .wire import RESPONSES_ONLY_KEY, named_keys

logger = logging.getLogger("llmguard_sdk")

OPENAI_ONLY = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "safety_identifier",
        "store",
        "stream_options",
        "top_logprobs",
        "user",
        "verbosity",
        "web_search_options",
    }
)
"""OpenAI chat-completions parameters Claude has no field for (the drop-in client passes them
on in ``extra_body``): Claude answers 400 "Extra inputs are not permitted" to each, so an
Anthropic route leaves them out; a Messages request's (the seam's) go on to other routes."""
_CLAUDE_TIERS = frozenset({"auto", "standard_only"})  # the Messages API's service_tier values


def add_output_format(payload: dict[str, Any], request: ChatRequest) -> None:
    """A ``json_schema`` ``response_format`` as Claude's structured output (in place):
    ``output_config.format``, its type and schema (anthropic's ``JSONOutputFormatParam``; the
    schema's ``name`` and ``strict`` have no place there: Claude's output always follows it).
    Other formats (``json_object``, ``text``) have no counterpart: none is sent."""
    fmt = request.response_format or {}
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if fmt.get("type") == "json_schema" and isinstance(schema, Mapping):
        payload["output_config"] = {"format": {"type": "json_schema", "schema": schema}}


def add_extra_body(payload: dict[str, Any], request: ChatRequest) -> None:
    """Put ``request.extra_body`` into a Messages ``payload`` as Claude takes it (in place):
    less OpenAI's own parameters and those only Responses routes are sent, with OpenAI's
    counterparts of Claude's fields translated. Its ``output_config`` goes over the one a
    ``response_format`` made, key by key (a Messages caller's ``effort`` beside it)."""
    extra = request.extra_body or {}
    responses_only = named_keys(request, RESPONSES_ONLY_KEY)  # (the Responses API's)
    for key, value in extra.items():
        if key not in OPENAI_ONLY and key not in responses_only:
            made = payload.get(key) if key == "output_config" else None
            if isinstance(made, Mapping) and isinstance(value, Mapping):
                value = {**made, **value}
            payload[key] = value
    _openai_counterparts(payload, extra)
    _claude_tier(payload)


def _claude_tier(payload: dict[str, Any]) -> None:
    """Leave out a ``service_tier`` Claude does not have (OpenAI's ``flex``, ``priority``
    ...: Claude answers 400 to it); ``auto`` and ``standard_only`` go on."""
    tier = payload.get("service_tier")
    if "service_tier" in payload and not (isinstance(tier, str) and tier in _CLAUDE_TIERS):
        del payload["service_tier"]
        logger.debug(
            "service_tier %.40r left out of a request to Claude, which has only %s",
            tier,
            " and ".join(sorted(_CLAUDE_TIERS)),
        )


def _openai_counterparts(payload: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """OpenAI's ``user``, ``metadata`` and ``parallel_tool_calls`` as Anthropic's
    ``metadata.user_id`` (the only key its metadata takes) and ``disable_parallel_tool_use``."""
    metadata = payload.get("metadata")
    if isinstance(metadata, Mapping):
        metadata = {k: v for k, v in metadata.items() if k == "user_id"}
        user = extra.get("user")
        if "user_id" not in metadata and isinstance(user, str) and user:
            metadata["user_id"] = user
        payload["metadata"] = metadata
    elif isinstance(extra.get("user"), str) and extra["user"]:
        payload["metadata"] = {"user_id": extra["user"]}
    if payload.get("metadata") == {}:
        del payload["metadata"]
    if extra.get("parallel_tool_calls") is False and payload.get("tools"):
        choice = dict(payload.get("tool_choice") or {"type": "auto"})
        if choice.get("type") != "none":
            payload["tool_choice"] = {**choice, "disable_parallel_tool_use": True}
