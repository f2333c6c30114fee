"""One change to a cache's entries, as another process made it, read off the change stream
of a Redis cache (see :mod:`llmguard_sdk.cache.backends`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Change", "change_of", "text"]


@dataclass(frozen=True)
class Change:
    """One change to the entries, as another process made it; a put's ``stale_until`` is on
    this host's clock (whatever the writer's said)."""

    op: Literal["put", "del", "clear"]
    entry_id: str = ""
    index_key: str = ""
    vector: str = ""
    stale_until: float = 0.0


def _put_until(data: dict[str, str], message_id: str, server_ms: int, now: float) -> float:
    """When a logged put's entry dies, on this host's clock: from its ``ttl`` and the
    message id's time (both the server's); from ``until`` (the writer's clock) for a put
    logged by a version that wrote no ``ttl``; 0 (dead, never indexed) when unreadable."""
    try:
        if "ttl" in data:
            written_ms = int(message_id.split("-", 1)[0])
            return now + (written_ms + int(data["ttl"]) - server_ms) / 1000.0
        return float(data.get("until", "0") or 0)
    except ValueError:
        return 0.0


def text(value: bytes | str) -> str:
    """A Redis reply's bytes as text (text as it is)."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def change_of(
    fields: dict[bytes, bytes] | dict[str, str], message_id: str, server_ms: int, now: float
) -> Change:
    """One message of the change stream; a put's ``stale_until`` on this host's clock (its
    ``ttl`` counted from the message's id, written by the server's clock, to ``server_ms``,
    read by it just now: a writer's clock minutes off does not matter)."""
    data = {text(k): text(v) for k, v in fields.items()}
    op = data.get("op", "")
    if op == "put":
        until = _put_until(data, message_id, server_ms, now)
        return Change("put", data.get("id", ""), data.get("ix", ""), data.get("v", ""), until)
    if op == "del":
        return Change("del", data.get("id", ""))
    return Change("clear")
