"""Examples (and documents with ``sort=False``) that come out of a set in the set's order are
refused as a set is: its order follows its items' hashes, which differ between processes
(``PYTHONHASHSEED``), and so did the static text and ``prefix_hash``. A set and a frozenset
were refused; an iterator over one (``iter(pairs)``), a generator expression over one, and
``map`` / ``filter`` / ``zip`` over one were taken in that order. What keeps an order (a
list, a tuple, a dict and its views, a generator or ``map`` over a list) is taken as it is.
(A dict built from a set has the set's order; nothing tells it apart from any other dict.)"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.prompts import Example, PromptBuilder

PAIRS = [("q1", "a1"), ("q2", "a2"), ("q3", "a3")]
EXAMPLES = [Example(user=u, assistant=a) for u, a in PAIRS]


def builder(**options: Any) -> PromptBuilder:
    return PromptBuilder("order", drift=None, min_cache_tokens=None, **options)


UNORDERED: dict[str, Callable[[], Any]] = {
    "set-iterator": lambda: iter(set(PAIRS)),
    "frozenset-iterator": lambda: iter(frozenset(PAIRS)),
    "generator-over-a-set": lambda: (pair for pair in set(PAIRS)),
    "map-over-a-set": lambda: map(tuple, set(PAIRS)),
    "filter-over-a-set": lambda: filter(None, set(PAIRS)),
    "zip-over-sets": lambda: zip(sorted({u for u, _ in PAIRS}), {a for _, a in PAIRS}, strict=True),
    "weakset": lambda: weakref.WeakSet(EXAMPLES),
    "nested": lambda: (Example(*p) for p in map(tuple, iter(set(PAIRS)))),
}


@pytest.mark.parametrize("make", UNORDERED.values(), ids=UNORDERED.keys())
def test_examples_that_come_out_of_a_set_are_refused(make: Callable[[], Any]) -> None:
    with pytest.raises(ConfigurationError, match="examples must be in an order"):
        builder(examples=make())
    with pytest.raises(ConfigurationError, match="examples must be in an order"):
        builder().set_examples(make())


def test_documents_out_of_a_set_are_refused_unsorted_only() -> None:
    docs = {"Returns.", "Delivery.", "Refunds."}
    with pytest.raises(ConfigurationError, match="documents must be in an order"):
        builder().set_documents((d for d in docs), sort=False)
    assert builder(documents=(d for d in docs)).static_text == builder(documents=docs).static_text


ORDERED: dict[str, Callable[[], Any]] = {
    "list": lambda: list(PAIRS),
    "tuple": lambda: tuple(PAIRS),
    "dict-items": lambda: dict(PAIRS).items(),
    "iterator-over-a-list": lambda: iter(PAIRS),
    "generator-over-a-list": lambda: (pair for pair in PAIRS),
    "map-over-a-list": lambda: map(tuple, PAIRS),
    "zip-over-lists": lambda: zip([u for u, _ in PAIRS], [a for _, a in PAIRS], strict=True),
    "sorted-set": lambda: sorted(set(PAIRS)),
    "generator-function": lambda: _walked(),
}


def _walked() -> Any:
    """A generator function's generator (no iterable of its own to look at)."""
    yield from PAIRS


@pytest.mark.parametrize("make", ORDERED.values(), ids=ORDERED.keys())
def test_what_keeps_an_order_is_taken(make: Callable[[], Any]) -> None:
    assert builder(examples=make()).static_text == builder(examples=PAIRS).static_text
