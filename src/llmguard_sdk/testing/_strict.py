"""What a ``FakeProvider(strict=True)`` refuses as the real APIs do: tool messages that answer
no call, and calls left unanswered (OpenAI's chat, Anthropic's Messages)."""

from __future__ import annotations

from typing import Any


def chat_tools_problem(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(message, param)`` of OpenAI's 400 for chat ``messages`` whose tool messages do not
    answer the calls of the assistant message before them, or None."""
    open_calls: list[str] = []  # the ids of the last assistant message's calls not answered
    asked_at = -1
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            open_calls.remove(message["tool_call_id"])
            continue
        if open_calls:
            return _unanswered(open_calls, asked_at)
        calls = message.get("tool_calls") if role == "assistant" else None
        open_calls = [str(c.get("id")) for c in calls or () if isinstance(c, dict)]
        asked_at = i
    return _unanswered(open_calls, asked_at) if open_calls else None


def _unanswered(ids: list[str], at: int) -> tuple[str, str]:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(map(str, ids)),
        f"messages.[{at}].role",
    )


def _blocks(message: dict[str, Any], kind: str) -> list[tuple[int, dict[str, Any]]]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [(j, b) for j, b in enumerate(blocks) if isinstance(b, dict) and b.get("type") == kind]


def messages_tools_problem(messages: list[dict[str, Any]]) -> str | None:
    """Anthropic's 400 message for ``messages`` whose ``tool_result`` blocks do not answer the
    ``tool_use`` blocks of the message just before them, or None."""
    asked: list[str] = []
    for i, message in enumerate(messages):
        answered = []
        for j, block in _blocks(message, "tool_result"):
            if block.get("tool_use_id") not in asked:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
            answered.append(block["tool_use_id"])
        missing = [a for a in asked if a not in answered]
        if missing:
            return (
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        asked = [str(b.get("id")) for _, b in _blocks(message, "tool_use")]
    return None
