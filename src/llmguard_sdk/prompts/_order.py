"""Whether a :class:`~llmguard_sdk.prompts.PromptBuilder`'s examples (or its documents with
``sort=False``) come in an order no two processes share: a set's, which follows its items'
hashes (``PYTHONHASHSEED``), and so would the static text and ``prefix_hash`` kept in it.

A set or frozenset (any :class:`collections.abc.Set` but a dict's key and item views, which
keep the dict's order), an iterator over one, and what Python says iterates over one: a
generator expression (its iterable, before and while it runs), ``map``, ``filter``, ``zip``
and ``enumerate``, looked into :data:`_DEEPEST` levels deep. What else a generator function
or another iterator walks over Python does not say; nor does a dict say it was built from a
set (it has the set's order): those are taken as they come.
"""

from __future__ import annotations

from collections.abc import ItemsView, KeysView
from collections.abc import Set as AbstractSet
from typing import Any

__all__ = ["unordered"]

_SET_ITERATOR: type[Any] = type(iter(frozenset[Any]()))  # (a set's iterator too)
_WRAPPERS = (map, filter, zip, enumerate)  # their __reduce__ names what they iterate over
_DEEPEST = 8


def unordered(values: object, depth: int = 0) -> bool:
    """Whether ``values`` come in a set's order (see the module docs)."""
    if isinstance(values, AbstractSet) and not isinstance(values, KeysView | ItemsView):
        return True
    if isinstance(values, _SET_ITERATOR):
        return True
    if depth >= _DEEPEST:
        return False
    return any(unordered(inner, depth + 1) for inner in _sources(values))


def _sources(values: object) -> tuple[Any, ...]:
    """What ``values`` iterates over, where Python says: a generator expression's iterable
    (its frame's ``.0``), the iterables ``map``, ``filter``, ``zip`` and ``enumerate`` hold."""
    if type(values) in _WRAPPERS:
        return tuple(values.__reduce__()[1])
    frame = getattr(values, "gi_frame", None)  # (None once a generator is done)
    if frame is None or getattr(values, "gi_code", None) is None:
        return ()
    iterable = frame.f_locals.get(".0")
    return () if iterable is None else (iterable,)
