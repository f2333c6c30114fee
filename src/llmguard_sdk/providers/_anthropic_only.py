"""What a chat-completions or Responses payload leaves out of a request made for Anthropic's
Messages API (the transport seam's ``/messages``, which names them under
:data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`): Claude's cache breakpoints and its
server tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def drop_breakpoints(payload: dict[str, Any]) -> None:
    """Leave Anthropic's cache breakpoints out of a chat payload's messages and tools (in
    place); content left with text parts alone is sent as one string."""
    for message in payload["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        parts = [{k: v for k, v in p.items() if k != "cache_control"} for p in content]
        text_only = all(p.get("type") == "text" for p in parts)
        message["content"] = "".join(str(p.get("text", "")) for p in parts) if text_only else parts
    if payload.get("tools"):
        payload["tools"] = [
            {k: v for k, v in t.items() if k != "cache_control"} for t in payload["tools"]
        ]


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
