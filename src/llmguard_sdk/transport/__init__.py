"""The transport seam: hand a Guard to any SDK or framework that builds its own client.

``OpenAI(http_client=guard.http_client())`` (or ``http_client(guard)``) sends every request the
SDK makes through the Guard, in process, without a socket: the request is parsed into a
:meth:`~llmguard_sdk.Guard.chat` call (so the routes may be any provider, the local model
included), and the Guard's answer goes back in the shape the SDK expects, JSON or server-sent
events, headers included. Served paths: ``POST .../chat/completions``, ``POST .../responses``
(OpenAI), ``POST .../messages`` (Anthropic), plain and streamed, ``POST
.../messages/count_tokens`` (the Guard's own count, as the route the call would take counts,
without a provider call: ``{"input_tokens": N}``, with ``x-llmguard-estimated: true`` where it
is an estimate, as for Claude's models, whose tokenizer is not public), and ``GET .../models``
and ``GET .../models/{id}`` (the routes' models, in Anthropic's shape for anthropic's SDK). Any
other path or method is answered 404 in the SDK's error shape (the SDK raises its
``NotFoundError``), as is a model no route serves (code ``model_not_found``).

openai-python 3.x and anthropic's SDK build on httpx2 (they still accept httpx clients); the
seam offers both: ``library="httpx2"`` or ``"httpx"``; by default httpx2 when it is installed.

**One retry loop, the Guard's.** Error answers carry ``x-should-retry: false``, which
openai-python and anthropic's SDK obey, so their own retries (``max_retries``, 2 by default)
never repeat a call the Guard has already retried and moved through its fallback chain;
``max_retries=0`` on the SDK says the same explicitly. An error answer carries the Guard's
error class in ``x-llmguard-error``; the SDK raises its own error for the status (400 invalid
request, 404 not served, 401, 429 rate limited or budget exhausted, 502 malformed answer, 503
unavailable or circuit open, 504 timeout; a provider's own 4xx or 5xx status where it gave one,
the last route's when every route failed). An input too large, for a route's context window
or for the Guard's ``max_input_tokens``, is an overflow as the SDKs and frameworks know one:
400 with OpenAI's code ``context_length_exceeded`` and wording, or, through the Messages API,
Anthropic's ``invalid_request_error`` whose message begins ``prompt is too long`` (``prompt is
too long: N tokens > M maximum`` where the refusal gives the numbers: ``max_input_tokens``, a
window the Guard knows, a provider's own words such as OpenAI's and vLLM's).

The Guard's ``timeout`` bounds each call. The SDK's timeout (its read timeout) means what it
means to httpx, the longest wait for the next byte: a plain answer's bytes all come when the
Guard's call ends, so there, when shorter, it becomes the call's total; a stream's come chunk by
chunk, so there it bounds silence, not the stream: when shorter than the Guard's
``attempt_timeout`` it takes its place for the call (a route silent that long before its first
chunk, or between two, loses the call to the next; once text has reached the SDK, the stream
breaks there), and a stream that keeps sending runs to its end, up to the Guard's ``timeout``. A
``timeout`` in the request body (``extra_body={"timeout": ...}``) is ignored: it neither sets
the call's deadline nor goes to the provider. The scope of a call comes from
:func:`~llmguard_sdk.scoped`, or from ``x-llmguard-tenant`` / ``x-llmguard-feature`` headers;
its cache controls from ``x-llmguard-cache`` (``no-cache``: ``cache_refresh=True``,
``no-store``: ``cacheable=False``), ``x-llmguard-cache-ttl``, ``x-llmguard-cache-max-age``
(seconds) and ``x-llmguard-cache-tags`` (comma-separated), a bad value answered 400. No
``x-llmguard-*`` header reaches the provider; any other header or query parameter the caller
adds is forwarded to the provider.

Successful answers carry ``x-llmguard-route`` (which route served, ``cache`` for a cache hit),
plain ones ``x-llmguard-attempts`` too (a stream's headers leave before its attempts are known).
A stream's answer starts when its first content (text, a tool call) is ready, as the Guard
moves a stream to its next route only before any: its headers (the route, the provider's
request id and rate-limit headers) and the model its events report are those of the route
that answers, also when a route opened its stream and failed before any content; a failure
before any content is an error answer with its status, not a 200 whose last event is an
error. A stream the Guard continues on the next route after a break, with
``continue_interrupted_streams``, keeps the headers of the route that began it: they left
with its first content, before the break, and HTTP has no way to change them after. The
route that finished it is named where the wire names a model after the break: each chat
chunk's ``model`` and the completed Responses response's ``model`` are the finishing
route's; Anthropic's stream names its model once, in ``message_start``, the first route's.
(The Guard's own stream says it all: ``stream.response.route`` and
``metadata["continued_after"]``.)

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

import httpx

from .._http_library import Library, library_module, pick_library

if TYPE_CHECKING:
    import httpx2

    from ..guard import Guard

__all__ = ["Library", "async_http_client", "async_transport", "http_client", "transport"]

_BASE_URL = "http://llmguard.invalid"
_library = pick_library


@overload
def transport(guard: Guard, *, library: Literal["httpx"]) -> httpx.BaseTransport: ...
@overload
def transport(guard: Guard, *, library: Literal["httpx2"]) -> httpx2.BaseTransport: ...
@overload
def transport(guard: Guard, *, library: None = None) -> Any: ...
def transport(guard: Guard, *, library: Library | None = None) -> Any:
    """A blocking transport that answers through ``guard`` (``httpx.Client(transport=...)``).

    .. versionadded:: 0.2.0
    """
    if _library(library) == "httpx":
        from ._adapters import HttpxTransport

        return HttpxTransport(guard)
    from ._httpx2 import Httpx2Transport

    return Httpx2Transport(guard)


@overload
def async_transport(guard: Guard, *, library: Literal["httpx"]) -> httpx.AsyncBaseTransport: ...
@overload
def async_transport(guard: Guard, *, library: Literal["httpx2"]) -> httpx2.AsyncBaseTransport: ...
@overload
def async_transport(guard: Guard, *, library: None = None) -> Any: ...
def async_transport(guard: Guard, *, library: Library | None = None) -> Any:
    """The async twin of :func:`transport`.

    .. versionadded:: 0.2.0
    """
    if _library(library) == "httpx":
        from ._adapters import HttpxAsyncTransport

        return HttpxAsyncTransport(guard)
    from ._httpx2 import Httpx2AsyncTransport

    return Httpx2AsyncTransport(guard)


@overload
def http_client(guard: Guard, *, library: Literal["httpx"]) -> httpx.Client: ...
@overload
def http_client(guard: Guard, *, library: Literal["httpx2"]) -> httpx2.Client: ...
@overload
def http_client(guard: Guard, *, library: None = None) -> Any: ...
def http_client(guard: Guard, *, library: Library | None = None) -> Any:
    """An HTTP client for ``OpenAI(http_client=...)`` / ``Anthropic(http_client=...)`` whose
    requests are answered by ``guard`` (see the module's notes).

    .. versionadded:: 0.2.0
    """
    return _client(guard, library, asynchronous=False)


@overload
def async_http_client(guard: Guard, *, library: Literal["httpx"]) -> httpx.AsyncClient: ...
@overload
def async_http_client(guard: Guard, *, library: Literal["httpx2"]) -> httpx2.AsyncClient: ...
@overload
def async_http_client(guard: Guard, *, library: None = None) -> Any: ...
def async_http_client(guard: Guard, *, library: Library | None = None) -> Any:
    """The async twin of :func:`http_client` (``AsyncOpenAI(http_client=...)``).

    .. versionadded:: 0.2.0
    """
    return _client(guard, library, asynchronous=True)


def _client(
    guard: Guard,
    library: Library | None,
    *,
    asynchronous: bool,
    raise_errors: bool = False,
    base_url: str = _BASE_URL,
    stream_error: Any = None,
) -> Any:
    """The client of ``library`` over the Guard's transport; ``raise_errors``: the Guard's
    errors propagate instead of becoming error answers; ``stream_error(error, request)``: the
    exception a stream that fails after it began raises, in place of the error event (the
    SDK clients of :mod:`llmguard_sdk.client`)."""
    chosen = _library(library)
    if chosen == "httpx":
        from . import _adapters as adapters

        module: Any = httpx
        kinds: Any = (adapters.HttpxTransport, adapters.HttpxAsyncTransport)
    else:
        from . import _httpx2

        module = library_module("httpx2")
        kinds = (_httpx2.Httpx2Transport, _httpx2.Httpx2AsyncTransport)
    seam = kinds[asynchronous](guard, raise_errors=raise_errors, stream_error=stream_error)
    cls = module.AsyncClient if asynchronous else module.Client
    return cls(transport=seam, base_url=base_url)
