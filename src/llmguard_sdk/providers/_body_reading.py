"""Reading an HTTP answer's body: bounded by the call's deadline and a size cap.

The sync calls' reads are bounded by the watchdog (:class:`Reading` shuts the socket down at
the deadline), the async calls' by an anyio cancel scope around each read
(:func:`next_before`); :class:`Collector` caps a whole body's size.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anyio
import httpx

from .._http_library import HttpErrors
from ..errors import MalformedResponseError
from ._http_errors import deadline_passed
from ._watchdog import watchdog
from .wire import MAX_BODY_BYTES, MAX_ERROR_BODY_BYTES, StreamState

__all__ = ["Collector", "Reading", "abody", "next_before", "plain_headers", "undecodable"]


async def next_before(
    pieces: AsyncIterator[bytes],
    deadline: float,
    state: StreamState,
    errors: HttpErrors,
    ends: tuple[type[Exception], ...] = (),
) -> bytes | None:
    """The next piece of an async body, or None at its end (or on one of ``ends``); the
    deadline is exact."""
    ended: tuple[type[BaseException], ...] = (StopAsyncIteration, *ends)
    try:
        with anyio.fail_after(max(0.0, deadline - time.monotonic())):
            return await pieces.__anext__()
    except ended:
        return None
    except TimeoutError:
        raise state.timed_out() from None
    except errors.any as exc:
        raise state.broken(exc, timed_out=isinstance(exc, errors.timeout)) from exc


@contextlib.contextmanager
def undecodable(response: Any, decoding: type[Exception]) -> Iterator[None]:
    """An error answer's body that cannot be decoded (a proxy's page labelled gzip, sent
    plain) ends where it fails: its status decides the error. A 200's fails the call."""
    try:
        yield
    except decoding:
        if response.status_code == 200:
            raise


class Collector:
    """Collects a body, enforcing the deadline and a size cap between pieces: a body past
    the cap is an error, or with ``truncate`` (an error answer's: its status decides the
    error, the body only tells more) is cut at the cap."""

    def __init__(self, route: str, deadline: float, limit: int, *, truncate: bool = False) -> None:
        self.route = route
        self.deadline = deadline
        self.limit = limit
        self.truncate = truncate
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self._pieces: list[bytes] = []
        self._size = 0

    @classmethod
    def of(cls, response: Any, route: str, deadline: float) -> Collector:
        """The collector of ``response``'s body: an error answer's cut at its cap; an
        over-size answer's error keeps its status and headers (request id, rate limits)."""
        ok = response.status_code == 200
        limit = MAX_BODY_BYTES if ok else MAX_ERROR_BODY_BYTES
        collector = cls(route, deadline, limit, truncate=not ok)
        collector.status, collector.headers = response.status_code, plain_headers(response.headers)
        return collector

    def add(self, piece: bytes) -> bool:
        """Add ``piece``; True once a truncated body is full (the rest is not wanted)."""
        if self._size + len(piece) > self.limit:
            if not self.truncate:
                raise MalformedResponseError(
                    f"response body is larger than {self.limit} bytes",
                    route=self.route,
                    status_code=self.status,
                    headers=self.headers,
                )
            piece = piece[: max(0, self.limit - self._size)]
        self._pieces.append(piece)
        self._size += len(piece)
        if time.monotonic() > self.deadline:
            raise deadline_passed(self.route)
        return self.truncate and self._size >= self.limit

    @property
    def data(self) -> bytes:
        return b"".join(self._pieces)


def abody(response: Any, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """``response``'s body as it arrives, decoded (one sent as is, with no
    ``content-encoding``, skips httpx's decoder and chunker layers)."""
    plain = headers.get("content-encoding", "identity").strip().lower() in ("identity", "")
    pieces: AsyncIterator[bytes] = response.aiter_raw() if plain else response.aiter_bytes()
    return pieces


async def aclose_pieces(pieces: AsyncIterator[bytes] | None) -> None:
    """Close an async body iterator left unfinished (a stream ended at its last event, a
    read cut off or cancelled), so none is left to the garbage collector (trio warns of
    each with a ResourceWarning)."""
    close = getattr(pieces, "aclose", None)
    if close is not None:
        await close()


def plain_headers(headers: Any) -> dict[str, str]:
    """An httpx ``Headers`` as a plain dict (names lower-cased, repeated ones joined), made
    in one pass: the parsers' lookups then cost a dict's, not a scan of the list each."""
    plain: dict[str, str] = dict(headers.items())
    return plain


class Reading:
    """A response being read: its socket is shut down if it is still being read at
    ``deadline`` (the watchdog's), and the response is closed at the end."""

    __slots__ = ("_response", "_token")

    def __init__(self, response: httpx.Response, deadline: float) -> None:
        self._response = response
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        self._token = watchdog.watch(sock, deadline) if isinstance(sock, socket.socket) else None

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._token is not None:
                watchdog.cancel(self._token)
        finally:
            self._response.close()
