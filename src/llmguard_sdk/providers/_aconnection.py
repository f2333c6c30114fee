"""One connection of the provider's async HTTP/1.1 transport (:mod:`._ahttp11`): an anyio
byte stream, the bytes read from it that nobody took yet, and whether it may be used again
once idle."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import anyio
import anyio.abc

from ._http1 import readable

__all__ = ["STREAM_ERRORS", "Connection", "stop_reading"]

STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
"""What a broken or closed stream raises (besides anyio's ``EndOfStream``)."""
_CHUNK = 65_536
_UNKNOWN = object()


class Connection:
    """An anyio byte stream and the bytes read from it that nobody took yet."""

    __slots__ = ("_socket", "buffer", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self._socket: Any = _UNKNOWN  # the raw socket, looked up once (see reusable)

    async def fill(self, timeout: float | None, module: ModuleType) -> bool:
        """Read what the server sent next into the buffer (``False``: it closed)."""
        try:
            if timeout is None:
                data = await self.stream.receive(_CHUNK)
            else:
                with anyio.fail_after(timeout):
                    data = await self.stream.receive(_CHUNK)
        except anyio.EndOfStream:
            return False
        except TimeoutError as exc:
            raise module.ReadTimeout(str(exc) or "read timed out") from exc
        except STREAM_ERRORS as exc:
            raise module.ReadError(str(exc) or type(exc).__name__) from exc
        self.buffer += data
        return True

    def take(self, size: int) -> bytes:
        """The buffer's first ``size`` bytes (fewer where it holds fewer), taken out."""
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def reusable(self) -> bool:
        """Whether an idle connection is still open and clean: one that holds bytes nobody
        asked for (its own buffer's, or read ahead by anyio), or whose socket is readable
        while idle, has been closed by the server or sent something unasked; either way it
        is not reused."""
        if self.buffer or _read_ahead(self.stream):
            return False
        if self._socket is _UNKNOWN:  # (anyio builds a dict of every attribute per lookup)
            try:
                self._socket = self.stream.extra(anyio.abc.SocketAttribute.raw_socket)
            except anyio.TypedAttributeLookupError:
                self._socket = None
        try:
            return self._socket is not None and not readable(self._socket.fileno())
        except (OSError, ValueError):
            return False

    def read_while_sending(self) -> Any:
        """Turn asyncio's reading of the socket on (anyio keeps it off but while a receive
        waits) until :func:`stop_reading` is given what this answers: an answer the server
        sends before it has read the request (a 413 for a body too large) is read as it
        comes. Off, it stayed in the socket, which asyncio closed when the server's close
        failed the send: the answer was lost. ``None``: no asyncio transport (trio reads
        the socket only as asked; the answer waits there)."""
        stream: Any = self.stream
        while stream is not None:
            transport = getattr(stream, "_transport", None)
            if transport is not None and hasattr(transport, "resume_reading"):
                if transport.is_closing() or transport.is_reading():
                    return None
                transport.resume_reading()
                return transport
            stream = getattr(stream, "transport_stream", None)
        return None

    async def close(self) -> None:
        """Close the stream at once (no TLS goodbye waited for)."""
        await anyio.aclose_forcefully(self.stream)


def stop_reading(transport: Any) -> None:
    """Turn off again the reading :meth:`Connection.read_while_sending` turned on."""
    if transport is not None and not transport.is_closing():
        transport.pause_reading()


def _read_ahead(stream: Any) -> bool:
    """Whether anyio holds bytes of ``stream`` (or its end) that were read from the socket
    but not yet received, which a poll of the socket cannot see: asyncio's protocol reads
    up to 256 KiB whenever reading is on (a receive takes 64 KiB at most, the rest waits in
    its queue), and a TLS stream keeps records read but not yet decrypted, and decrypted
    bytes not yet taken. (trio reads the socket only as asked: nothing waits there.)"""
    while stream is not None:
        ssl_object = getattr(stream, "_ssl_object", None)
        read_bio = getattr(stream, "_read_bio", None)
        if (ssl_object is not None and ssl_object.pending()) or (
            read_bio is not None and read_bio.pending
        ):
            return True
        protocol = getattr(stream, "_protocol", None)
        if protocol is not None:
            event = getattr(protocol, "read_event", None)  # set: bytes, an end or an error
            if getattr(protocol, "read_queue", None) or (event is not None and event.is_set()):
                return True
        stream = getattr(stream, "transport_stream", None)
    return False
