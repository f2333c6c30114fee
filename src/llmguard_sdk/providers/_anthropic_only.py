"""What a chat-completions or Responses payload leaves out of a request made for Anthropic's
Messages API (the transport seam's ``/messages``, which names them under
:data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`): Claude's cache breakpoints, its
server tools, its own tool fields and headers, stop sequences beyond chat's 4."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

logger = logging.getLogger("llmguard_sdk")

CACHE_CONTROL = "cache_control"
"""Named under :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`: the request's content
parts and tools hold Anthropic cache breakpoints that only Anthropic routes send (the
transport seam's ``/messages`` names it); a chat route leaves them out, and sends text-only
content as one string."""
SERVER_TOOLS = "server_tools"
"""Named under :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`: the request's tools
hold Claude's server tools (web search, code execution ...: a ``type`` of their own, run by
Anthropic), which only Anthropic routes send (the transport seam's ``/messages`` names it);
other routes send the function tools alone."""
CLAUDE_TOOL_FIELDS = "tool_fields"
"""Named under :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`: the request's function
tools hold Claude's own fields beside their ``type`` and ``function`` (the seam's
``/messages`` keeps there what of a client tool, anthropic's ``ToolParam``, chat's function
lacks: ``input_examples``, ``defer_loading``, ``allowed_callers`` ...), which only Anthropic
routes send; a chat route sends each function tool's ``type`` and ``function`` alone."""
CLAUDE_HEADERS = "anthropic_headers"
"""Named under :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`: the request's
``extra_headers`` hold Claude's own (:data:`HEADERS`; the seam's ``/messages`` names it),
which only Anthropic routes send."""
HEADERS = frozenset({"anthropic-beta", "anthropic-user-profile-id", "anthropic-workspace-id"})
"""The headers anthropic's SDK sends for what its caller asked: ``betas=[...]``, the user
profile and the workspace the caller acts for."""
MAX_STOP = 4
"""The most stop sequences chat completions' ``stop`` takes (OpenAI answers 400 to more): the
seam's ``/messages`` sends the first ones as ``stop``, and all of them as ``stop_sequences``
for Anthropic routes (named under :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`)."""


def leave_out_for_chat(
    payload: dict[str, Any], named: Collection[str], extra: Mapping[str, Any] | None
) -> None:
    """Leave out of a chat ``payload`` (in place) what ``named`` (the names under the
    request's :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`) says only Anthropic
    routes send; warn where the request's ``stop_sequences`` (its ``extra`` body's) are more
    than chat's ``stop`` takes."""
    if CACHE_CONTROL in named:
        drop_breakpoints(payload)
    if CLAUDE_TOOL_FIELDS in named:
        drop_tool_fields(payload)
    if SERVER_TOOLS in named:
        leave_out_server_tools(payload)
    stops = (extra or {}).get("stop_sequences")
    if "stop_sequences" in named and isinstance(stops, list) and len(stops) > MAX_STOP:
        logger.warning(
            "a chat-completions route sends %d of %d stop sequences (the first ones: its stop "
            "takes %d at most)",
            MAX_STOP,
            len(stops),
            MAX_STOP,
        )


def without_breakpoint(block: Mapping[str, Any]) -> dict[str, Any]:
    """``block`` (a content block, a tool) less Claude's cache breakpoint (``cache_control``)."""
    return {k: v for k, v in block.items() if k != "cache_control"}


def drop_breakpoints(payload: dict[str, Any]) -> None:
    """Leave Anthropic's cache breakpoints out of a chat payload's messages and tools (in
    place); content left with text parts alone is sent as one string."""
    for message in payload["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        parts = [without_breakpoint(p) for p in content]
        text_only = all(p.get("type") == "text" for p in parts)
        message["content"] = "".join(str(p.get("text", "")) for p in parts) if text_only else parts
    if payload.get("tools"):
        payload["tools"] = [without_breakpoint(t) for t in payload["tools"]]


def drop_tool_fields(payload: dict[str, Any]) -> None:
    """Send a chat payload's function tools as chat takes them (in place): their ``type``
    and ``function`` alone."""
    if payload.get("tools"):
        payload["tools"] = [_function_only(t) for t in payload["tools"]]


def _function_only(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return tool
    return {k: v for k, v in tool.items() if k in ("type", "function")}


def sent_headers(
    headers: Mapping[str, str] | None, named: Collection[str]
) -> Mapping[str, str] | None:
    """A request's ``extra_headers`` as a route that does not speak Anthropic's API sends
    them: less Claude's own (:data:`HEADERS`) where ``named`` (the names under the request's
    :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`) holds :data:`CLAUDE_HEADERS`.
    With nothing to leave out, ``headers`` itself, not a copy: its callers only read it."""
    if not headers:
        return None
    if CLAUDE_HEADERS not in named:
        return headers
    return {k: v for k, v in headers.items() if k.lower() not in HEADERS} or None


def leave_out_server_tools(payload: dict[str, Any]) -> None:
    """Keep only the function tools of a chat or Responses ``payload`` (in place: Claude's
    server tools are left out), and a ``tool_choice`` only where it names none of the
    others; with none left, no ``tools``, ``tool_choice`` or ``parallel_tool_calls`` either
    (OpenAI refuses a tool choice without tools, or naming a tool it was not sent)."""
    tools = [t for t in payload.get("tools") or () if t.get("type") == "function"]
    if not tools:
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            payload.pop(key, None)
        return
    payload["tools"] = tools
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and _tool_name(choice) not in {_tool_name(t) for t in tools}:
        del payload["tool_choice"]


def _tool_name(tool: Mapping[str, Any]) -> object:
    """The name a chat (``function.name``) or Responses (``name``) tool or tool choice gives."""
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")
