"""Streamed text of the local model: chunks out, stop strings held back until they are sure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..models import StreamChunk

if TYPE_CHECKING:
    from ._local_engine import _Job

__all__: list[str] = []


class _Emitter:
    """Turns decoded text into chunks, holding back what might be the start of a stop string."""

    def __init__(self, job: _Job, model: str, route: str, stops: list[str]) -> None:
        self.job, self.model, self.route, self.stops = job, model, route, stops
        self.pending = ""

    def emit(self, chunk: StreamChunk) -> None:
        self.job.out.put(chunk)

    def text(self, piece: str, *, flush: bool = False) -> bool:
        """Add ``piece``; True when a stop string was reached (text before it is sent)."""
        self.pending += piece
        found = [at for stop in self.stops if stop and (at := self.pending.find(stop)) >= 0]
        if found:  # the answer ends where the first stop string in it starts
            self._send(self.pending[: min(found)])
            self.pending = ""
            return True
        hold = 0 if flush else _partial_stop(self.pending, self.stops)
        self._send(self.pending[: len(self.pending) - hold])
        self.pending = self.pending[len(self.pending) - hold :]
        return False

    def _send(self, text: str) -> None:
        if text:
            self.emit(StreamChunk(text=text, model=self.model, route=self.route))


def _partial_stop(text: str, stops: list[str]) -> int:
    """How many trailing characters of ``text`` could begin a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:size]):
                longest = max(longest, size)
                break
    return longest
