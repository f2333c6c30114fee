"""An incremental decoder for server-sent events (the ``text/event-stream`` format).

It follows the WHATWG event-stream rules that matter for LLM streams: lines end in LF, CRLF or
CR; ``data:`` lines of one event are joined with LF; a blank line dispatches the event; lines
starting with ``:`` are comments; a single space after the colon is dropped; a leading byte
order mark is ignored. Bytes may arrive split anywhere, even inside a UTF-8 character or a
CRLF pair. An event not yet ended by a blank line when the stream closes is incomplete:
:attr:`SSEDecoder.pending` says so, so the caller can tell a clean end from a cut one.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEDecoder:
    """Feed bytes in any pieces, get complete events out."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")  # BOM dropped
        self._buffer = ""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._saw_field = False
        self._cr_pending = False

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished line or event are held back."""
        return bool(self._buffer) or self._saw_field

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        """Decode ``chunk`` and yield the events it completes."""
        text = self._text.decode(chunk)
        if self._cr_pending and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across chunks
        self._cr_pending = False
        self._buffer += text
        while True:
            cut = _first_line_end(self._buffer)
            if cut is None:
                return
            line, ending_len = self._buffer[:cut], 1
            if self._buffer[cut] == "\r":
                if cut + 1 < len(self._buffer):
                    ending_len = 2 if self._buffer[cut + 1] == "\n" else 1
                else:
                    self._cr_pending = True
            self._buffer = self._buffer[cut + ending_len :]
            event = self._take_line(line)
            if event is not None:
                yield event

    def flush(self) -> ServerSentEvent | None:
        """At the stream's end: the event it ended in without the blank line (its last line
        taken even without a line end), else ``None``. The WHATWG rules drop that event; the
        caller may still read it (a ``[DONE]`` that lost its blank line)."""
        line, self._buffer = self._buffer, ""
        if line:
            self._take_line(line)
        return self._dispatch()

    def _take_line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        self._saw_field = True
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        saw, data, event = self._saw_field, self._data, self._event
        self._data, self._event, self._saw_field = [], "", False
        if not saw or not data:
            return None
        return ServerSentEvent(data="\n".join(data), event=event or "message", id=self._id)


def _first_line_end(text: str) -> int | None:
    positions = [p for p in (text.find("\n"), text.find("\r")) if p >= 0]
    return min(positions) if positions else None
