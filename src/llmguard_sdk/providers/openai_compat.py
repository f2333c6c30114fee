"""A provider for any OpenAI-compatible chat-completions endpoint, over httpx or httpx2.

OpenAI itself, Azure OpenAI, OpenRouter, Together, Groq, vLLM, llama.cpp's server, Ollama and
LiteLLM's proxy all speak this protocol. :mod:`~llmguard_sdk.providers.wire` turns bytes into
models and errors; this module does only the I/O, so the sync and async twins behave alike.

Deadlines are exact: async calls run under an anyio cancel scope; sync calls register their
socket with a watchdog thread that shuts it down when the deadline passes, so neither a slow
server nor one that trickles bytes can hold a call past its deadline.

Async calls go through httpx2 where it is installed (openai-python 3.x brings it), else httpx:
the same API, and the same errors under the same names; measured in ``bench/http_clients.py``,
httpx 0.28's connection pool costs CPU per call that grows with its connections (and swings
round to round with how many are idle), httpx2's does not. Sync calls use httpx.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import contextlib
import functools
import socket
import sys
import threading
import time
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import anyio
import httpx

from .._http_library import HttpErrors, Library, library_module, pick_library
from .._keys import check_api_key
from .._loops import PerLoop
from .._whole_counts import count_problem
from ..errors import (
    ConfigurationError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..models import ChatRequest, ChatResponse, StreamChunk
from ..ratelimit._rules import LimitsConfig, normalize
from ._anthropic_only import sent_headers
from ._http11 import DEADLINE
from ._requests import Pool, RequestBuilder, own_transport
from ._watchdog import watchdog
from .base import StreamCall, _check_timing, _Streams
from .wire import (
    ANTHROPIC_ONLY_KEY,
    CHAT_COMPLETIONS,
    MAX_BODY_BYTES,
    MAX_ERROR_BODY_BYTES,
    AnswerShape,
    StreamState,
    build_payload,
    encode_payload,
    named_keys,
)

__all__ = ["OpenAICompatibleProvider"]

_HTTPX_ERRORS = HttpErrors.of(httpx)
_DEFAULT_POOL = 100


class OpenAICompatibleProvider(_Streams):
    """Chat completions against an OpenAI-compatible HTTP API, sync and async.

    Args:
        base_url: the API root including its version path, e.g. ``https://<provider host>/v1``;
            a query string (Azure's ``?api-version=...``) is kept on every request.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        model: the model this route serves; ``None`` uses each request's ``model``.
        name: the route name shown in responses and errors (default: the URL's host:port).
        headers: extra headers sent with every request.
        max_connections: size of each connection pool (kept between calls); ``None``: the
            route's concurrency cap where a Guard's ``rate_limits`` set one
            (``RateLimit(concurrency=...)``, the largest where Guards share this provider),
            else 100.
        context_window: the model's context in tokens (1 to 2**31 - 1), when known: the Guard
            then skips this route for requests that cannot fit (moving to a route with a
            larger context).
        transport, async_transport: httpx transports, for tests or custom networking
            (``async_transport`` may be an httpx2 one: async calls then use httpx2).
        http_library: the async calls' library, ``"httpx2"`` or ``"httpx"``; ``None``: httpx2
            where it is installed, else httpx (or the library of ``async_transport``).

    ``server_address`` / ``server_port``: the host and port of ``base_url`` (its scheme's when
    it names none), telemetry's ``server.address`` / ``server.port``.

    Connections are pooled and reused: one pool for sync calls, and one per event loop for
    async calls. Close them with :meth:`aclose` in async code (or :meth:`close` in sync code),
    or let :class:`~llmguard_sdk.Guard` do it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_connections: int | None = None,
        context_window: int | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: Any = None,
        http_library: Library | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme not in ("http", "https") or not (host := parts.hostname) or not port_ok:
            raise ConfigurationError(
                f"base_url must be an http(s) URL such as https://<provider host>/v1, "
                f"got {base_url!r}"
            )
        _check_count("max_connections", max_connections)  # ("5" raised TypeError)
        window_problem = None if context_window is None else count_problem(context_window)
        if window_problem is not None:  # ("5" was never used; 10**30 was kept)
            raise ConfigurationError(f"context_window {window_problem}")
        self._headers = {"accept": "application/json", **dict(headers or {})}
        check_api_key(api_key)  # masked in every error message and telemetry export
        if api_key is not None:
            self._headers["authorization"] = f"Bearer {api_key}"
        for key, value in self._headers.items():
            if not _header_safe(key) or not _header_safe(value):
                raise ConfigurationError(f"header {key!r} must be ASCII without line breaks")
        query = f"?{parts.query}" if parts.query else ""  # e.g. Azure's ?api-version=...
        self.base_url = base_url.removesuffix(query).rstrip("/")
        self.model = model
        self.context_window = context_window
        self.name = name or parts.netloc.rpartition("@")[2]  # never a user:password@
        self.server_address = host  # (telemetry's server.address and .port)
        self.server_port = parts.port or (443 if parts.scheme == "https" else 80)
        self._url = self.base_url + "/chat/completions" + query
        self._max_connections = max_connections
        self._route_cap: int | None = None
        self._transport = transport
        self._async_transport = async_transport
        self._async_library = _async_library(http_library, async_transport)
        self._lock = threading.Lock()
        self._pool: Pool | None = None  # the sync client and its transport
        self._apools = PerLoop(self._new_async_pool)
        self._builders: dict[str, RequestBuilder] = {}  # per library: its clients' headers

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(name={self.name!r}, base_url={_shown(self.base_url)!r})"

    # -- clients -------------------------------------------------------------------------

    @property
    def pool_size(self) -> int:
        """Connections each pool keeps: ``max_connections``, else the route's concurrency cap,
        else 100."""
        return self._max_connections or self._route_cap or _DEFAULT_POOL

    def _cap_pool(self, concurrency: int) -> None:
        """A Guard's concurrency cap for this route: pools opened from now on are sized to
        it (the largest cap told, where Guards share this provider)."""
        self._route_cap = max(self._route_cap or 0, concurrency)

    def _limits(self, module: Any) -> Any:
        size = self.pool_size
        return module.Limits(max_connections=size, max_keepalive_connections=size)

    def _sync_pool(self) -> Pool:
        """The sync client (made on first use) and the transport its requests go to."""
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    limits = self._limits(httpx)
                    transport = self._transport or own_transport(
                        httpx, limits, asynchronous=False, url=self.base_url
                    )
                    client = httpx.Client(headers=self._headers, limits=limits, transport=transport)
                    self._pool = Pool(httpx, client, transport)
                pool = self._pool
        return pool

    def _async_pool(self) -> Pool:
        """This event loop's ``AsyncClient`` (httpx2's or httpx's) and its transport."""
        return self._apools.get()

    def _new_async_pool(self) -> Pool:
        module = library_module(self._async_library)
        limits = self._limits(module)
        transport = self._async_transport or own_transport(
            module, limits, asynchronous=True, url=self.base_url
        )
        client = module.AsyncClient(headers=self._headers, limits=limits, transport=transport)
        return Pool(module, client, transport)

    def close(self) -> None:
        """Close the sync connection pool.

        Async pools cannot be closed from sync code: a warning says so when one is still
        open on a running event loop (use :meth:`aclose` there).
        """
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.client.close()
        if self._apools.open_elsewhere():
            warnings.warn(
                f"{self!r}: async connections are still open; call `await aclose()` "
                "from their event loop",
                ResourceWarning,
                stacklevel=2,
            )

    async def aclose(self) -> None:
        """Close this event loop's async pool and the sync pool."""
        apool = self._apools.pop_current()
        with self._lock:
            pool, self._pool = self._pool, None
        if apool is not None:
            await apool.client.aclose()
        if pool is not None:
            pool.client.close()

    # -- the wire format (a subclass may speak another one) -----------------------------------

    _answers: ClassVar[AnswerShape] = CHAT_COMPLETIONS

    def _payload(self, request: ChatRequest, model: str, *, stream: bool) -> dict[str, Any]:
        """The JSON body of a call."""
        return build_payload(request, model=model, stream=stream)

    def _extra_headers(self, request: ChatRequest) -> dict[str, str] | None:
        """The request's headers this route sends (not Claude's where named Anthropic's)."""
        return sent_headers(request.extra_headers, named_keys(request, ANTHROPIC_ONLY_KEY))

    def _parse(self, status: int, headers: Mapping[str, str], body: bytes) -> ChatResponse:
        """A non-streaming answer as a response, or its typed error."""
        return self._answers.parse(status, headers, body, route=self.name)

    # -- calls -------------------------------------------------------------------------------

    def _build(
        self,
        client: Any,
        request: ChatRequest,
        model: str,
        *,
        stream: bool,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> Any:
        """The call's HTTP request for ``client``: the encoded body, per-request headers,
        deadline timeouts. The async calls put every wait of the exchange (the send, each
        read) under a cancel scope at the deadline, so an async request's reads and writes
        get no timeouts of their own where that scope ends them first anyway (a timer per
        read or write: a fifth of an async call's CPU at 500 calls in flight)."""
        library = "httpx" if isinstance(client, httpx.Client) else self._async_library
        builder = self._builders.get(library)
        if builder is None:
            builder = self._builders[library] = RequestBuilder(
                library_module(library), client, self._url
            )
        built = builder.build(
            client,
            encode_payload(self._payload(request, model, stream=stream)),
            timeout=_timeout_until(deadline, self.name, idle_timeout),
            headers=self._extra_headers(request),
            params=request.extra_query,
        )
        if isinstance(client, httpx.Client):  # the watchdog bounds the send and head too
            built.extensions[DEADLINE] = deadline
        elif idle_timeout is None and deadline - time.monotonic() <= _LONGEST_WAIT:
            unbounded = {"read": None, "write": None}
            built.extensions["timeout"] = {**built.extensions["timeout"], **unbounded}
        return built

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Send one non-streaming chat completion and parse its answer."""
        pool = self._sync_pool()
        built = self._build(pool.client, request, model, stream=False, deadline=deadline)
        try:
            response = pool.send(built)
            with _Reading(response, deadline):
                collected = _Collector.of(response, self.name, deadline)
                with _undecodable(response, httpx.DecodingError):
                    for piece in response.iter_bytes():
                        if collected.add(piece):
                            break
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.name, deadline) from exc
        return self._parse(response.status_code, collected.headers, collected.data)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete`."""
        pool = self._async_pool()
        built = self._build(pool.client, request, model, stream=False, deadline=deadline)
        errors = _errors(self._async_library)
        try:
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                response = await pool.asend(built)
                try:
                    collected = _Collector.of(response, self.name, deadline)
                    with _undecodable(response, errors.decoding):
                        async for piece in _abody(response, collected.headers):
                            if collected.add(piece):
                                break
                finally:
                    await response.aclose()
        except TimeoutError:
            raise _deadline_passed(self.name) from None
        except errors.any as exc:
            raise _transport_error(exc, self.name, deadline, errors) from exc
        return self._parse(response.status_code, collected.headers, collected.data)

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        """Stream a chat completion (server-sent events), asking for usage in the last chunk."""
        deadline = call.deadline
        pool = self._sync_pool()
        built = self._build(
            pool.client, call.request, call.model, stream=True, deadline=deadline,
            idle_timeout=call.idle_timeout,
        )  # fmt: skip
        state = self._answers.stream_state(self.name, deadline)
        try:
            response = pool.send(built)
            with _Reading(response, deadline):
                if not state.accept(response.status_code, _plain(response.headers)):
                    error = _Collector.of(response, self.name, deadline)
                    with _undecodable(response, httpx.DecodingError):
                        for piece in response.iter_bytes():
                            if error.add(piece):
                                break
                    raise state.http_error(error.data)
                for raw in response.iter_bytes():
                    yield from state.feed(raw)
                    if state.done:
                        return
        except httpx.HTTPError as exc:
            if not state.status:  # no answer yet: the request may never have left
                raise _transport_error(exc, self.name, deadline) from exc
            raise state.broken(exc, timed_out=isinstance(exc, httpx.TimeoutException)) from exc
        state.check_ended()

    async def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`_stream` (each read of the body under a cancel scope at the
        deadline: without an idle timeout, the reads start no timers of their own)."""
        deadline = call.deadline
        pool = self._async_pool()
        built = self._build(
            pool.client, call.request, call.model, stream=True, deadline=deadline,
            idle_timeout=call.idle_timeout,
        )  # fmt: skip
        state = self._answers.stream_state(self.name, deadline)
        errors = _errors(self._async_library)
        try:
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                response = await pool.asend(built)
        except TimeoutError:
            raise _deadline_passed(self.name) from None
        except errors.any as exc:
            raise _transport_error(exc, self.name, deadline, errors) from exc
        try:
            pieces = response.aiter_bytes()
            if not state.accept(response.status_code, _plain(response.headers)):
                error = _Collector.of(response, self.name, deadline)
                ends = (errors.decoding,)  # an undecodable error body: its status decides
                while (
                    piece := await _next_before(pieces, deadline, state, errors, ends)
                ) is not None:
                    if error.add(piece):
                        break
                raise state.http_error(error.data)
            while (raw := await _next_before(pieces, deadline, state, errors)) is not None:
                for chunk in state.feed(raw):
                    yield chunk
                if state.done:
                    return
            state.check_ended()
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


def _shown(url: str) -> str:
    """``url`` without its password (``user:***@``), as a repr shows it."""
    from .._state.stores import _redacted

    return _redacted(url)


def _check_count(option: str, value: object, *, optional: bool = True) -> None:
    """A whole number of at least 1 (or None when ``optional``): a string or a bool is
    refused, not read."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        either = " or None" if optional else ""
        raise ConfigurationError(f"{option} must be a whole number >= 1{either}, got {value!r:.40}")


def _cap_pools(routes: Sequence[object], limits: LimitsConfig | None) -> LimitsConfig | None:
    """Size each HTTP route's pools to the route's concurrency cap in ``limits`` (a Guard's
    ``rate_limits``): more connections than calls allowed in flight would only sit idle.
    Gives ``limits`` back unchanged (the Guard builds its rate limiter from them)."""
    rules = normalize(limits) if limits is not None else {}
    for route in routes:
        if isinstance(route, OpenAICompatibleProvider):
            found = rules.get(route.name, ())
            caps = [r.concurrency for r in found if r.concurrency and not r.per_tenant]
            if caps:
                route._cap_pool(min(caps))
    return limits


# -- helpers -------------------------------------------------------------------------------


async def _next_before(
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
def _undecodable(response: Any, decoding: type[Exception]) -> Iterator[None]:
    """An error answer's body that cannot be decoded (a proxy's page labelled gzip, sent
    plain) ends where it fails: its status decides the error. A 200's fails the call."""
    try:
        yield
    except decoding:
        if response.status_code == 200:
            raise


class _Collector:
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
    def of(cls, response: Any, route: str, deadline: float) -> _Collector:
        """The collector of ``response``'s body: an error answer's cut at its cap; an
        over-size answer's error keeps its status and headers (request id, rate limits)."""
        ok = response.status_code == 200
        limit = MAX_BODY_BYTES if ok else MAX_ERROR_BODY_BYTES
        collector = cls(route, deadline, limit, truncate=not ok)
        collector.status, collector.headers = response.status_code, _plain(response.headers)
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
            raise _deadline_passed(self.route)
        return self.truncate and self._size >= self.limit

    @property
    def data(self) -> bytes:
        return b"".join(self._pieces)


def _async_library(library: Library | None, transport: object) -> Library:
    """The async calls' library: ``async_transport``'s where one is given, else ``library``
    (``None``: httpx2 where installed)."""
    if transport is None or isinstance(transport, httpx.AsyncBaseTransport):
        chosen = pick_library(library) if transport is None else "httpx"
    else:
        httpx2 = sys.modules.get("httpx2")
        base = getattr(httpx2, "AsyncBaseTransport", ())
        chosen = "httpx2" if isinstance(transport, base) else pick_library(library)
    if library is not None and library != chosen:
        raise ConfigurationError(f"http_library={library!r} but async_transport is {chosen}'s")
    return chosen


@functools.cache
def _errors(library: Library) -> HttpErrors:
    return HttpErrors.of(library_module(library))


def _abody(response: Any, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """``response``'s body as it arrives, decoded (one sent as is, with no
    ``content-encoding``, skips httpx's decoder and chunker layers)."""
    plain = headers.get("content-encoding", "identity").strip().lower() in ("identity", "")
    pieces: AsyncIterator[bytes] = response.aiter_raw() if plain else response.aiter_bytes()
    return pieces


def _plain(headers: Any) -> dict[str, str]:
    """An httpx ``Headers`` as a plain dict (names lower-cased, repeated ones joined), made
    in one pass: the parsers' lookups then cost a dict's, not a scan of the list each."""
    plain: dict[str, str] = dict(headers.items())
    return plain


class _Reading:
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


_LONGEST_WAIT = 24 * 3600.0
"""The longest single wait (connect, a read, ...) of a call with no deadline (``math.inf``): a
socket's timeout cannot be infinite (OverflowError), and a day of silence is an answer."""


def _timeout_until(deadline: float, route: str, idle: float | None = None) -> float:
    """The request's timeout (every one of httpx's: connect, read, write, pool): no single
    wait may outlast the deadline (or ``idle``). A deadline of ``math.inf`` is none; NaN, or
    what is not a number, is a :class:`~llmguard_sdk.errors.RequestValidationError`."""
    _check_timing(deadline, idle)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProviderTimeoutError(
            "the call's deadline passed before the request", route=route, request_sent=False
        )
    return min(remaining, _LONGEST_WAIT if idle is None else idle, _LONGEST_WAIT)


def _deadline_passed(route: str) -> ProviderTimeoutError:
    return ProviderTimeoutError(
        "the call's deadline passed while waiting for the answer", route=route
    )


def _transport_error(
    exc: Exception, route: str, deadline: float, errors: HttpErrors = _HTTPX_ERRORS
) -> ProviderError:
    sent = not isinstance(exc, errors.not_sent)  # not sent: safe to send again
    if time.monotonic() >= deadline:
        error = _deadline_passed(route)
        error.request_sent = sent
        return error
    if isinstance(exc, errors.timeout):
        return ProviderTimeoutError(f"no answer in time: {exc!r}", route=route, request_sent=sent)
    if isinstance(exc, errors.decoding):
        return MalformedResponseError(f"undecodable response: {exc!r}", route=route)
    return ProviderUnavailableError(f"connection failed: {exc!r}", route=route, request_sent=sent)


def _header_safe(text: str) -> bool:
    return text.isascii() and "\r" not in text and "\n" not in text
