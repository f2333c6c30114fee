"""A provider for any OpenAI-compatible chat-completions endpoint, over httpx or httpx2.

OpenAI itself, Azure OpenAI, OpenRouter, Together, Groq, vLLM, llama.cpp's server, Ollama and
LiteLLM's proxy all speak this protocol. :mod:`~llmguard_sdk.providers.wire` turns bytes into
models and errors; this module does only the I/O, so the sync and async twins behave alike
(reading a body under the deadline is :mod:`._body_reading`'s, the deadline's timeouts and
the transport's errors :mod:`._http_errors`', the options' checks :mod:`._route_options`').

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

import threading
import time
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import anyio
import httpx

from .._http_library import Library, library_module
from .._keys import check_api_key
from .._loops import PerLoop, off_its_loop
from .._whole_counts import count_problem
from ..errors import ConfigurationError
from ..models import ChatRequest, ChatResponse, StreamChunk
from ..ratelimit._rules import LimitsConfig, normalize
from ._anthropic_only import sent_headers
from ._body_reading import (
    Collector,
    Reading,
    abody,
    aclose_pieces,
    next_before,
    plain_headers,
    undecodable,
)
from ._http11 import DEADLINE
from ._http_errors import (
    LONGEST_WAIT,
    deadline_passed,
    library_errors,
    timeout_until,
    transport_error,
)
from ._requests import Pool, RequestBuilder, own_transport
from ._route_options import (
    async_library,
    check_count,
    header_safe,
    server_of,
    shown,
    takes_cache_key,
)
from .base import StreamCall, _Streams
from .wire import (
    ANTHROPIC_ONLY_KEY,
    CHAT_COMPLETIONS,
    AnswerShape,
    build_payload,
    encode_payload,
    named_keys,
)

__all__ = ["OpenAICompatibleProvider"]

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
            ``async_transport`` is shared by every event loop's pool, and yours to close: a
            keep-alive ``httpx.AsyncHTTPTransport()`` fails on a second ``asyncio.run()``
            with a :class:`~llmguard_sdk.errors.ConfigurationError` (its kept connections
            belong to the first loop: ``RuntimeError: Event loop is closed``, its cause).
            Give each loop its own (an ``AsyncBaseTransport`` that sends through
            ``PerLoop(httpx.AsyncHTTPTransport).get()``, each closed as its loop shuts down),
            or turn keep-alive off (``limits=httpx.Limits(max_keepalive_connections=0)``).
        http_library: the async calls' library, ``"httpx2"`` or ``"httpx"``; ``None``: httpx2
            where it is installed, else httpx (or the library of ``async_transport``).
        send_cache_key: whether a :class:`~llmguard_sdk.PromptBuilder` request's
            ``prompt_cache_key`` (OpenAI's prompt-caching hint) is sent here; ``None``: where
            ``base_url`` is OpenAI's own API (``api.openai.com``) or Azure OpenAI's
            (``*.openai.azure.com``, and on an Azure AI Foundry resource,
            ``*.services.ai.azure.com`` or ``*.cognitiveservices.azure.com``, its
            ``/openai/...`` paths: not its ``/models`` inference API, which serves other
            vendors' models), as other servers may refuse a field they do not know (Groq
            answers 400, Mistral 422). A key the caller puts in ``extra_body`` is always sent.

    ``server_address`` / ``server_port``: the host and port of ``base_url`` (its scheme's when
    it names none), telemetry's ``server.address`` / ``server.port``.

    .. versionchanged:: 0.2.0 ``send_cache_key=None`` sends the key to an Azure AI Foundry
       resource's Azure OpenAI paths (``/openai/...``) too (it went to no Foundry host).

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
        send_cache_key: bool | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
            raise ConfigurationError(
                f"base_url must be an http(s) URL such as https://<provider host>/v1, "
                f"got {base_url!r}"
            )
        check_count("max_connections", max_connections)  # ("5" raised TypeError)
        window_problem = None if context_window is None else count_problem(context_window)
        if window_problem is not None:  # ("5" was never used; 10**30 was kept)
            raise ConfigurationError(f"context_window {window_problem}")
        self._headers = {"accept": "application/json", **dict(headers or {})}
        check_api_key(api_key)  # masked in every error message and telemetry export
        if api_key is not None:
            self._headers["authorization"] = f"Bearer {api_key}"
        for key, value in self._headers.items():
            if not header_safe(key) or not header_safe(value):
                raise ConfigurationError(f"header {key!r} must be ASCII without line breaks")
        query = f"?{parts.query}" if parts.query else ""  # e.g. Azure's ?api-version=...
        self.base_url = base_url.removesuffix(query).rstrip("/")
        self.model = model
        self.context_window = context_window
        if send_cache_key is not None and not isinstance(send_cache_key, bool):
            raise ConfigurationError(
                f"send_cache_key must be True, False or None, got {send_cache_key!r:.40}"
            )
        if send_cache_key is None:  # by its URL: its host, and on Azure AI Foundry its path
            send_cache_key = takes_cache_key(base_url)
        self.send_cache_key = send_cache_key
        self.name = name or parts.netloc.rpartition("@")[2]  # never a user:password@
        self.server_address, self.server_port = server_of(base_url)  # (telemetry's)
        self._url = self.base_url + "/chat/completions" + query
        self._max_connections = max_connections
        self._route_cap: int | None = None
        self._transport = transport
        self._async_transport = async_transport
        self._async_library = async_library(http_library, async_transport)
        self._lock = threading.Lock()
        self._pool: Pool | None = None  # the sync client and its transport
        self._apools = PerLoop(self._new_async_pool, close=self._close_loop_pool)
        self._builders: dict[str, RequestBuilder] = {}  # per library: its clients' headers

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(name={self.name!r}, base_url={shown(self.base_url)!r})"

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

    async def _asend(self, pool: Pool, built: Any) -> Any:
        """``built`` sent through this loop's pool; a keep-alive ``async_transport`` of yours
        whose kept connection belongs to another event loop (one since closed: a second
        ``asyncio.run()``) fails with a :class:`~llmguard_sdk.errors.ConfigurationError`
        that says so (it was a bare ``RuntimeError: Event loop is closed``). Your setup, not
        the provider's health: the call raises it, no other route is tried, and the route's
        breaker does not count it."""
        try:
            return await pool.asend(built)
        except RuntimeError as exc:
            if self._async_transport is None or not off_its_loop(exc):
                raise
            raise ConfigurationError(
                f"route {self.name!r}: the async_transport you passed failed on this event "
                f"loop ({exc}; the request may have gone out, its answer unread): a "
                "keep-alive httpx.AsyncHTTPTransport keeps its connections on the event loop "
                "that opened them (an earlier asyncio.run(), or another thread's loop), and "
                "every loop's calls share it. Give each event loop a "
                "transport of its own (the README's PerLoopTransport: "
                "llmguard_sdk.PerLoop(httpx.AsyncHTTPTransport).get() per request), or turn "
                "keep-alive off (limits=httpx.Limits(max_keepalive_connections=0))"
            ) from exc

    async def _close_loop_pool(self, pool: Pool) -> None:
        """A loop's pool, as its loop shuts down: its connections closed, unless its transport
        is yours (``async_transport``: every loop's pool sends through it, so it stays open)."""
        if self._async_transport is None:
            await pool.client.aclose()

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
        return build_payload(request, model=model, stream=stream, hints=self.send_cache_key)

    def _extra_headers(self, request: ChatRequest) -> Mapping[str, str] | None:
        """The request's headers this route sends (not Claude's where named Anthropic's)."""
        if not request.extra_headers:  # (a call without: no metadata to read)
            return None
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
            timeout=timeout_until(deadline, self.name, idle_timeout),
            headers=self._extra_headers(request),
            params=request.extra_query,
        )
        if isinstance(client, httpx.Client):  # the watchdog bounds the send and head too
            built.extensions[DEADLINE] = deadline
        elif idle_timeout is None and deadline - time.monotonic() <= LONGEST_WAIT:
            unbounded = {"read": None, "write": None}
            built.extensions["timeout"] = {**built.extensions["timeout"], **unbounded}
        return built

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Send one non-streaming chat completion and parse its answer."""
        pool = self._sync_pool()
        built = self._build(pool.client, request, model, stream=False, deadline=deadline)
        collected: Collector | None = None  # (once the answer's status and headers came)
        try:
            response = pool.send(built)
            with Reading(response, deadline):
                collected = Collector.of(response, self.name, deadline)
                with undecodable(response, httpx.DecodingError):
                    for piece in response.iter_bytes():
                        if collected.add(piece):
                            break
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.name, deadline, answered=_head(collected)) from exc
        return self._parse(response.status_code, collected.headers, collected.data)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete`."""
        pool = self._async_pool()
        built = self._build(pool.client, request, model, stream=False, deadline=deadline)
        errors = library_errors(self._async_library)
        collected: Collector | None = None  # (once the answer's status and headers came)
        try:
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                response = await self._asend(pool, built)
                pieces: AsyncIterator[bytes] | None = None
                try:
                    collected = Collector.of(response, self.name, deadline)
                    pieces = abody(response, collected.headers)
                    with undecodable(response, errors.decoding):
                        async for piece in pieces:
                            if collected.add(piece):
                                break
                finally:
                    with anyio.CancelScope(shield=True):
                        await aclose_pieces(pieces)
                        await response.aclose()
        except TimeoutError:
            raise deadline_passed(self.name) from None
        except errors.any as exc:
            answered = _head(collected)
            raise transport_error(exc, self.name, deadline, errors, answered) from exc
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
            with Reading(response, deadline):
                if not state.accept(response.status_code, plain_headers(response.headers)):
                    error = Collector.of(response, self.name, deadline)
                    with undecodable(response, httpx.DecodingError):
                        for piece in response.iter_bytes():
                            if error.add(piece):
                                break
                    raise state.http_error(error.data)
                for raw in response.iter_bytes():
                    yield from state.feed(raw)
                    if state.done:
                        break
        except httpx.HTTPError as exc:
            if not state.status:  # no answer yet: the request may never have left
                raise transport_error(exc, self.name, deadline) from exc
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
        errors = library_errors(self._async_library)
        try:
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                response = await self._asend(pool, built)
        except TimeoutError:
            raise deadline_passed(self.name) from None
        except errors.any as exc:
            raise transport_error(exc, self.name, deadline, errors) from exc
        pieces = response.aiter_bytes()
        try:
            if not state.accept(response.status_code, plain_headers(response.headers)):
                error = Collector.of(response, self.name, deadline)
                ends = (errors.decoding,)  # an undecodable error body: its status decides
                while (
                    piece := await next_before(pieces, deadline, state, errors, ends)
                ) is not None:
                    if error.add(piece):
                        break
                raise state.http_error(error.data)
            while (raw := await next_before(pieces, deadline, state, errors)) is not None:
                for chunk in state.feed(raw):
                    yield chunk
                if state.done:
                    break
            state.check_ended()
        finally:
            with anyio.CancelScope(shield=True):
                await aclose_pieces(pieces)  # (ended at its last event: not exhausted)
                await response.aclose()


def _head(collected: Collector | None) -> tuple[int, dict[str, str]] | None:
    """The status and headers of an answer whose body was being read (None: none came)."""
    if collected is None or collected.status is None:
        return None
    return collected.status, collected.headers


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
