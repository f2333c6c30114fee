"""Anthropic's Messages API on the wire: ``POST /v1/messages``, JSON or SSE events.

The request becomes a chat call of the Guard (any route answers it), and the answer goes back
as Anthropic's ``message`` (or ``message_start`` ... ``message_stop`` events): text and
``tool_use`` blocks, ``stop_reason``, usage with ``cache_read_input_tokens``. The stop reason
is Claude's own where an Anthropic route served (its ``metadata["stop_reason"]``: a paused
turn stays ``pause_turn``, a stop sequence ``stop_sequence``), else the finish reason's
counterpart.

The fields chat completions has counterparts for are translated (``system``, ``tools`` (a
client tool's ``strict`` too), ``tool_choice``, ``stop_sequences`` as ``stop``,
``metadata.user_id`` as ``user``, an ``output_config.format`` JSON schema as
``response_format``). More ``stop_sequences`` than chat's ``stop`` takes (4) are all sent to
Anthropic routes, the first 4 to chat-completions routes (with a warning; the Responses API
has no stop sequences). Every other field goes on in
``extra_body`` and reaches Anthropic routes only (named under
:data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`): ``thinking``, ``top_k``,
``service_tier`` (Claude's ``standard_only``), ``container``, ``output_config`` whole (its
``effort`` too, as ``thinking``), ``inference_geo``, ``speed``, ``diagnostics``, a top-level
``cache_control``, the beta API's ``mcp_servers`` and ``context_management``, and any field
Claude adds: chat-completions and Responses routes, which answer 400 to a field they do not
know, do not get them. (A field named as one of OpenAI's chat-completions parameters,
``reasoning_effort`` say, goes on to those routes: an Anthropic route leaves it out.) So it
is with ``cache_control`` breakpoints on system, message and tool blocks: Anthropic routes
send them (prompt caching works through the seam), other routes leave them out, and with
Claude's server tools (``web_search``, code execution ...): Anthropic routes get them as they
are, other routes the function tools alone; with a client tool's fields chat's function
tool lacks (``input_examples``, ``defer_loading`` ...); and with the headers anthropic's SDK
sends for its caller (``anthropic-beta``, the workspace and user-profile ids): Anthropic routes
only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._core.assembly import CallSlots, call_function
from ..client import _call_user
from ..errors import LLMGuardError, RequestValidationError
from ..models import ChatResponse, StreamChunk, Usage
from ..providers._anthropic_only import CLAUDE_TOOL_FIELDS, MAX_STOP
from ..providers._anthropic_params import OPENAI_ONLY
from ..providers.wire import ANTHROPIC_ONLY_KEY, CACHE_CONTROL, SERVER_TOOLS
from . import _wire
from ._chat import guard_arguments
from ._wire import Incoming

_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "pause_turn": "pause_turn",  # Claude's own, kept by AnthropicProvider
}
_KNOWN = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stream",
        "temperature",
        "top_p",
        "stop_sequences",
        "tools",
        "tool_choice",
        "metadata",
    }
)
_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",  # Claude's own overload, kept as the route answered it
}


def _bad(message: str) -> RequestValidationError:
    return RequestValidationError(f"messages request: {message}")


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _image(block: Mapping[str, Any]) -> dict[str, Any]:
    source = block.get("source") or {}
    if not isinstance(source, dict):
        raise _bad("an image block's source must be an object")
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    else:
        url = str(source.get("url", ""))
    return {"type": "image_url", "image_url": {"url": url}}


def _turn(message: object) -> list[dict[str, Any]]:
    """One Anthropic turn as chat messages (tool results become tool messages)."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise _bad("each message needs the role user or assistant")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad("message content must be a string or a list of blocks")
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thoughts: list[dict[str, Any]] = []  # Claude's thinking blocks, sent back as they came
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise _bad("a text block needs its text")
            parts.append(_cached({"type": "text", "text": block["text"]}, block))
        elif kind == "image":
            parts.append(_cached(_image(block), block))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind == "tool_result":
            result = {
                "role": "tool",
                "tool_call_id": block.get("tool_use_id"),
                "content": _text(block.get("content")),
            }
            if block.get("is_error") is True:  # the tool failed (Anthropic routes say so)
                result["is_error"] = True
            out.append(result)
        elif kind in ("thinking", "redacted_thinking"):
            thoughts.append(block)
        else:
            raise _bad(f"content block type {kind!r} is not supported")
    if parts or calls:
        text_only = all(p["type"] == "text" and "cache_control" not in p for p in parts)
        body: Any = "".join(p["text"] for p in parts) if text_only else parts
        turn: dict[str, Any] = {"role": role, "content": body or None}
        if calls:
            turn["tool_calls"] = calls
        if thoughts:
            turn["thinking"] = thoughts
        out.append(turn)
    return out


def _cached(part: dict[str, Any], block: Mapping[str, Any]) -> dict[str, Any]:
    """``part`` with ``block``'s cache breakpoint, if it has one (Anthropic routes send it;
    chat routes leave it out: :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`)."""
    if "cache_control" in block:
        part["cache_control"] = block["cache_control"]
    return part


def _system(system: object) -> str | list[dict[str, Any]]:
    """The system prompt: its text, or its text blocks where one holds a cache breakpoint."""
    if isinstance(system, list) and any(
        isinstance(b, dict) and "cache_control" in b for b in system
    ):
        return [
            _cached({"type": "text", "text": str(b.get("text", ""))}, b)
            for b in system
            if isinstance(b, dict)
        ]
    return _text(system)


def _has_breakpoints(body: Mapping[str, Any]) -> bool:
    """Whether the request's system, tools or message blocks hold cache breakpoints."""
    turns = body.get("messages")
    lists = [body.get("system"), body.get("tools")]
    lists += (
        [t.get("content") for t in turns if isinstance(t, dict)] if isinstance(turns, list) else []
    )
    return any(
        isinstance(b, dict) and "cache_control" in b
        for blocks in lists
        if isinstance(blocks, list)
        for b in blocks
    )


def _tool_choice(choice: object) -> object:
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return {"any": "required", "auto": "auto", "none": "none"}.get(str(kind))


def chat_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages request as chat-completions ``create()`` keywords."""
    messages: list[dict[str, Any]] = []
    system = _system(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    turns, tools = body.get("messages") or [], body.get("tools") or []
    if not isinstance(turns, list) or not isinstance(tools, list):
        raise _bad("messages and tools must be lists")
    for turn in turns:
        messages.extend(_turn(turn))
    params: dict[str, Any] = {"messages": messages, "model": body.get("model")}
    for key in ("max_tokens", "temperature", "top_p"):
        if body.get(key) is not None:
            params[key] = body[key]
    stops = body.get("stop_sequences")
    if stops:
        params["stop"] = stops[:MAX_STOP] if isinstance(stops, list) else stops
        if isinstance(stops, list) and len(stops) > MAX_STOP:
            params["stop_sequences"] = stops  # all of them: Anthropic routes only
    if tools:
        params["tools"] = [_tool(t) for t in tools if isinstance(t, dict)]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        params["tool_choice"] = choice
    given = body.get("tool_choice")
    if isinstance(given, dict) and given.get("disable_parallel_tool_use") is True:
        params["parallel_tool_calls"] = False  # Anthropic routes: back to the tool choice
    user = _user_id(body)
    if user is not None:
        params["user"] = user
    output = _output_format(body.get("output_config"))
    if output is not None:
        params["response_format"] = output
    params.update({k: v for k, v in body.items() if k not in _KNOWN})
    return params


def _user_id(body: Mapping[str, Any]) -> str | None:
    """Claude's ``metadata.user_id``: the call's user (``None`` where it is no string)."""
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    return user if isinstance(user, str) else None


def _is_server_tool(tool: object) -> bool:
    """Whether ``tool`` is one of Claude's server tools (a ``type`` other than ``custom``)."""
    return isinstance(tool, dict) and tool.get("type") not in (None, "custom")


_FUNCTION_FIELDS = frozenset({"type", "name", "description", "input_schema", "strict"})


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Messages tool as chat's function tool (its ``strict`` too), with Claude's own fields
    beside it (``cache_control``, ``input_examples``, ``defer_loading`` ...: Anthropic routes
    only, :data:`~llmguard_sdk.providers._anthropic_only.CLAUDE_TOOL_FIELDS`); a server tool
    as it is (Anthropic routes only: :data:`~llmguard_sdk.providers.wire.SERVER_TOOLS`)."""
    if _is_server_tool(tool):
        return dict(tool)
    function = {
        "name": tool.get("name"),
        "description": tool.get("description", ""),
        "parameters": tool.get("input_schema", {}),
    }
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function, **_claude_fields(tool)}


def _claude_fields(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a client tool chat's function tool lacks."""
    return {k: v for k, v in tool.items() if k not in _FUNCTION_FIELDS}


def _output_format(config: object) -> dict[str, Any] | None:
    """``output_config``'s JSON schema (Claude's structured output) as chat's
    ``response_format``; ``None`` for none (its ``effort`` has no chat counterpart every
    model takes: Anthropic routes only, as ``thinking``)."""
    fmt = config.get("format") if isinstance(config, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    if not isinstance(fmt.get("schema"), dict):
        raise _bad("output_config.format needs a schema object")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def anthropic_only(body: Mapping[str, Any]) -> list[str]:
    """The fields of Messages request ``body`` only Anthropic routes are sent: all but those
    :func:`chat_params` translates and OpenAI's own parameters."""
    return [key for key in body if key not in _KNOWN and key not in OPENAI_ONLY]


def _usage(usage: Usage | None) -> dict[str, Any]:
    """A message's usage in Claude's words; the route's web searches in its
    ``server_tool_use``, where it ran any."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    uncached = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_input_tokens
    body: dict[str, Any] = {
        "input_tokens": max(0, uncached),
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "cache_creation_input_tokens": usage.cache_write_input_tokens,
    }
    if usage.web_search_requests:
        body["server_tool_use"] = {"web_search_requests": usage.web_search_requests}
    return body


# Claude's service tiers, and OpenAI's counterparts of them (its "flex" and "scale" have none)
_TIERS = {"standard": "standard", "priority": "priority", "batch": "batch", "default": "standard"}


def _tier(usage: Usage | None) -> dict[str, str]:
    """A message's ``usage.service_tier`` in Claude's words: the route's (Claude's own, or
    OpenAI's ``default`` as ``standard``); none where the route said none Claude has."""
    tier = _TIERS.get(usage.service_tier or "") if usage is not None else None
    return {"service_tier": tier} if tier else {}


def _tool_use(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call_function(call)
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = {}
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": arguments,
    }


def _thinking(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The thinking blocks an Anthropic route's answer (or a chunk of it) carries."""
    blocks = metadata.get("thinking")
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def _message_id(given: str | None) -> str:
    return given if given and given.startswith("msg") else _wire.new_id("msg")


class MessagesWire:
    """Messages: parse a request, answer a ``message`` or its events."""

    def arguments(self, body: dict[str, Any], incoming: Incoming) -> dict[str, Any]:
        """``body`` (a Messages request) as Guard arguments; its Anthropic-only parameters
        named for the routes that do not speak Anthropic to leave out."""
        arguments = guard_arguments(chat_params(body), incoming)
        only = anthropic_only(body)
        if _has_breakpoints(body):
            only.append(CACHE_CONTROL)  # chat routes send none
        tools = body.get("tools")
        tools = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        if any(_is_server_tool(t) for t in tools):
            only.append(SERVER_TOOLS)
        if any(_claude_fields(t) for t in tools if not _is_server_tool(t)):
            only.append(CLAUDE_TOOL_FIELDS)
        if "stop_sequences" in (arguments.get("extra_body") or {}):
            only.append("stop_sequences")  # more than chat's stop takes
        _wire.name_only(arguments, ANTHROPIC_ONLY_KEY, only)  # (Claude's headers: named)
        return arguments

    def user(self, body: Mapping[str, Any]) -> str | None:
        """The call's user, as its arguments will have it: ``metadata.user_id``, unless the
        body has a ``user`` (or ``extra_body``) of its own, not Anthropic's API's: those go on
        to the arguments as they are."""
        return _call_user({"user": _user_id(body), **body})

    def answer(self, response: ChatResponse, request: Mapping[str, Any]) -> dict[str, Any]:
        """The ``message`` object of ``response`` (the request's body says nothing in it)."""
        content = list(_thinking(response.metadata))  # Claude's, as it sent them
        if response.text or not response.tool_calls:
            content.append({"type": "text", "text": response.text})
        content += [_tool_use(c) for c in response.tool_calls or ()]
        return {
            "id": _message_id(response.id),
            "type": "message",
            "role": "assistant",
            "model": response.model,
            "content": content,
            "stop_reason": _stop_reason(response.finish_reason, response.metadata),
            "stop_sequence": None,
            "usage": {**_usage(response.usage), **_tier(response.usage)},
        }

    def writer(self, arguments: Mapping[str, Any], body: Mapping[str, Any]) -> EventsWriter:
        """A writer for one stream's events."""
        model = arguments.get("model")
        return EventsWriter(model if isinstance(model, str) else "")

    def error(self, exc: LLMGuardError) -> dict[str, Any]:
        """Anthropic's error body (an overflow in Anthropic's words)."""
        kind = _ERRORS.get(_wire.status_of(exc), "api_error")
        text = _wire.overflow_message(exc) if _wire.overflows(exc) else str(exc)
        return {"type": "error", "error": {"type": kind, "message": text}}


def _stop_reason(finish_reason: str | None, metadata: Mapping[str, Any]) -> str:
    """Anthropic's ``stop_reason`` of an answer: an Anthropic route's own (``metadata``'s
    ``stop_reason``), else the counterpart of ``finish_reason`` (``end_turn`` for one that
    has none)."""
    raw = metadata.get("stop_reason")
    if isinstance(raw, str) and raw:
        return raw
    return _STOP.get(finish_reason or "stop", "end_turn")


class EventsWriter:
    """Anthropic's stream events for the transport's stream loop."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._started = False
        self._block: int | None = None  # the open content block
        self._blocks = 0
        self._calls: dict[int, int] = {}  # tool call index -> block index
        self._slots = CallSlots()  # (a piece's call, as the Guard's assembly keys it)
        self._finish: str | None = None
        self._stop: object = None  # an Anthropic route's own stop reason
        self._usage: Usage | None = None

    def _start(self, chunk: StreamChunk | None) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "id": _message_id(chunk.id if chunk else None),
            "type": "message",
            "role": "assistant",
            "model": (chunk.model if chunk else "") or self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return _wire.sse({"type": "message_start", "message": message}, "message_start")

    def _open(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._block = self._blocks
        self._blocks += 1
        event = {"type": "content_block_start", "index": self._block, "content_block": block}
        return out + _wire.sse(event, "content_block_start")

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        event = {"type": "content_block_stop", "index": self._block}
        self._block = None
        return _wire.sse(event, "content_block_stop")

    def _delta(self, delta: dict[str, Any]) -> bytes:
        event = {"type": "content_block_delta", "index": self._block, "delta": delta}
        return _wire.sse(event, "content_block_delta")

    def _thought(self, block: Mapping[str, Any]) -> bytes:
        """A whole thinking block as Claude streams one: its start, its thinking and its
        signature as deltas (a redacted block whole at its start), its stop."""
        if block.get("type") != "thinking":
            return self._open(dict(block)) + self._close()
        out = self._open({"type": "thinking", "thinking": "", "signature": ""})
        for key in ("thinking", "signature"):
            if isinstance(block.get(key), str) and block[key]:
                out += self._delta({"type": f"{key}_delta", key: block[key]})
        return out + self._close()

    def event(self, chunk: StreamChunk) -> bytes:
        """The events of one chunk."""
        out = self._start(chunk)
        for thought in _thinking(chunk.metadata):
            out += self._thought(thought)
        if chunk.text:
            if self._block is None or self._block in self._calls.values():
                out += self._open({"type": "text", "text": ""})
            out += self._delta({"type": "text_delta", "text": chunk.text})
        for position, call in enumerate(chunk.tool_calls or ()):
            index = self._slots.key(call, position)
            function = call_function(call)
            if index not in self._calls:
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "input": {},
                }
                out += self._open(block)
                self._calls[index] = self._block or 0
            if function.get("arguments"):
                delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
                out += self._delta(delta)
        self._finish = chunk.finish_reason or self._finish
        self._stop = chunk.metadata.get("stop_reason") or self._stop
        self._usage = chunk.usage or self._usage
        return out

    def end(self) -> bytes:
        """The closing events: ``message_delta`` with the stop reason and usage, then
        ``message_stop``."""
        out = self._start(None)
        if self._blocks == 0:
            out += self._open({"type": "text", "text": ""})
        out += self._close()
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": _stop_reason(self._finish, {"stop_reason": self._stop}),
                "stop_sequence": None,
            },
            "usage": _usage(self._usage),
        }
        return (
            out
            + _wire.sse(delta, "message_delta")
            + _wire.sse({"type": "message_stop"}, "message_stop")
        )

    def failure(self, exc: LLMGuardError) -> bytes:
        """An ``error`` event."""
        return self._start(None) + _wire.sse(MessagesWire().error(exc), "error")
