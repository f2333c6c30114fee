"""Background work on a store (the budgets' journal sweep): stopped by the store's
``close()``, which waits for the work under way (bounded).

Private.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["Background"]


class Background:
    """The store's background work: entered by each piece of it (:meth:`work`), stopped
    for good by :meth:`stop`."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._under_way: list[int] = []  # the threads at work (their idents)
        self.stopped = False
        """Whether :meth:`stop` ran: work checks it between round trips, and stops."""

    @contextlib.contextmanager
    def work(self) -> Iterator[Background]:
        """Held around one piece of work: it does nothing when ``stopped`` is True as it
        enters, and ends at its next check once it is (:meth:`stop` waits for it)."""
        me = threading.get_ident()
        with self._changed:
            going = not self.stopped
            if going:
                self._under_way.append(me)
        try:
            yield self
        finally:
            if going:
                with self._changed:
                    self._under_way.remove(me)
                    self._changed.notify_all()

    def stop(self, seconds: float) -> bool:
        """Stop further work and wait at most ``seconds`` for the work under way (on other
        threads than this one) to end: whether it did."""
        me = threading.get_ident()
        with self._changed:
            self.stopped = True
            return self._changed.wait_for(
                lambda: all(thread == me for thread in self._under_way), seconds
            )
