"""The transports themselves: thin httpx and httpx2 shells around :mod:`._exchange`.

httpx2 has httpx's transport API under another name; each library checks that a response's
body stream is one of its own classes, so each gets its own small body class and the shared
logic lives in the mixins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from . import _exchange
from ._wire import Answer, Incoming

if TYPE_CHECKING:
    from ..guard import Guard


def incoming(request: Any, body: bytes) -> Incoming:
    """An httpx or httpx2 request as the library-neutral :class:`Incoming`."""
    url = request.url
    timeouts = request.extensions.get("timeout")
    read = timeouts.get("read") if isinstance(timeouts, dict) else None
    return Incoming(
        method=request.method,
        path=url.path,
        query=list(url.params.multi_items()),
        headers={name.lower(): value for name, value in request.headers.items()},
        body=body,
        timeout=float(read) if isinstance(read, (int, float)) and read > 0 else None,
    )


class _Side:
    """What the sync and async transports of both libraries share."""

    _library: Any  # the httpx or httpx2 module
    _body: Any  # its byte-stream class for SSE bodies

    def __init__(self, guard: Guard, *, raise_errors: bool = False) -> None:
        self._guard = guard
        self._raise_errors = raise_errors

    def _response(self, answer: Answer, request: Any) -> Any:
        extensions = {"llmguard": answer.response, "llmguard_error": answer.error}
        # as bytes: str header values must be ASCII there (a provider's, a route's name)
        headers = [(name.encode(), value.encode()) for name, value in answer.headers]
        if answer.events is None:
            return self._library.Response(
                answer.status,
                headers=headers,
                content=answer.body,
                request=request,
                extensions=extensions,
            )
        body = self._body(answer.events, answer.close)
        return self._library.Response(
            answer.status,
            headers=headers,
            stream=body,
            request=request,
            extensions=extensions,
        )

    def _handle(self, request: Any) -> Any:
        answer = _exchange.handle(
            self._guard, incoming(request, request.read()), raise_errors=self._raise_errors
        )
        return self._response(answer, request)

    async def _ahandle(self, request: Any) -> Any:
        answer = await _exchange.ahandle(
            self._guard, incoming(request, await request.aread()), raise_errors=self._raise_errors
        )
        return self._response(answer, request)


class _Events:
    """A response body of SSE byte strings; closing it closes the Guard's stream (also
    when the body was never read)."""

    def __init__(self, events: Any, close: Any) -> None:
        self._events = events
        self._close = close

    def __iter__(self) -> Iterator[bytes]:
        yield from self._events

    def close(self) -> None:
        self._events.close()
        self._close()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for event in self._events:
            yield event

    async def aclose(self) -> None:
        await self._events.aclose()
        await self._close()


class _HttpxBody(_Events, httpx.SyncByteStream, httpx.AsyncByteStream):
    pass


class _SyncSide(_Side):
    def handle_request(self, request: Any) -> Any:
        """Answer one request through the Guard."""
        return self._handle(request)


class _AsyncSide(_Side):
    async def handle_async_request(self, request: Any) -> Any:
        """Answer one request through the Guard."""
        return await self._ahandle(request)


class HttpxTransport(_SyncSide, httpx.BaseTransport):
    """An ``httpx.BaseTransport`` that answers through a Guard."""

    _library, _body = httpx, _HttpxBody


class HttpxAsyncTransport(_AsyncSide, httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` that answers through a Guard."""

    _library, _body = httpx, _HttpxBody
