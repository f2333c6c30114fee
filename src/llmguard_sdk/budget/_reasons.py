"""Why Redis did not decide a budget's reservation or status read, in the words of its
refusal, its status error and its ``on_event`` news: this process's load (a full connection
pool, a busy event loop), Redis refusing the script (it answered, with an error), no answer
within what the call's deadline left the round trip (:mod:`.._state.bounds`), or Redis away
(paused, or failing now).

Private. redis is imported when a failure is judged, never before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .._state.health import (
    exhausted,
    failure,
    lagging,
    out_of_its_time,
    refusal,
    refused,
    said,
    unauthenticated,
)

if TYPE_CHECKING:
    from .._state.stores import RedisStore

__all__ = ["Cause", "cause", "reason"]

Cause = Literal["away", "pool", "loop", "refused", "time"]


def cause(exc: BaseException | None) -> Cause:
    """Why the round trip that raised ``exc`` was not decided by Redis (``None``: it was not
    tried, Redis paused)."""
    if exc is None:
        return "away"
    if out_of_its_time(exc):
        return "time"
    if lagging(exc):
        return "loop"
    if exhausted(exc):
        return "pool"
    if refused(exc):
        return "refused"
    return "away"


def reason(why: Cause, exc: BaseException | None, store: RedisStore) -> str:
    """What to tell of ``why`` (the error ``exc`` of ``store``; ``None``: Redis paused), but
    for Redis away: "" (each says that in its own words), unless it refused the store's
    credentials (also in the pause after, as the store's health keeps it)."""
    pool_timeout = store.pool_timeout
    if why == "loop":
        return (
            "this process's event loop was too busy to read the Redis store's answer in time "
            "(its own load; Redis is not paused); run fewer calls at once per event loop"
        )
    if why == "pool":
        return (
            f"the Redis store's connection pool stayed full for pool_timeout ({pool_timeout:g} "
            "s), this process's own load (Redis is not paused); raise the store's "
            "max_connections or pool_timeout"
        )
    if why == "time":
        return (
            "Redis did not answer within what the call's deadline left the round trip "
            "(Redis is not paused)"
        )
    if why == "refused" and exc is not None:
        why_so = refusal(exc, store.key_prefix)
        return f"Redis refused the budget script ({said(exc)}): {why_so} (Redis is not paused)"
    if exc is None:
        return store.health.why
    return failure(exc, store.key_prefix) if unauthenticated(exc) else ""
