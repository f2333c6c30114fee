"""A :class:`~llmguard_sdk.ChatRequest` of the common shape built without pydantic's
validation (:func:`quick_request`).

Most calls send a few plain messages and a few plain numbers; pydantic's validation of them
was most of a call's time at its entry. Here each value is checked with exact type tests
(``type(x) is str``: no subclass, no bool for an int, no NaN) against the same rules, and the
models are made as pydantic makes them (the same field values, types, defaults and fields
set). Anything else, every bad input among it, is left to pydantic, so its errors are
unchanged. ``tests/test_quick_request.py`` pins the two to each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from .models import _GOOD_HEADER_NAMES, _MOST_OUTPUT_TOKENS, ChatRequest, Message, _is_header_text

__all__ = ["quick_request"]

_Model = TypeVar("_Model", bound=BaseModel)
_new, _set = object.__new__, object.__setattr__
_SLOTS = vars(BaseModel)  # (their setters: no look-up through the class per field)
_set_extra = _SLOTS["__pydantic_extra__"].__set__
_set_fields_set = _SLOTS["__pydantic_fields_set__"].__set__
_set_private = _SLOTS["__pydantic_private__"].__set__
_SLOW: Any = object()  # a value left to pydantic
_ROLES = frozenset(("system", "developer", "user", "assistant", "tool"))
_MORE_KEYS = ("name", "tool_call_id")
_NONE_KEYS = ("tool_calls", "is_error", "thinking")
_MESSAGE_KEYS = frozenset((*_MORE_KEYS, *_NONE_KEYS, "role", "content"))
# (the fields' defaults in their order; those given overwrite them, messages always)
_MESSAGE_DEFAULTS = {name: field.default for name, field in Message.model_fields.items()}
_REQUEST_DEFAULTS = {name: field.default for name, field in ChatRequest.model_fields.items()}
_OTHERS = ("tools", "tool_choice", "response_format", "extra_body", "extra_query")


def _made(cls: type[_Model], defaults: dict[str, Any], values: dict[str, Any]) -> _Model:
    """``cls`` as pydantic validates it from ``values``, already checked and converted."""
    new = _new(cls)
    _set(new, "__dict__", {**defaults, **values})  # (in the fields' order, as pydantic's)
    _set_extra(new, None)
    _set_fields_set(new, set(values))
    _set_private(new, None)
    return new


def _message(item: object) -> Message | None:
    """A message of role and ``str`` content (a name, a tool message's id; None for its
    other fields), else None."""
    if type(item) is not dict:
        return item if type(item) is Message else None  # (pydantic keeps a Message as it is)
    role, content = item.get("role"), item.get("content")
    if type(role) is not str or role not in _ROLES or type(content) is not str:
        return None
    fields: dict[str, Any] = {"role": role, "content": content}  # (the fields' names)
    if len(item) > 2:  # a name, a tool message's id; nothing else
        if not _MESSAGE_KEYS.issuperset(item):
            return None
        for key in _MORE_KEYS:
            if key in item:
                value = fields[key] = item[key]
                if not (value is None or type(value) is str):
                    return None
        for key in _NONE_KEYS:  # (given None: None, as pydantic takes it)
            if key in item:
                if item[key] is not None:
                    return None
                fields[key] = None
    if role == "tool" and not fields.get("tool_call_id"):
        return None
    return _made(Message, _MESSAGE_DEFAULTS, fields)


def _messages(value: object) -> Any:
    if type(value) is not list or not value:
        return _SLOW
    made = []
    for item in value:
        message = _message(item)
        if message is None:
            return _SLOW
        made.append(message)
    return made


def _output_tokens(value: object) -> Any:
    return value if type(value) is int and 0 < value <= _MOST_OUTPUT_TOKENS else _SLOW


def _number(most: float) -> Callable[[object], Any]:
    def check(value: object) -> Any:
        if (type(value) is float or type(value) is int) and 0.0 <= value <= most:
            return float(value)  # (an int is a float, as pydantic takes it; NaN fails)
        return _SLOW

    return check


def _model(value: object) -> Any:
    # (ASCII alone: pydantic refuses a lone surrogate's string for this field's min_length)
    return value if type(value) is str and value and value.isascii() else _SLOW


def _seed(value: object) -> Any:
    return value if type(value) is int and -(2**63) <= value < 2**63 else _SLOW


def _stop(value: object) -> Any:
    if type(value) is str:
        return value
    if type(value) is list and len(value) <= 4 and all(type(s) is str for s in value):
        return list(value)
    return _SLOW


def _strings(value: object) -> Any:
    if type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()):
        return dict(value)
    return _SLOW


def _headers(value: object) -> Any:
    """Headers of names found good before (the idempotency key's) and good values."""
    if type(value) is not dict:
        return _SLOW
    for name, text in value.items():
        if name not in _GOOD_HEADER_NAMES or type(name) is not str or type(text) is not str:
            return _SLOW
        if not _is_header_text(text):
            return _SLOW
    return dict(value)


def _left_to_pydantic(value: object) -> Any:
    return _SLOW  # (a field given None is None: this is the check of any other value)


_CHECKS: dict[str, tuple[str, Callable[[object], Any]]] = {
    name: (name, check)  # (the name as the field spells it: a key may be a str subclass)
    for name, check in (
        ("messages", _messages),
        ("model", _model),
        ("max_tokens", _output_tokens),
        ("max_completion_tokens", _output_tokens),
        ("temperature", _number(2.0)),
        ("top_p", _number(1.0)),
        ("seed", _seed),
        ("stop", _stop),
        ("metadata", _strings),
        ("extra_headers", _headers),
        *((name, _left_to_pydantic) for name in _OTHERS),
    )
}


def quick_request(data: dict[str, Any]) -> ChatRequest | None:
    """``ChatRequest.model_validate(data)`` for the common shape, without pydantic; None
    for anything else (for pydantic to validate, or refuse)."""
    values = {}
    for key, value in data.items():
        known = _CHECKS.get(key)
        if known is None:
            return None
        name, check = known
        found = None if value is None and name != "messages" else check(value)
        if found is _SLOW:
            return None
        values[name] = found
    if "messages" not in values:
        return None
    return _made(ChatRequest, _REQUEST_DEFAULTS, values)
