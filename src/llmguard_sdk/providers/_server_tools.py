"""The server-side tool uses a provider bills per use, read from what an answer shows:
OpenAI's Responses output items, Claude's ``server_tool_use`` content blocks (whole, or
streamed before ``message_delta`` or ``response.completed`` gives the count: a stream cut
before it, before any text too, is charged the uses it showed; a streamed Responses item from
its ``output_item.added``, once by its ``output_index``, a Claude search whose result never
came). The fees are
:mod:`llmguard_sdk.budget._tool_fees`'."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..models import Usage

__all__ = [
    "CLAUDE_CODE_TOOLS",
    "claude_tool_uses",
    "openai_tool_uses",
    "server_block",
    "with_tool_uses",
]

CLAUDE_CODE_TOOLS = ("code_execution", "bash_code_execution", "text_editor_code_execution")
"""The names of Claude's ``server_tool_use`` blocks that run code in its container."""


def openai_tool_uses(output: object) -> dict[str, int]:
    """The server-side tool uses OpenAI bills of an answer's ``output`` items, by
    :class:`~llmguard_sdk.models.Usage` field: each ``web_search_call`` a web search, each
    ``file_search_call`` a file search, each container a ``code_interpreter_call`` names
    (its ``container_id``) a code execution session; empty for an answer without any."""
    searches = files = 0
    containers: set[object] = set()
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "web_search_call":
            searches += 1
        elif kind == "file_search_call":
            files += 1
        elif kind == "code_interpreter_call":
            container = item.get("container_id")  # (an item without one: a container)
            containers.add(container if isinstance(container, str) else len(containers))
    return _found(searches, files, len(containers))


def claude_tool_uses(blocks: Iterable[object]) -> dict[str, int]:
    """The server-side tool uses of Claude's content ``blocks``, by
    :class:`~llmguard_sdk.models.Usage` field: each ``server_tool_use`` block of its web
    search a search, but one whose ``web_search_tool_result`` is an error (``max_uses_exceeded``
    ...: Anthropic bills no failed search), and one code execution session (its container)
    where a block ran code."""
    searches: list[object] = []
    failed: set[object] = set()
    ran = False
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "server_tool_use":
            name = block.get("name")
            if name == "web_search":
                searches.append(block.get("id"))
            ran = ran or name in CLAUDE_CODE_TOOLS
        elif _failed_search(block):
            failed.add(block.get("tool_use_id"))
    billed = sum(1 for use in searches if use is None or use not in failed)
    return _found(billed, 0, int(ran))


def server_block(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """What :func:`claude_tool_uses` reads of a streamed content block: a
    ``server_tool_use`` block's id and name, a failed search's result; ``None`` for others."""
    if block.get("type") == "server_tool_use":
        return {"type": "server_tool_use", "id": block.get("id"), "name": block.get("name")}
    if _failed_search(block):
        return {"type": block.get("type"), "tool_use_id": block.get("tool_use_id"), **_FAILED}
    return None


_FAILED = {"content": {"type": "web_search_tool_result_error"}}


def _failed_search(block: Mapping[str, Any]) -> bool:
    """Whether ``block`` is a web search's result that is an error (not billed)."""
    content = block.get("content")
    return (
        block.get("type") == "web_search_tool_result"
        and isinstance(content, Mapping)
        and content.get("type") == "web_search_tool_result_error"
    )


def _found(searches: int, files: int, sessions: int) -> dict[str, int]:
    counted = {
        "web_search_requests": searches,
        "file_search_calls": files,
        "code_executions": sessions,
    }
    return {name: count for name, count in counted.items() if count}


def with_tool_uses(usage: Usage | None, *seen: Mapping[str, int]) -> Usage | None:
    """``usage`` counting each tool's uses as the most of its own count and those ``seen``
    (what the answer's items or blocks showed); ``usage`` itself where they add nothing (no
    copy)."""
    if usage is None:
        return None
    update: dict[str, Any] = {}
    for counted in seen:
        for name, count in counted.items():
            if count > max(getattr(usage, name), update.get(name, 0)):
                update[name] = count
    return usage.model_copy(update=update) if update else usage
