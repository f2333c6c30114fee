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
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]

_LINE_END = re.compile(r"\r\n|\r|\n")  # (CRLF first: one line end)


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
        self._held: list[str] = []  # the pieces of a line not ended yet (joined at its end)
        self._held_size = 0  # their characters
        self._data_size = 0  # characters of the unfinished event's data lines
        self._buffer = ""  # a piece whose lines a reader left untaken, from ``_at`` on
        self._at = 0
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._saw_field = False
        self._cr_pending = False

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished line or event are held back."""
        return bool(self._held) or self._at < len(self._buffer) or self._saw_field

    @property
    def held(self) -> int:
        """Characters held back for the unfinished line and event: a caller can bound them
        (a line that never ends is otherwise kept whole)."""
        return self._held_size + self._data_size

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        """Decode ``chunk`` and yield the events it completes. Each piece is scanned once
        (a line that comes in many pieces is joined once, at its end)."""
        text = self._text.decode(chunk)
        if self._cr_pending and text:  # (an empty piece, or one inside a character: not yet)
            if text[0] == "\n":
                text = text[1:]  # the LF of a CRLF split across chunks
            self._cr_pending = False
        if self._at < len(self._buffer):  # lines an earlier reader stopped before
            text = self._buffer[self._at :] + text
        self._buffer, self._at = text, 0
        for found in _LINE_END.finditer(text):
            line = text[self._at : found.start()]
            if self._held:
                self._held.append(line)
                line = "".join(self._held)
                self._held, self._held_size = [], 0
            self._at = found.end()
            if self._at == len(text) and text[-1] == "\r":
                self._cr_pending = True  # its LF may be the next piece's first byte
            event = self._take_line(line)
            if event is not None:
                yield event
        if self._at < len(text):
            self._held.append(text[self._at :])
            self._held_size += len(text) - self._at
        self._buffer, self._at = "", 0

    def flush(self) -> ServerSentEvent | None:
        """At the stream's end: the event it ended in without the blank line (its last line
        taken even without a line end), else ``None``. The WHATWG rules drop that event; the
        caller may still read it (a ``[DONE]`` that lost its blank line)."""
        line = "".join(self._held) + self._buffer[self._at :]
        self._held, self._held_size, self._buffer, self._at = [], 0, "", 0
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
            self._data_size += len(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        saw, data, event = self._saw_field, self._data, self._event
        self._data, self._event, self._saw_field, self._data_size = [], "", False, 0
        if not saw or not data:
            return None
        return ServerSentEvent(data="\n".join(data), event=event or "message", id=self._id)
