"""The spend of quiet budget counters, compact: a process keeps one per tenant for its
window, so a tenant must cost bytes, not a string, a dict slot and an int object.

A :class:`SpendTable` maps a counter's key to its spend (nano-dollars) and the alerts it
fired. The key is kept as a fixed-size 64-bit digest (Python's string hash, stable for the
life of the process, which is the life of the table) in an open-addressed table of two
machine-word arrays, between a third and two thirds full: 24 to 48 bytes a counter,
whatever the key's length (a key string, a dict slot and an int took about 160). Two keys
whose digests are equal would share a spend; with 64 bits that is under one chance in a
billion among 100,000 counters of one window (the tenant ids inside keys are 64-bit
digests already).
"""

from __future__ import annotations

from array import array

__all__ = ["SpendTable"]

_EMPTY = 0  # a digest of 0 is stored as 1
_WORD = range(-(2**63), 2**63)  # a spend outside it is kept aside (a $9 billion window)


def _digest(key: str) -> int:
    return hash(key) or 1


class SpendTable:
    """Counter key -> (spend in nano-dollars, the alerts it fired); linear probing, no
    tombstones (a pop shifts the entries after it back), grown x2 at 2/3 full."""

    __slots__ = ("_aside", "_keys", "_mask", "_size", "_spent")

    def __init__(self) -> None:
        self._keys = array("q", bytes(8 * 8))
        self._spent = array("q", bytes(8 * 8))
        self._mask = 7
        self._size = 0
        # the few counters that fired alerts (or spent more than a machine word holds)
        self._aside: dict[int, tuple[int, frozenset[float] | None]] = {}

    def __len__(self) -> int:
        return self._size

    def _slot(self, digest: int) -> int:
        """The slot holding ``digest``, or the empty slot where it would go."""
        keys, mask = self._keys, self._mask
        slot = digest & mask
        while True:
            found = keys[slot]
            if found in (digest, _EMPTY):
                return slot
            slot = (slot + 1) & mask

    def get(self, key: str) -> tuple[int, frozenset[float] | None] | None:
        """``key``'s spend and fired alerts (None: none fired), or None when not kept."""
        digest = _digest(key)
        slot = self._slot(digest)
        if self._keys[slot] == _EMPTY:
            return None
        return self._aside.get(digest) or (self._spent[slot], None)

    def put(self, key: str, spent: int, fired: frozenset[float] | None = None) -> None:
        """Keep ``key``'s spend (and the alerts it fired), replacing what was kept."""
        digest = _digest(key)
        slot = self._slot(digest)
        if self._keys[slot] == _EMPTY:
            if 3 * (self._size + 1) > 2 * (self._mask + 1):
                self._grow()
                slot = self._slot(digest)
            self._keys[slot] = digest
            self._size += 1
        if fired or spent not in _WORD:
            self._aside[digest] = spent, fired or None
            self._spent[slot] = 0
        else:
            self._aside.pop(digest, None)
            self._spent[slot] = spent

    def pop(self, key: str) -> tuple[int, frozenset[float] | None] | None:
        """:meth:`get` and forget ``key``."""
        digest = _digest(key)
        keys, spent, mask = self._keys, self._spent, self._mask
        hole = self._slot(digest)
        if keys[hole] == _EMPTY:
            return None
        found = self._aside.pop(digest, None) or (spent[hole], None)
        self._size -= 1
        slot = hole
        while True:  # move back each entry after the hole that may sit in it
            slot = (slot + 1) & mask
            moved = keys[slot]
            if moved == _EMPTY:
                break
            home = moved & mask
            if (slot - home) & mask >= (slot - hole) & mask:
                keys[hole], spent[hole] = moved, spent[slot]
                hole = slot
        keys[hole] = _EMPTY
        spent[hole] = 0
        return found

    def _grow(self) -> None:
        old_keys, old_spent = self._keys, self._spent
        size = 2 * (self._mask + 1)
        self._keys = array("q", bytes(8 * size))
        self._spent = array("q", bytes(8 * size))
        self._mask = size - 1
        for digest, spent in zip(old_keys, old_spent, strict=True):
            if digest != _EMPTY:
                slot = self._slot(digest)
                self._keys[slot] = digest
                self._spent[slot] = spent
