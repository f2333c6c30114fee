"""The transports themselves: thin httpx and httpx2 shells around :mod:`._exchange`.

httpx2 has httpx's transport API under another name; each library checks that a response's
body stream is one of its own classes, so each gets its own small body class and the shared
logic lives in the mixins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from ..errors import LLMGuardError
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

    def __init__(
        self,
        guard: Guard,
        *,
        raise_errors: bool = False,
        stream_error: Callable[[LLMGuardError, Any], BaseException] | None = None,
    ) -> None:
        self._guard = guard
        self._raise_errors = raise_errors
        # a stream that fails after it began raises stream_error(error, request) instead of
        # sending the error event (the SDK clients: the Guard's error, as the SDK's too)
        self._stream_error = stream_error
        self._raise_in_stream = raise_errors or stream_error is not None

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
        body = self._body(answer.events, answer.close, self._stream_error, request)
        return self._library.Response(
            answer.status,
            headers=headers,
            stream=body,
            request=request,
            extensions=extensions,
        )

    def _handle(self, request: Any) -> Any:
        answer = _exchange.handle(
            self._guard,
            incoming(request, request.read()),
            raise_errors=self._raise_errors,
            raise_in_stream=self._raise_in_stream,
        )
        return self._response(answer, request)

    async def _ahandle(self, request: Any) -> Any:
        answer = await _exchange.ahandle(
            self._guard,
            incoming(request, await request.aread()),
            raise_errors=self._raise_errors,
            raise_in_stream=self._raise_in_stream,
        )
        return self._response(answer, request)


class _Events:
    """A response body of SSE byte strings; closing it closes the Guard's stream (also
    when the body was never read). With ``failed``, a Guard error the stream raises becomes
    ``failed(error, request)``."""

    def __init__(
        self,
        events: Any,
        close: Any,
        failed: Callable[[LLMGuardError, Any], BaseException] | None = None,
        request: Any = None,
    ) -> None:
        self._events = events
        self._close = close
        self._failed = failed
        self._request = request

    def _raised(self, exc: LLMGuardError) -> BaseException:
        return exc if self._failed is None else self._failed(exc, self._request)

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._events
        except LLMGuardError as exc:
            raised = self._raised(exc)
        else:
            return
        raise raised  # outside the except: its own chaining, not "during handling of"

    def close(self) -> None:
        self._events.close()
        self._close()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for event in self._events:
                yield event
        except LLMGuardError as exc:
            raised = self._raised(exc)
        else:
            return
        raise raised

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
