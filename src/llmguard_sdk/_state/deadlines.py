"""Private: keys that each live until a deadline, forgotten oldest deadline first, without a
scan over the keys kept (the budget counters and reservations of this process, its canaries'
state).
"""

from __future__ import annotations

import heapq

__all__ = ["Deadlines"]


class Deadlines:
    """Keys, each with a deadline that only moves later, expired oldest first: a touch is
    O(1), an expiry amortised O(log n) (a heap holds one entry per key; an entry whose key
    was touched since is pushed again at its new deadline when it comes up). A key can be
    forgotten early; the heap is rebuilt from the live keys once forgotten ones make up
    most of it (amortised O(1) a key)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def touch(self, key: str, deadline: float) -> None:
        """Keep ``key`` until ``deadline`` at least (a later one it has stays)."""
        old = self.at.get(key)
        if old is None:
            heapq.heappush(self._heap, (deadline, key))
        if old is None or deadline > old:
            self.at[key] = deadline

    def forget(self, key: str) -> bool:
        """Drop ``key`` now; whether it was kept."""
        if self.at.pop(key, None) is None:
            return False
        if len(self._heap) > 2 * len(self.at) + 16:
            self._heap = [(deadline, kept) for kept, deadline in self.at.items()]
            heapq.heapify(self._heap)
        return True

    def expired(self, now: float) -> list[str]:
        """The keys whose deadline passed (forgotten here)."""
        gone: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, key = heapq.heappop(heap)
            deadline = self.at.get(key)
            if deadline is None:
                continue
            if deadline > now:
                heapq.heappush(heap, (deadline, key))
            else:
                del self.at[key]
                gone.append(key)
        return gone
