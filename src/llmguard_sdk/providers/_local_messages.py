"""A request's messages as the local model's chat template reads them: a role and a text each.

The local model answers text from text, so what a message says beyond its text parts is
written into its text: an assistant's tool calls (``get_weather({"city": "Paris"})``: the
name and arguments it chose) and a tool's result, which names the tool it answers (taken from
the call its ``tool_call_id`` names). Without them the model saw an empty assistant turn
followed by a result of nothing it knew of, and answered as if no tool had run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import ChatRequest, Message

__all__ = ["local_messages"]


def local_messages(request: ChatRequest) -> list[dict[str, str]]:
    """Each message's role and its text, tool calls and results written in (module docs)."""
    names: dict[str, str] = {}  # tool_call_id -> the called tool's name
    messages = []
    for message in request.messages:
        text = message.text
        if message.tool_calls:
            calls = [_call_text(call, names) for call in message.tool_calls]
            text = "\n".join(([text] if text else []) + calls)
        elif message.role == "tool":
            text = _result_text(message, names)
        messages.append({"role": message.role, "content": text})
    return messages


def _call_text(call: Mapping[str, Any], names: dict[str, str]) -> str:
    """``name(arguments)`` of one chat tool call (its id remembered with its name)."""
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    name = str(function.get("name") or call.get("name") or "tool")
    arguments = function.get("arguments", call.get("arguments", ""))
    if not isinstance(arguments, str):
        arguments = str(arguments)
    if isinstance(call.get("id"), str):
        names[call["id"]] = name
    return f"{name}({arguments})"


def _result_text(message: Message, names: dict[str, str]) -> str:
    """A tool message's text, led by the tool it answers (and whether it failed)."""
    name = message.name or names.get(message.tool_call_id or "", "the tool")
    outcome = "failed" if message.is_error else "returned"
    return f"{name} {outcome}: {message.text}"
