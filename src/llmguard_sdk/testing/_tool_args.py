"""The tool call a request forces (its ``tool_choice``), with arguments its JSON schema takes.

Every route answers a forced call with the same call (chat completions, Responses,
Messages, both batch APIs): the tool's name and placeholder arguments made from its schema
(``parameters``, Anthropic's ``input_schema``): each ``required`` property with a value of
its type (``"x"`` as long as ``minLength`` asks, 0 or the bound nearest to it that
``minimum`` / ``maximum`` and their exclusive forms allow, ``false``, a ``format``'s example), a
``const`` or an ``enum``'s first value, objects and arrays filled the same way (an array with
``minItems`` items, one at least), the first of ``anyOf`` / ``oneOf`` that is not ``null``,
``allOf`` merged and local ``$ref`` s followed. Nesting deeper than :data:`_MAX_DEPTH` (a
recursive schema) ends in an empty object or array. A string's simple ``pattern`` is
followed (see ``_pattern``); one it cannot follow leaves the string as it would be without.

A stream sends the arguments in fragments, as the real APIs do (:attr:`_Call.fragments`:
JSON punctuation, names and values apart, so ``{"city":"x"}`` is ``{"``, ``city``, ``":"``,
``x``, ``"}``), and each fragment counts one output token, as each piece of text does. An
output limit under their number cuts the call there (:func:`_within`), on every route, plain
and streamed: the arguments are a cut JSON string (a Messages ``tool_use`` block, whose
``input`` is an object, gets the parameters whose values were whole before the cut, as
Anthropic's buffered input has them; its stream sends the cut fragments) and the answer
ends as one cut at the limit (``length``).

Each call has ids of its own, shaped as the real APIs': ``call_`` and 24 letters and digits
(chat completions' ``id``, the Responses API's ``call_id``), ``toolu_01`` and 22 base58
characters (a Messages ``tool_use`` block's), drawn at random as the APIs' are.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import string
from dataclasses import dataclass, field, replace
from typing import Any

from ._pattern import pattern_example
from ._wire import _BASE58

_MAX_DEPTH = 8
_ALNUM = string.ascii_letters + string.digits
_FRAGMENT_RE = re.compile(r"\w+|\s+|[^\w\s]+")
_FORMATS = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "email": "x@localhost",
    "hostname": "localhost",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "uri": "http://localhost/",
    "url": "http://localhost/",
    "uuid": "00000000-0000-0000-0000-000000000000",
}


@dataclass(frozen=True)
class _Call:
    """A call of the tool ``name`` with ``arguments``, in each API's words; with ``limit``,
    only the first ``limit`` fragments of them (see :func:`_within`)."""

    name: str
    arguments: dict[str, Any]
    limit: int | None = None
    chat_id: str = field(default_factory=lambda: _drawn("call_", _ALNUM, 24))
    claude_id: str = field(default_factory=lambda: _drawn("toolu_01", _BASE58, 22))

    @property
    def json(self) -> str:
        """The arguments as the APIs send them: a JSON string (cut: its first fragments)."""
        return "".join(self.fragments) if self.cut else self._whole

    @property
    def _whole(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)

    @property
    def fragments(self) -> list[str]:
        """:attr:`json` in the pieces a stream sends (their number: the output tokens)."""
        found: list[str] = _FRAGMENT_RE.findall(self._whole)
        return found[: self.limit]

    @property
    def cut(self) -> bool:
        """Whether ``limit`` leaves some of the arguments out."""
        return self.limit is not None and self.limit < len(_FRAGMENT_RE.findall(self._whole))

    def chat_deltas(self) -> list[dict[str, Any]]:
        """The call as a stream's ``tool_calls`` items: its id and name (no arguments yet),
        then one item a fragment of its arguments."""
        named = {**self.chat_call(), "index": 0}
        named["function"] = {"name": self.name, "arguments": ""}
        return [named, *({"index": 0, "function": {"arguments": f}} for f in self.fragments)]

    def chat_call(self) -> dict[str, Any]:
        """A chat completion's ``tool_calls`` item."""
        function = {"name": self.name, "arguments": self.json}
        return {"id": self.chat_id, "type": "function", "function": function}

    def tool_use(self) -> dict[str, Any]:
        """A Messages ``tool_use`` content block."""
        return {
            "type": "tool_use",
            "id": self.claude_id,
            "name": self.name,
            "input": self._complete_part() if self.cut else self.arguments,
        }

    def _complete_part(self) -> dict[str, Any]:
        """The arguments whose values the cut :attr:`json` holds whole, up to the first it
        cuts: Anthropic buffers each parameter until it is complete, so a plain answer cut
        at ``max_tokens`` has the parameters finished before the cut (a value is whole once
        the ``,`` or ``}`` after it is in: a number or string could go on before it)."""
        sent, kept = len(self.json), dict[str, Any]()
        for key, value in self.arguments.items():
            kept[key] = value
            written = json.dumps(kept, separators=(",", ":"), ensure_ascii=False)
            if len(written) > sent:  # (its closing "}" stands where the next "," would)
                del kept[key]
                break
        return kept


def _drawn(prefix: str, alphabet: str, length: int) -> str:
    """A new id: ``prefix`` and ``length`` characters of ``alphabet`` drawn at random."""
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def _within(
    pieces: list[str], call: _Call | None, limit: Any
) -> tuple[list[str], _Call | None, str]:
    """An answer (its text ``pieces``, or the forced ``call``) within ``limit`` output tokens
    (an int; anything else: none), and its finish reason: ``length`` when the limit cut it,
    else ``tool_calls`` for a call and ``stop`` for text. Every route cuts its answer here."""
    if not isinstance(limit, int) or isinstance(limit, bool):
        return pieces, call, "stop" if call is None else "tool_calls"
    if call is not None:
        call = replace(call, limit=limit)
        return pieces, call, "length" if call.cut else "tool_calls"
    if limit < len(pieces):
        return pieces[:limit], None, "length"
    return pieces, None, "stop"


def _forced_call(body: dict[str, Any]) -> _Call | None:
    """The call a request's ``tool_choice`` makes the model answer, or None.

    Chat completions' ``"required"`` and ``{"type": "function", "function": {"name"}}``, the
    Responses API's ``"required"`` and ``{"type": "function", "name"}``, Anthropic's
    ``{"type": "any"}`` and ``{"type": "tool", "name"}``; ``"required"`` and ``any`` call the
    first tool. Without tools, or with any other choice (``auto``, ``none``), None."""
    tools = [t for t in body.get("tools") or () if isinstance(t, dict)]
    choice = body.get("tool_choice")
    if not tools:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind in ("required", "any"):
        name = _name_and_schema(tools[0])[0]
    elif kind in ("function", "tool") and isinstance(choice, dict):
        named = choice.get("function")
        name = named.get("name") if isinstance(named, dict) else choice.get("name")
    else:
        return None
    if not isinstance(name, str) or not name:
        return None
    schema = next((s for n, s in map(_name_and_schema, tools) if n == name), None)
    arguments = _placeholder(schema, schema, 0) if isinstance(schema, dict) else {}
    return _Call(name, arguments if isinstance(arguments, dict) else {})


def _name_and_schema(tool: dict[str, Any]) -> tuple[Any, Any]:
    """A tool's name and schema: chat's ``function.{name, parameters}``, or the Responses
    API's ``name`` and ``parameters``, or Anthropic's ``name`` and ``input_schema``."""
    function = tool.get("function")
    if isinstance(function, dict):
        return function.get("name"), function.get("parameters")
    return tool.get("name"), tool.get("parameters", tool.get("input_schema"))


def _placeholder(schema: Any, root: Any, depth: int) -> Any:
    """A value ``schema`` takes (see the module docs); ``root`` resolves ``$ref`` s."""
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _placeholder({**_resolve(root, ref), **rest}, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key) or () if isinstance(o, dict)]
        if options:
            chosen = next((o for o in options if o.get("type") != "null"), options[0])
            return _placeholder(chosen, root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        return _placeholder(_merged(schema, root), root, depth + 1)
    kind = _kind(schema)
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, depth)
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    return False if kind == "boolean" else None


def _kind(schema: dict[str, Any]) -> str | None:
    """The type a value of ``schema`` gets: its ``type`` (the first but ``null`` of a list),
    else ``object`` for ``properties``, ``array`` for ``items``."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    return "array" if "items" in schema or "prefixItems" in schema else None


def _resolve(root: Any, ref: str) -> dict[str, Any]:
    """The schema a local ``$ref`` (``#``, ``#/$defs/Name``) points at; {} for another."""
    if not ref.startswith("#"):
        return {}
    found = root
    for part in ref[1:].lstrip("/").split("/") if ref != "#" else ():
        key = part.replace("~1", "/").replace("~0", "~")
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else {}


def _merged(schema: dict[str, Any], root: Any) -> dict[str, Any]:
    """``schema`` with its ``allOf`` parts merged in: properties and ``required`` joined."""
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if isinstance(part, dict) and isinstance(part.get("$ref"), str):
            part = _resolve(root, part["$ref"])
        if not isinstance(part, dict):
            continue
        merged["properties"] = {
            **(merged.get("properties") or {}),
            **(part.get("properties") or {}),
        }
        merged["required"] = [*(merged.get("required") or ()), *(part.get("required") or ())]
        for key, value in part.items():
            merged.setdefault(key, value)
    return merged


def _object(schema: dict[str, Any], root: Any, depth: int) -> dict[str, Any]:
    if depth >= _MAX_DEPTH:
        return {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = [name for name in schema.get("required") or () if isinstance(name, str)]
    return {name: _placeholder(properties.get(name, {}), root, depth + 1) for name in required}


def _array(schema: dict[str, Any], root: Any, depth: int) -> list[Any]:
    if depth >= _MAX_DEPTH:
        return []
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(items, list):  # (draft 4's tuple form)
        prefix, items = items, schema.get("additionalItems")
    prefix = prefix if isinstance(prefix, list) else []
    low, high = schema.get("minItems"), schema.get("maxItems")
    count = max(1, low if isinstance(low, int) else 0, len(prefix))
    if isinstance(high, int):
        count = min(count, high)
    shapes = [*prefix, *[items] * max(0, count - len(prefix))][:count]
    return [_placeholder(shape, root, depth + 1) for shape in shapes]


def _string(schema: dict[str, Any]) -> str:
    known = _FORMATS.get(str(schema.get("format")))
    low, high = schema.get("minLength"), schema.get("maxLength")
    text = "x" * max(1, low if isinstance(low, int) else 0)
    text = text[:high] if isinstance(high, int) else text
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        least = low if isinstance(low, int) else 0
        most = high if isinstance(high, int) else None
        tries = [known, text] if known is not None else [text]
        return pattern_example(pattern, least, most, tries) or known or text
    return known if known is not None else text


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    """0, or the bound nearest to 0 when the bounds leave 0 out, ``multipleOf`` kept; a
    number between two close exclusive bounds: their middle."""

    def bound(key: str) -> float | None:
        value = schema.get(key)
        return None if isinstance(value, bool) or not isinstance(value, (int, float)) else value

    low, high = bound("minimum"), bound("maximum")
    over, under = bound("exclusiveMinimum"), bound("exclusiveMaximum")
    if schema.get("exclusiveMinimum") is True:  # (draft 4: a flag on minimum)
        over, low = low, None
    if schema.get("exclusiveMaximum") is True:
        under, high = high, None
    floor = max(
        (b for b in (low, None if over is None else over + 1) if b is not None), default=None
    )
    ceiling = min(
        (b for b in (high, None if under is None else under - 1) if b is not None), default=None
    )
    value: float = 0 if floor is None else max(0, floor)
    if ceiling is not None and value > ceiling:
        value = ceiling
    multiple = bound("multipleOf")
    if multiple:
        value = math.ceil(value / multiple) * multiple
    if integer:
        return math.ceil(value)
    if (over is not None and value <= over) or (under is not None and value >= under):
        value = (
            (over if over is not None else value - 1) + (under if under is not None else value + 1)
        ) / 2
    return int(value) if float(value).is_integer() else value
