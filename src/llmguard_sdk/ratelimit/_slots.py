"""Who a free concurrency slot is for: the calls already waiting for one, before later calls.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["slots_taken"]


def slots_taken(leases: Mapping[str, float], queue: Mapping[str, float], call_id: str) -> int:
    """The concurrency slots of a limit not free for ``call_id``: the ``leases`` of other
    calls and, for a call not yet waiting for a slot, one for each call in the ``queue``
    that is (a freed slot is theirs first: a later call does not overtake them between
    their asks). A queued call holding a lease waits for the rate, not for a slot."""
    taken = sum(1 for lease in leases if lease != call_id)
    if call_id in queue:
        return taken
    return taken + sum(1 for other in queue if other not in leases)
