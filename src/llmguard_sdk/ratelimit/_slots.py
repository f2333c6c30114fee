"""Who a free concurrency slot is for: the calls already waiting for one, before later calls,
and among them the one whose wait ends first.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["slots_taken"]


def slots_taken(leases: Mapping[str, float], queue: Mapping[str, float], call_id: str) -> int:
    """The concurrency slots of a limit not free for ``call_id``: the ``leases`` of other
    calls and one for each call in the ``queue`` (id: the instant its wait ends) ahead of it
    that holds no lease. A call not yet waiting has every waiting call ahead of it (a freed
    slot is theirs first: a later call does not overtake them between their asks); a
    waiting call, those whose wait ends first (ties: the smaller id), which is arrival order
    for calls allowed the same wait (reserve.lua orders Redis's queue the same way). A
    queued call holding a lease waits for the rate, not for a slot."""
    taken = sum(1 for lease in leases if lease != call_id)
    mine = queue.get(call_id)
    for other, until in queue.items():
        if other not in leases and (mine is None or (until, other) < (mine, call_id)):
            taken += 1
    return taken
