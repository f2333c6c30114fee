"""OpenAI-shaped tools and tool choices as Claude's Messages API takes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def claude_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A function tool as Claude's client tool: its name, description, schema and
    ``strict``, and Claude's own fields beside its function (``cache_control``,
    ``input_examples`` ...: a Messages caller's, kept there by the seam)."""
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict):
        return dict(tool)  # Anthropic-shaped already (or a server tool)
    converted: dict[str, Any] = {"name": function.get("name")}
    if function.get("description") is not None:
        converted["description"] = function["description"]
    converted["input_schema"] = function.get("parameters") or {"type": "object"}
    if isinstance(function.get("strict"), bool):
        converted["strict"] = function["strict"]
    converted.update({k: v for k, v in tool.items() if k not in ("type", "function")})
    return converted


def claude_tool_choice(choice: str | Mapping[str, Any]) -> dict[str, Any]:
    """A chat ``tool_choice`` as Claude's: ``required`` is ``any``, a named function
    ``{"type": "tool", "name": ...}``; Claude's own shape as it is."""
    if isinstance(choice, str):
        return {"type": {"required": "any"}.get(choice, choice)}
    function = choice.get("function")
    if choice.get("type") == "function" and isinstance(function, dict):
        return {"type": "tool", "name": function.get("name")}
    return dict(choice)
