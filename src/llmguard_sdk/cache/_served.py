"""What an answer served from the cache says about its hit: a Guard's caller holds the answer
alone, not the :class:`~llmguard_sdk.cache.CacheHit`, and reports a false hit with it.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any, Literal

from .._ids import UniqueIds
from .._state.stores import Store
from ..errors import RequestValidationError
from ..models import ChatResponse
from .entry import CacheEntry, CacheHit

__all__ = [
    "cache_name",
    "false_hit_here",
    "hit_id",
    "hit_metadata",
    "matched_by",
    "served_entry",
    "served_hit",
]

logger = logging.getLogger("llmguard_sdk")

_HIT_IDS = UniqueIds("llmguard-cache-")
_ID_KIND = re.compile(r"[A-Za-z]+[-_]")  # how an API's ids begin: chatcmpl-, resp_, msg_


def cache_name(state: Store, namespace: str) -> str:
    """The name a cache's hits carry (:attr:`CacheHit.served_by`): its namespace, and where
    its entries live: a Redis key prefix (every process's cache on that namespace is one
    cache), or this in-memory cache alone (a name no other cache has)."""
    where = state.key_prefix if state.kind == "redis" else f"memory-{uuid.uuid4().hex[:12]}"
    return f"{where}/{namespace}"


def served_hit(
    kind: Literal["exact", "semantic"], entry: CacheEntry, similarity: float, served_by: str
) -> CacheHit | None:
    """``entry`` as a hit found by ``kind`` in the cache named ``served_by``; ``None`` (a
    miss, logged) when its answer is in a shape this version cannot read (another version's,
    sharing the namespace in Redis)."""
    try:
        response = entry.chat_response()
    except ValueError as exc:  # (pydantic's ValidationError is one)
        logger.warning("response cache: an answer this version cannot read is a miss: %s", exc)
        return None
    return CacheHit(kind, entry.entry_id, similarity, response, entry.query, kind, served_by)


def hit_id(cached_id: str | None) -> str | None:
    """A new id for one serving of a cached answer whose own id was ``cached_id``: begun as
    that one is (``chatcmpl-``, ``resp_``, ``msg_``: what the drop-in clients and the seam
    keep), then ``llmguard-cache-`` and 32 hex digits no other serving of any process has.
    Two callers given the same hit are given two ids, as two answers of the provider
    would be (logs, traces and spend records keyed on ids keep them apart); ``None`` for an
    answer stored without an id (the seam then makes one, as for any)."""
    if cached_id is None:
        return None
    kind = _ID_KIND.match(cached_id)
    return (kind[0] if kind else "") + _HIT_IDS.next()


def hit_metadata(hit: CacheHit) -> dict[str, Any]:
    """The metadata a served answer carries about its hit: ``cache`` (its kind), its
    ``similarity``, ``cache_entry`` (the entry's id), ``cache_matched`` (``"exact"`` or
    ``"semantic"``: how the entry was found), ``cache_served_by`` (the cache that served it,
    :func:`cache_name`) and ``cached_id``, the stored answer's own id (the served answer has
    one of its own, :func:`hit_id`), where it had one."""
    found = {
        "cache": hit.kind,
        "similarity": round(hit.similarity, 4),
        "cache_entry": hit.entry_id,
        "cache_matched": hit.matched,
        "cache_served_by": hit.served_by,
    }
    return found if hit.response.id is None else {**found, "cached_id": hit.response.id}


def matched_by(served: object) -> Literal["exact", "semantic"] | None:
    """How the entry of a served answer was found (``None``: not an answer from the cache);
    ``served`` is a :class:`CacheHit` or the :class:`~llmguard_sdk.ChatResponse` a Guard
    returned. Anything else is a :class:`~llmguard_sdk.errors.RequestValidationError`."""
    if isinstance(served, CacheHit):
        return served.matched
    if not isinstance(served, ChatResponse):
        raise RequestValidationError(
            f"a false hit is reported with a CacheHit or a ChatResponse, got {served!r}"
        )
    matched = served.metadata.get("cache_matched") if served.metadata.get("cache") else None
    return matched if matched in ("exact", "semantic") else None


def false_hit_here(served: CacheHit | ChatResponse, name: str) -> bool:
    """Whether a report of ``served`` as a false hit counts for the cache named ``name``
    (:func:`cache_name`): an answer found by similarity, served by that cache. ``served``
    as for :func:`matched_by`."""
    if matched_by(served) != "semantic":
        return False
    if isinstance(served, CacheHit):
        return served.served_by == name
    return served.metadata.get("cache_served_by") == name


def served_entry(served: CacheHit | ChatResponse) -> str | None:
    """The id of the entry a served answer came from (``None``: not an answer from the
    cache); ``served`` as for :func:`matched_by`."""
    if isinstance(served, CacheHit):
        return served.entry_id
    matched_by(served)  # (anything else: a RequestValidationError)
    entry = served.metadata.get("cache_entry") if served.metadata.get("cache") else None
    return entry if isinstance(entry, str) and entry else None
