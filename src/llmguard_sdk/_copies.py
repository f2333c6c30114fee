"""Objects of the call path made in fewer steps: a pydantic model copied with some fields
changed (:func:`updated`), a frozen dataclass made from all its fields (:func:`frozen`)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["frozen", "updated"]

_Model = TypeVar("_Model", bound=BaseModel)
_T = TypeVar("_T")
_set = object.__setattr__


def updated(model: _Model, update: dict[str, Any]) -> _Model:
    """``model.model_copy(update=update)`` for models without extra fields or private
    attributes (this package's :mod:`~llmguard_sdk.models`), without pydantic's generic
    copies: the call path copies a response once per call. ``tests/test_models.py`` pins it
    to pydantic's own copy."""
    new = model.__class__.__new__(model.__class__)
    _set(new, "__dict__", {**model.__dict__, **update})
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(new, "__pydantic_private__", None)
    return new


def frozen(cls: type[_T], fields: dict[str, Any]) -> _T:
    """An instance of the frozen dataclass ``cls`` (without slots) from **every** one of its
    fields, without the generated ``__init__``'s ``object.__setattr__`` per field (eight
    times faster for the 14 fields of a :class:`~llmguard_sdk.CallEvent`). It stays frozen:
    assignment still raises. ``tests/test_models.py`` pins it to the constructor."""
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance
