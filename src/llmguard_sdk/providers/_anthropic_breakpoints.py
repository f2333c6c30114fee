"""openai's ``prompt_cache_breakpoint`` marks as Claude's ``cache_control`` breakpoints, within
Claude's rules: four breakpoints in all at most, none of 5 minutes before one of an hour. A
request with more than four of its own is refused before it is sent (Claude's 400)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import RequestValidationError
from ..prompts.adapters import MOST_BREAKPOINTS, Place, own_breakpoints

OPENAI_BREAKPOINT = "prompt_cache_breakpoint"
"""openai's mark on a content part: the end of a reusable prefix."""


def convert_breakpoints(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    automatic: object = None,
    static: Place | None = None,
) -> None:
    """openai's ``prompt_cache_breakpoint`` on content blocks (the end of a reusable prefix)
    as Claude's ``cache_control`` (in place): the latest ones, as many as Claude takes beside
    the request's own (:data:`~llmguard_sdk.prompts.adapters.MOST_BREAKPOINTS` in all, a
    top-level ``cache_control``, ``automatic``, counted: OpenAI also writes the latest only),
    each ``{"type": "ephemeral"}`` (Claude's default lifetime, renewed by each read), and none
    before one of the request's own that lives longer (``"ttl": "1h"``: Claude refuses a
    shorter-lived one before it, and the caller's lifetime is not lengthened for it); none
    reaches Claude as it is. ``static`` is where a PromptBuilder's static part ends (its
    breakpoint, :func:`~llmguard_sdk.prompts.add_cache_breakpoints`'s, goes there next): a
    mark there is kept first, and otherwise one place is left for it.

    More than four of the request's own are a :class:`RequestValidationError` naming where
    they are (Claude answers 400 to them; which to drop only the caller knows)."""
    own = own_breakpoints(system, messages, tools, automatic)
    if len(own) > MOST_BREAKPOINTS:
        where = ", ".join(_named(place) for place, _ in own)
        raise RequestValidationError(
            f"the request has {len(own)} cache_control breakpoints of its own ({where}, in "
            f"Claude's body); Claude takes {MOST_BREAKPOINTS} at most (a top-level "
            "cache_control counts as one) and answers 400 to more: remove some"
        )
    longest = max((place for place, longer in own if longer), default=None)
    marked = [
        (place, block)
        for place, block in _placed(system, messages)
        if block.pop(OPENAI_BREAKPOINT, None) and "cache_control" not in block
    ]
    kept = [(p, block) for p, block in marked if longest is None or p > longest]
    room = MOST_BREAKPOINTS - len(own)
    taken = {p for p, _ in own}
    if static is not None and static not in taken and (longest is None or static > longest):
        room -= 1  # (the static part's breakpoint, more valuable than any later one)
        for place, block in kept:
            if place == static:
                block["cache_control"] = {"type": "ephemeral"}
        kept = [(p, block) for p, block in kept if p != static]
    for _, block in kept[max(0, len(kept) - room) :] if room > 0 else ():
        block["cache_control"] = {"type": "ephemeral"}


def _placed(
    system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> list[tuple[Place, dict[str, Any]]]:
    """The system's and the messages' content blocks, each with its place."""
    placed: list[tuple[Place, dict[str, Any]]] = [((1, i, 0), b) for i, b in enumerate(system)]
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else ()
        placed += [((2, i, j), block) for j, block in enumerate(content)]
    return placed


def _named(place: Place) -> str:
    """Where a breakpoint is, in the words of Claude's request body."""
    where, index, block = place
    if where == 0:
        return f"tools[{index}]"
    if where == 1:
        return f"system[{index}]"
    return f"messages[{index}].content[{block}]" if where == 2 else "top-level cache_control"
