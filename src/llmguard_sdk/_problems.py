"""pydantic's validation errors as the one-line problems our errors show."""

from __future__ import annotations

import difflib
import types
from collections.abc import Collection
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = ["problems", "resembled"]


def problems(
    exc: ValidationError,
    default: str,
    skip: Collection[str] = (),
    model: type[BaseModel] | None = None,
) -> list[str]:
    """Each error of ``exc`` as ``location: message``: the location's parts joined by dots,
    ``skip`` (a union's branch names) left out, ``default`` where none is left; a validator's
    own message without pydantic's ``Value error, `` before it. With the
    ``model`` validated (a file's), a key it does not take names the key of its table it
    resembles (a key of the top level in a table: that it is one), and a value that is no
    table says so without naming our classes."""
    return [
        f"{'.'.join(str(p) for p in err['loc'] if p not in skip) or default}: "
        f"{_message(err, model)}"
        for err in exc.errors()
    ]


def _message(err: Any, model: type[BaseModel] | None) -> str:
    message: str = err["msg"]
    if err["type"] == "value_error":  # our validators' own words, without pydantic's prefix
        message = message.removeprefix("Value error, ")
    if model is None:
        return message
    if err["type"] == "model_type":  # "... a valid dictionary or instance of RouteConfig"
        return f"Input should be a table of keys, got {_what(err['input'])}"
    if err["type"] == "extra_forbidden":
        *table, key = err["loc"]
        if table and key in model.model_fields:  # routes.0.timeout: the file's own setting
            return f"{message} ({key} is a top-level key, not one of this table's)"
        near = resembled(str(key), _keys(model, table))
        return f"{message} (did you mean {near}?)" if near else message
    return message


def resembled(word: str, choices: Collection[str]) -> str | None:
    """The one of ``choices`` that ``word`` is likeliest a misspelling of, or None (the
    ``did you mean ...?`` of a file's key, a route's shortcut)."""
    near = difflib.get_close_matches(word, list(choices), n=1)
    return near[0] if near else None


def _what(value: object) -> str:
    if value is None:
        return "nothing (an empty file?)"
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list | tuple) else type(value).__name__


def _keys(model: type[BaseModel], location: list[Any]) -> list[str]:
    """The keys the table at ``location`` in ``model`` takes (its fields)."""
    found: list[Any] = [model]
    for part in location:
        found = [branch for annotation in found for branch in _step(annotation, part)]
    return sorted({name for kind in found if _is_model(kind) for name in kind.model_fields})


def _step(annotation: Any, part: Any) -> list[Any]:
    """What ``part`` of a location (a key, an index, a union's branch name) leads to."""
    if _is_model(annotation):
        if part == annotation.__name__:  # a tagged union's branch
            return [annotation]
        field = annotation.model_fields.get(part) if isinstance(part, str) else None
        return [] if field is None else _branches(field.annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and isinstance(part, int):
        return _branches(args[0])
    if origin is dict and isinstance(part, str):
        return _branches(args[1])
    return []


def _branches(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Annotated:
        return _branches(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [branch for arg in get_args(annotation) for branch in _branches(arg)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
