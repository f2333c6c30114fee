"""How a shadow compares a served answer with the candidate's: :data:`COMPARATORS`, the
built-in comparisons (the same text and tool calls, JSON kept, a similar length, cost and
latency), and the :data:`Comparator` type a :class:`~llmguard_sdk.releases.ShadowPolicy`'s own
comparisons have.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..models import ChatResponse
from .policy import LATENCY_SLACK_S

__all__ = ["COMPARATORS", "Comparator"]

Comparator = Callable[[ChatResponse, ChatResponse], "bool | None"]
"""``(served, shadow) -> agree``; ``None``: this pair says nothing (not counted)."""


_NOT_JSON = object()
_MOST_DEPTH = 64
"""Tool arguments nested deeper than this are compared as their text: parsed, they would be
written back with ``json.dumps``, which raises RecursionError near Python's limit."""


def _parsed(text: str | bytes) -> object:
    """``text`` parsed as JSON, else :data:`_NOT_JSON`: as is JSON nested past Python's
    recursion limit (``json.loads`` raises RecursionError, not ValueError)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _is_json(text: str | bytes) -> bool:
    return _parsed(text) is not _NOT_JSON


def _arguments(raw: object) -> object:
    """A tool call's arguments as what they say: parsed JSON where they parse (key order
    and whitespace aside) within :data:`_MOST_DEPTH` levels, else as given."""
    if isinstance(raw, str | bytes):
        parsed = _parsed(raw)
        return parsed if parsed is not _NOT_JSON and _shallow(parsed) else raw
    return raw


def _shallow(value: object) -> bool:
    """Whether ``value`` nests lists and dicts :data:`_MOST_DEPTH` levels deep at most
    (walked with a stack of its own, not by recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        inner = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if inner and depth > _MOST_DEPTH:
            return False
        pending.extend((child, depth + 1) for child in inner)
    return True


def _function(call: Mapping[str, Any]) -> Mapping[str, Any] | None:
    function = call.get("function")
    return function if isinstance(function, Mapping) else None


def _calls(answer: ChatResponse) -> list[str]:
    """``answer``'s tool calls, each as canonical JSON of what it is (its function's name
    and parsed arguments; a call of another type as given), ids and stream indexes aside;
    sorted, as parallel calls in another order are the same calls."""
    calls = []
    for call in answer.tool_calls or ():
        what = {k: v for k, v in call.items() if k not in ("id", "index")}
        function = _function(call)
        if function is not None:
            what.setdefault("type", "function")
            what["function"] = {**function, "arguments": _arguments(function.get("arguments"))}
        calls.append(json.dumps(what, sort_keys=True, separators=(",", ":"), default=repr))
    return sorted(calls)


def _same(a: ChatResponse, b: ChatResponse) -> bool:
    """The same text (stripped), the same tool calls and the same refusal (OpenAI's, kept in
    ``metadata["refusal"]``: a refusal has no text)."""
    return (
        a.text.strip() == b.text.strip() and _calls(a) == _calls(b) and _refusal(a) == _refusal(b)
    )


def _refusal(answer: ChatResponse) -> str | None:
    refusal = answer.metadata.get("refusal")
    return refusal.strip() if isinstance(refusal, str) else None


def _json_validity(answer: ChatResponse) -> tuple[bool | None, bool | None]:
    """Whether ``answer``'s text is JSON (``None``: no text beside tool calls) and whether its
    tool calls' arguments all are (``None``: no calls)."""
    calls = answer.tool_calls or ()
    text = _is_json(answer.text) if answer.text.strip() or not calls else None
    if not calls:
        return text, None
    arguments = [(_function(call) or {}).get("arguments") for call in calls]
    return text, all(isinstance(a, str | bytes) and _is_json(a) for a in arguments)


def _size(answer: ChatResponse) -> int:
    """``answer``'s length: its text's, and each tool call's name and arguments (compact JSON
    where they parse; a call of another type: its JSON)."""
    size = len(answer.text)
    for call in answer.tool_calls or ():
        function = _function(call)
        if function is None:
            size += len(json.dumps(call, sort_keys=True, default=repr))
            continue
        arguments = _arguments(function.get("arguments"))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, separators=(",", ":"), default=repr)
        size += len(str(function.get("name") or "")) + len(arguments)
    return size


def _json_kept(served: ChatResponse, shadow: ChatResponse) -> bool | None:
    """Whether ``shadow`` is JSON where ``served`` is: its text where the served text is
    JSON, its tool calls' arguments where the served calls' all are. ``None`` where the
    served answer has no JSON (prose, an empty answer, arguments that do not parse): no
    JSON to keep, so the pair says nothing (two empty answers are no agreement of JSON)."""
    text, calls = _json_validity(served)
    if not text and not calls:
        return None
    their_text, their_calls = _json_validity(shadow)
    return (not text or their_text is True) and (not calls or their_calls is True)


def _similar_length(served: ChatResponse, shadow: ChatResponse) -> bool:
    """Lengths within a fifth of the longer one's (in whole characters: the same verdict
    whichever answer was served)."""
    first, second = _size(served), _size(shadow)
    return abs(first - second) * 5 <= max(first, second)


def _ratio_ok(served: float | None, shadow: float | None, limit: float) -> bool | None:
    if served is None or shadow is None:
        return None
    return shadow <= served * limit + 1e-12


def _latency_ok(served: float | None, shadow: float | None) -> bool | None:
    """Within 1.5 times the served answer's time, or within :data:`LATENCY_SLACK_S` of it (a
    canary's slow call is past both: at millisecond latencies a ratio alone calls 3 ms beside
    1.1 ms slow)."""
    if served is None or shadow is None:
        return None
    return shadow <= max(served * 1.5, served + LATENCY_SLACK_S) + 1e-12


COMPARATORS: Mapping[str, Comparator] = {
    "exact": _same,
    "json_valid": _json_kept,
    "length": _similar_length,
    "latency": lambda a, b: _latency_ok(
        a.timings.total_s if a.timings else None, b.timings.total_s if b.timings else None
    ),
    "cost": lambda a, b: _ratio_ok(a.cost_usd, b.cost_usd, 1.5),
}
"""The built-in comparisons of what the answers are, their text and their tool calls: the
same text (stripped) and the same tool calls (``exact``: names and arguments, as parsed JSON
where they parse within 64 levels, in any order, ids aside); ``json_valid``: the candidate's
text is JSON where the served text is, its calls' arguments where the served calls' are (a
served answer with no JSON, prose or empty, is not judged; JSON nested past Python's
recursion limit is none); ``length`` (text, tool names and arguments)
within 20 % of the longer answer's (the same verdict either way round); ``cost`` at most 1.5
times the served answer's, ``latency`` too or at most 0.05 s more (as a canary's slow call)."""
