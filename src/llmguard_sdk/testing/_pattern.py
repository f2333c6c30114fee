"""A string that a JSON schema's simple ``pattern`` matches, for placeholder tool arguments.

:func:`pattern_example` reads the pattern itself (literals, escapes such as ``\\d`` ``\\w``
``\\s``, character classes, ``.``, groups, the first branch of an alternation, the anchors
``^`` ``$`` and the quantifiers ``?`` ``*`` ``+`` ``{n}`` ``{n,}`` ``{n,m}``), builds a few
candidates (fewest repeats, at least one repeat, the caller's fallbacks) and keeps the first
that :func:`re.fullmatch` accepts within the length bounds. Anything else (lookarounds,
back-references, a pattern Python cannot compile, a candidate longer than :data:`_LONGEST`,
a fallback longer than :data:`_SHORT`) gives None: bounded work, and no backtracking over a
long string that does not match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LONGEST = 64  # characters a candidate read from the pattern may have
_SHORT = 16  # characters a fallback may have (one that fails can backtrack 2**len times)
_ESCAPES = {"d": "0", "w": "a", "s": " ", "D": "a", "W": "-", "S": "a", "n": "\n", "t": "\t"}
_CLASS_TRIES = "a0Ax_-. @z9Z"
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")


class _Unsupported(Exception):
    """A construct :func:`pattern_example` does not follow."""


def pattern_example(
    pattern: str, low: int, high: int | None, fallbacks: Iterable[str] = ()
) -> str | None:
    """A string ``pattern`` fully matches, ``low`` to ``high`` characters long, or None."""
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError):
        return None
    read = [(_generate(pattern, least), _LONGEST) for least in (False, True)]
    for candidate, longest in [*read, *((f, _SHORT) for f in fallbacks)]:
        most = longest if high is None else min(longest, high)
        if candidate is None or not low <= len(candidate) <= most:
            continue
        if compiled.fullmatch(candidate):
            return candidate
    return None


def _generate(pattern: str, least: bool) -> str | None:
    """One string of ``pattern`` (each repeat its minimum, or with ``least`` False at least
    one), or None where it holds a construct this reader does not follow."""
    try:
        text, end = _sequence(pattern, 0, least)
    except (_Unsupported, IndexError, ValueError):
        return None
    return text if end == len(pattern) else None


def _sequence(p: str, i: int, least: bool) -> tuple[str, int]:
    """The text of the branch starting at ``i`` (the first of an alternation), and where
    its group ends (the closing parenthesis, or the pattern's end)."""
    out = ""
    while i < len(p) and p[i] != ")":
        if p[i] == "|":
            return out, _group_end(p, i)
        atom, i = _atom(p, i, least)
        count, i = _quantifier(p, i, least)
        out += atom * count
        if len(out) > _LONGEST:
            raise _Unsupported
    return out, i


def _atom(p: str, i: int, least: bool) -> tuple[str, int]:
    char = p[i]
    if char in "^$":
        return "", i + 1
    if char == ".":
        return "a", i + 1
    if char == "\\":
        escaped = p[i + 1]
        if escaped in "bBAZz":
            return "", i + 2
        if escaped.isdigit() or escaped in "pPkux":
            raise _Unsupported  # back-references, Unicode classes, code points
        return _ESCAPES.get(escaped, escaped), i + 2
    if char == "[":
        end = i + 1 + (p[i + 1] == "^")
        end += p[end] == "]"
        while p[end] != "]":
            end += 2 if p[end] == "\\" else 1
        chosen = next((c for c in _CLASS_TRIES if re.fullmatch(p[i : end + 1], c)), None)
        if chosen is None:
            raise _Unsupported
        return chosen, end + 1
    if char == "(":
        start = i + 1
        if p.startswith("(?:", i):
            start = i + 3
        elif p.startswith(("(?P<", "(?<"), i) and p[i + 3] not in "=!":
            start = p.index(">", i) + 1
        elif p.startswith("(?", i):
            raise _Unsupported  # lookarounds, flags
        text, end = _sequence(p, start, least)
        if p[end] != ")":
            raise _Unsupported
        return text, end + 1
    if char in "*+?":
        raise _Unsupported
    return char, i + 1


def _quantifier(p: str, i: int, least: bool) -> tuple[int, int]:
    """How often the atom before ``i`` repeats, and where its quantifier ends."""
    if i >= len(p):
        return 1, i
    bounds: tuple[int, int | None] | None = None
    end = i + 1
    if p[i] in "?*+":
        bounds = (1 if p[i] == "+" else 0, 1 if p[i] == "?" else None)
    elif p[i] == "{" and (found := _QUANTIFIER.match(p, i)) is not None:
        low, comma, high = found.groups()
        bounds = (int(low), None if comma and not high else int(high or low))
        end = found.end()
    if bounds is None:
        return 1, i
    if end < len(p) and p[end] in "?+":  # (lazy, possessive)
        end += 1
    low_count, high_count = bounds
    count = low_count if least else max(low_count, 1)
    if high_count is not None:
        count = min(count, high_count)
    if count > _LONGEST:
        raise _Unsupported
    return count, end


def _group_end(p: str, i: int) -> int:
    """Where the group holding the ``|`` at ``i`` closes (its ``)``, or the pattern's end)."""
    depth = 0
    while i < len(p):
        char = p[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i += 1 + (p[i + 1] == "^")
            i += p[i] == "]"
            while p[i] != "]":
                i += 2 if p[i] == "\\" else 1
        elif char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return i
