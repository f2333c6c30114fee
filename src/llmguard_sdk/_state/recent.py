"""Private: a bounded memo of values that are pure functions of their key (the counters of
a scope, the rate-limit cells of a tenant), for the keys seen lately.

A process serving any number of tenants keeps at most ``size`` of them: when the table is
full it is emptied whole (amortised O(1) a call, no scan, no order kept), and the next
calls fill it again with the tenants active now.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Recent"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """``make(key)``, remembered for at most ``size`` keys."""

    __slots__ = ("_found", "_make", "_size")

    def __init__(self, make: Callable[[K], V], size: int = 4096) -> None:
        self._make = make
        self._size = size
        self._found: dict[K, V] = {}

    def __call__(self, key: K) -> V:
        found = self._found.get(key)
        if found is None:
            found = self._make(key)
            if len(self._found) >= self._size:
                self._found.clear()
            self._found[key] = found
        return found

    def __len__(self) -> int:
        return len(self._found)
