"""A streamed answer's head: its chunks up to the first that delivers content, read before
the answer's headers go out, so that they name the route that answers.

The Guard moves a stream to its next route only until content has reached the caller (see
:mod:`llmguard_sdk._core.streams`): a route's opening chunk (role only) can come, then the
route fail and another answer. Once a chunk delivers text, a tool call or what the caller
sees besides (a refusal's piece, a thinking block), the route is the answer's. So the seam
reads that far (or to the stream's end) before it answers: the headers, ``x-llmguard-route``
and the provider's request id and rate-limit headers, are the answering route's; a failure
before it is an error answer with its own status, as a provider's would be; and an opening
chunk of a route that then failed goes out as the answering route's (its model and id,
without the failed call's metadata), as the provider that answers would have sent its own.
"""

from __future__ import annotations

from .._core.assembly import shows
from ..models import StreamChunk
from . import _wire

__all__ = ["Head"]


def _delivers(chunk: StreamChunk) -> bool:
    return bool(chunk.text or chunk.tool_calls or shows(chunk))


class Head:
    """The chunks read so far, before the answer's headers; :meth:`add` says when to stop."""

    def __init__(self) -> None:
        self.chunks: list[StreamChunk] = []

    def add(self, chunk: StreamChunk | None) -> bool:
        """Take the stream's next chunk (``None``: it ended); whether to read another."""
        if chunk is None:
            return False
        self.chunks.append(chunk)
        return not _delivers(chunk)

    def headers(self) -> list[tuple[str, str]]:
        """The streamed answer's headers, the answering route's (the last chunk's)."""
        if not self.chunks:
            return _wire.stream_headers(None)
        last = self.chunks[-1]
        own: dict[str, str] = {}
        for chunk in self.chunks:
            if chunk.route == last.route:
                own.update(chunk.headers)
        return _wire.stream_headers(last.model_copy(update={"headers": own}))

    def replayed(self) -> list[StreamChunk]:
        """The chunks to send, those of a route that failed before any content as the
        answering route's (its model, id and name), without what they said of the failed
        route's own call (its metadata: a Responses route's ``store``, a reasoning item it
        opened and never finished)."""
        if not self.chunks:
            return []
        last = self.chunks[-1]
        mine: dict[str, object] = {
            "route": last.route,
            "model": last.model,
            "id": last.id,
            "headers": {},
            "metadata": {},
        }
        return [c if c.route == last.route else c.model_copy(update=mine) for c in self.chunks]
