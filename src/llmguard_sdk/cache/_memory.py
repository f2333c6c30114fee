"""The in-memory backend of the response cache: this process's entries, least recently used
first (see :mod:`llmguard_sdk.cache.backends`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from .entry import CacheEntry

if TYPE_CHECKING:
    from .backends import Change

__all__ = ["MemoryCacheBackend"]


class MemoryCacheBackend:
    """Entries of one process, least recently used first.

    Each entry is kept as its JSON bytes alone, without the vector (the semantic index holds
    that), its id (the key) or the embedder's name (the cache's own): a few hundred bytes for
    a short answer, where the parsed model would take several kilobytes.

    ``max_bytes`` (optional) bounds the entries' size too: an entry costs its JSON bytes plus
    its vector's (float16, as the index holds it), counted once when it is stored. The least
    recently used go first, as beyond ``max_entries``; an entry larger than the whole bound,
    or than ``max_entry_bytes``, is not stored.
    """

    def __init__(
        self, max_entries: int, max_bytes: int | None = None, max_entry_bytes: int | None = None
    ) -> None:
        self._max = max_entries
        self._max_bytes = max_bytes
        caps = [cap for cap in (max_bytes, max_entry_bytes) if cap is not None]
        self._largest = min(caps) if caps else None  # the largest entry stored
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        # each entry's size while bounded in bytes (an int per entry, not paid otherwise)
        self._sizes: dict[str, int] | None = None if max_bytes is None else {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, entry_id: str) -> CacheEntry | None:
        """See :class:`CacheBackend` (the entry comes back without its vector)."""
        return self._read(entry_id, touch=True)

    def peek(self, entry_id: str) -> CacheEntry | None:
        """:meth:`get`, not marked as recently used (the cache reads a rival entry so, to
        judge a hit ambiguous: compared is not used).

        .. versionadded:: 0.2.0"""
        return self._read(entry_id, touch=False)

    def _read(self, entry_id: str, *, touch: bool) -> CacheEntry | None:
        with self._lock:
            packed = self._entries.get(entry_id)
            if packed is None:
                return None
            if touch:
                self._entries.move_to_end(entry_id)
        # the id spliced in front of the other fields: one parse, no dict in between
        entry = CacheEntry.model_validate_json(
            b'{"entry_id":%s,%s' % (_json_id(entry_id), packed[1:])
        )
        if entry.stale_until <= time.time():
            with self._lock:
                if self._entries.get(entry_id) is packed:
                    self._drop(entry_id)
            return None
        return entry

    def __contains__(self, entry_id: object) -> bool:
        """Whether an entry with this id is held (live or not; not marked as used)."""
        with self._lock:
            return entry_id in self._entries

    def put(self, entry: CacheEntry) -> list[str]:
        """See :class:`CacheBackend`."""
        packed = entry.model_dump_json(
            exclude={"vector", "entry_id", "embedder"}, exclude_none=True
        ).encode("utf-8")
        size = len(packed) + _vector_bytes(entry.vector)
        with self._lock:
            if self._largest is not None and size > self._largest:
                self._drop(entry.entry_id)  # (an older answer to the same request goes too)
                return [entry.entry_id]
            self._drop(entry.entry_id)
            self._entries[entry.entry_id] = packed
            if self._sizes is not None:
                self._sizes[entry.entry_id] = size
                self._bytes += size
            evicted = []
            while len(self._entries) > self._max or (
                self._max_bytes is not None and self._bytes > self._max_bytes
            ):
                evicted.append(self._drop(next(iter(self._entries))))
            return evicted

    def _drop(self, entry_id: str) -> str:
        """Remove ``entry_id`` if held (its lock held); returns it."""
        if self._entries.pop(entry_id, None) is not None and self._sizes is not None:
            self._bytes -= self._sizes.pop(entry_id)
        return entry_id

    def delete(self, entry_id: str) -> bool:
        """See :class:`CacheBackend`."""
        with self._lock:
            held = entry_id in self._entries
            self._drop(entry_id)
        return held

    def clear(self) -> None:
        """See :class:`CacheBackend`."""
        with self._lock:
            self._entries.clear()
            if self._sizes is not None:
                self._sizes.clear()
            self._bytes = 0

    def changes(self) -> list[Change]:
        """Nothing is shared: this process made every change itself."""
        return []


def _vector_bytes(vector: str | None) -> int:
    """The bytes of an encoded vector (base64 of float16) once decoded, without decoding."""
    if not vector:
        return 0
    return len(vector) // 4 * 3 - (2 if vector.endswith("==") else vector.endswith("="))


def _json_id(entry_id: str) -> bytes:
    """``entry_id`` as a JSON string (a hex digest as it is, anything else escaped)."""
    if entry_id.isascii() and entry_id.isalnum():
        return b'"%s"' % entry_id.encode("ascii")
    return json.dumps(entry_id).encode("utf-8")
