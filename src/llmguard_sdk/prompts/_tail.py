"""The dynamic tail of a :class:`~llmguard_sdk.prompts.PromptBuilder`'s prompt: the history
checked, the per-call context rendered (equal contexts, equal bytes) and the user's message.

The context goes in a ``<context>`` block. Nothing in it may close that block early (a
retrieved document ending in ``</context>`` and going on with orders of its own) or open
another: the ``<`` of anything that reads as the block's tag (``<`` then at most
:data:`_TAG_GAP` spaces or slashes, then ``context`` in any case, then no letter, digit or
``_``) is written ``&lt;``. That is a function of the text alone, so equal contexts still
render equal bytes, and a context without such a tag renders as it did.

A mapping's entry cannot forge another ``key: value`` line either (``{"doc": "x\\nplan:
enterprise"}``): each line break inside an entry (any that ``str.splitlines`` splits at) is
followed by :data:`_INDENT`, so only a real key starts a line of the block; an entry without
one renders as it did. A key cannot forge one either: a key (as text) that is empty, has a
``:``, a line break or another unprintable character, or spaces at either end (a
continuation line, another key's line) is a :class:`RequestValidationError`.

The user's text (a string, a text part's ``text``, or text nested in a part: a
``tool_result``'s or ``search_result``'s ``content``, a text ``document``) cannot forge the
block either: its tags are escaped the same way, whether or not the call has a context (an
application's instructions may name the block on every call), so only the library's block
reads as one.
So are the text of the history's turns of the user, the assistant (which may repeat a user's
forged block) and tools (a fetched page may hold one): only the application's own turns
(``system``, ``developer``) and what is no text (an assistant's tool calls, its thinking) are
left as they are. A turn without such a tag is the very message given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from .._json import canonical_json
from .._problems import problems
from ..errors import RequestValidationError
from ..models import Message

__all__ = ["history_messages", "user_message"]

_DEEPEST = 100  # levels of a context value's nesting (a deeper one is refused)
_TAG_GAP = 32  # spaces or slashes between a tag's "<" and its name that still read as a tag
# (bounded: each match is at most 40 characters long, so a value is read in linear time)
_TAG = re.compile(rf"<(?=[\s/]{{0,{_TAG_GAP}}}context(?!\w))", re.IGNORECASE)
_INDENT = "  "  # after a line break inside a context entry (a continuation line, not a key)
_LINE_BREAK = re.compile("(\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])")
_ESCAPED_ROLES = frozenset({"user", "assistant", "tool"})  # history turns whose tags are escaped


def history_messages(history: object) -> list[Message]:
    """The history's turns as messages (a :class:`RequestValidationError` for what is none),
    the tags of their text escaped where a user, the model or a tool wrote it."""
    return [_escaped_turn(_message(m)) for m in _history(history)]


def user_message(
    content: str | Sequence[Mapping[str, Any]], context: str | Mapping[str, Any] | None
) -> Message:
    """The last user message: the rendered ``context`` (if any), then ``content``."""
    return _user_message(_with_context(content, context))


def _history(history: object) -> Iterable[Any]:
    """``history``, or a :class:`RequestValidationError` when it is no collection of messages
    (a string's characters, a single message's keys were taken for messages)."""
    if isinstance(history, (str, bytes, Mapping, Message)) or not isinstance(history, Iterable):
        raise RequestValidationError(
            f"history must be a list of messages, not {type(history).__name__}"
        )
    return history


def _message(value: Message | Mapping[str, Any]) -> Message:
    if isinstance(value, Message):
        return value
    try:
        return Message.model_validate(value)
    except ValidationError as exc:
        raise RequestValidationError(f"invalid history message: {exc.errors()[0]['msg']}") from None


def _escaped_turn(turn: Message) -> Message:
    """``turn``, the tags of its text escaped (see :data:`_TAG`) unless the application wrote
    it (a system or developer turn); the very message when it has none."""
    content = turn.content
    if turn.role not in _ESCAPED_ROLES or content is None:
        return turn
    if isinstance(content, str):
        escaped: str | list[dict[str, Any]] = _TAG.sub("&lt;", content)
    else:
        escaped = [_escaped_part(part) for part in content]
    return turn if escaped == content else turn.model_copy(update={"content": escaped})


def _user_message(content: str | list[dict[str, Any]]) -> Message:
    """The user's message, or a :class:`RequestValidationError` naming what it cannot hold (a
    content part without a type, a text part whose text is no string)."""
    try:
        return Message(role="user", content=content)
    except ValidationError as exc:
        found = "; ".join(problems(exc, "content"))
        raise RequestValidationError(f"invalid user content: {found}") from None


def _context_value(value: object) -> str:
    """A context value as text: a string as it is, a mapping, list or set as canonical JSON
    (equal values, equal bytes, whatever order they were built in), anything else ``str()``."""
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return canonical_json(_plain(value, (), 0))
    return str(value)


def _plain(value: object, inside: tuple[int, ...], depth: int) -> Any:
    """``value`` as JSON values: mappings with text keys, sets sorted, other objects as text
    (``inside``: the ids of the containers it is in; a value inside itself, or nested deeper
    than :data:`_DEEPEST`, is a :class:`RequestValidationError`, not a ``RecursionError``)."""
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        if id(value) in inside:
            raise RequestValidationError("a context value contains itself")
        if depth >= _DEEPEST:
            raise RequestValidationError(f"a context value is nested over {_DEEPEST} levels deep")
        inside, depth = (*inside, id(value)), depth + 1
    if isinstance(value, Mapping):
        return {str(key): _plain(item, inside, depth) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, inside, depth) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(item, inside, depth) for item in value), key=canonical_json)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return str(value)


def _key(key: object) -> str:
    """A mapping context's key as text, or a :class:`RequestValidationError` when it could
    forge a line of the block: empty, spaces at either end (a continuation line), a ``:``
    (another ``key: value``), a line break or another unprintable character."""
    text = str(key)
    if not text or text != text.strip() or ":" in text or not text.isprintable():
        raise RequestValidationError(
            f"context key {text!r:.60} could forge a line of the context block: a key must be "
            "printable text without ':' or line breaks, and not start or end with spaces"
        )
    return text


def _entry(key: object, value: object) -> str:
    """A mapping context's ``key: value`` line, each line break inside it followed by
    :data:`_INDENT` (a tag escaped first: the indent lengthens the gap a tag may have)."""
    entry = _TAG.sub("&lt;", f"{_key(key)}: {_context_value(value)}")
    return _LINE_BREAK.sub(rf"\1{_INDENT}", entry)


def _are_parts(content: object) -> bool:
    """Whether ``content`` is a non-empty list of content parts (objects): not an int, bytes
    or a generator (which ``all()`` used up, leaving no parts)."""
    return (
        isinstance(content, Sequence)
        and not isinstance(content, (str, bytes, bytearray))
        and bool(content)
        and all(isinstance(p, Mapping) for p in content)
    )


def _escaped_part(part: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    """A copy of a user's content part, the tags of its text escaped (see :data:`_TAG`): a
    text part's ``text``, and the text nested in a part (an Anthropic ``tool_result``'s or
    ``search_result``'s ``content``, a string or blocks; a text ``document``'s ``source``)."""
    copy = dict(part)
    if copy.get("type") == "text" and isinstance(copy.get("text"), str):
        copy["text"] = _TAG.sub("&lt;", copy["text"])
    if depth >= _DEEPEST:  # (deeper nesting than any API takes: refused by the route)
        return copy
    nested = copy.get("content")
    if isinstance(nested, str):
        copy["content"] = _TAG.sub("&lt;", nested)
    elif isinstance(nested, list):
        copy["content"] = [
            _escaped_part(p, depth + 1) if isinstance(p, Mapping) else p for p in nested
        ]
    source = copy.get("source")
    if isinstance(source, Mapping) and source.get("type") in ("text", "content"):
        copy["source"] = _escaped_part(source, depth + 1)
        if isinstance(source.get("data"), str):
            copy["source"]["data"] = _TAG.sub("&lt;", source["data"])
    return copy


def _with_context(
    content: str | Sequence[Mapping[str, Any]], context: str | Mapping[str, Any] | None
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        if not content:
            raise RequestValidationError("the user's content is empty")
        parts: str | list[dict[str, Any]] = _TAG.sub("&lt;", content)
    elif _are_parts(content):
        parts = [_escaped_part(p) for p in content]
    else:
        raise RequestValidationError("the user's content must be text or a list of content parts")
    if context is None or (isinstance(context, (str, Mapping)) and not context):
        return parts  # (an empty context: no empty context block either)
    if isinstance(context, Mapping):
        rendered = "\n".join(_entry(k, context[k]) for k in sorted(context, key=str))
    elif isinstance(context, str):
        rendered = context
    else:
        raise RequestValidationError("context must be a string or a mapping")
    lead = f"<context>\n{_TAG.sub('&lt;', rendered)}\n</context>\n\n"
    if isinstance(parts, str):
        return lead + parts
    return [{"type": "text", "text": lead}, *parts]
