"""One route's HTTP requests, built without the client's per-call merging.

``client.stream("POST", url, headers=..., timeout=...)`` parses the URL, merges the client's
headers with the call's and normalises every header again on each call: about 40 % of a
small call's client-side CPU over an in-process transport (less on a real socket).
:class:`RequestBuilder` does that once per route and
client library (the URL parsed, the client's headers merged with the JSON content type), so
a call copies one header list and adds its own headers (the idempotency key).

A :class:`Pool` sends it. The provider makes its clients itself, with no authentication,
redirects or event hooks, so where it also made the transport (or was given one) the
request goes straight to the transport: ``client.send`` would only run its authentication
flow, redirect loop, cookie extraction and request logging around the same
``transport.handle_request`` (about 75 us a call over an in-process transport, some 40 % of
the provider's own CPU). Cookies a provider sets are still kept (and sent back by the
builder through the client's jar); the one thing lost is httpx's ``HTTP Request: ...`` INFO
log line. Where the environment names proxies (``HTTPS_PROXY`` and the like), a sync
client's requests go to the provider's own transport through the ``http://`` proxy named for
the provider's URL (or directly, where ``NO_PROXY`` says so); async clients, and a proxy
that is ``https://`` or SOCKS, go through ``client.send`` and the client's proxy
transports as before. A call with query parameters is built by the client.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import httpx

from ._abort import ABANDONED, aborted
from ._ahttp11 import AnyioTransport
from ._http11 import StdlibTransport, environment_proxy

__all__ = ["Pool", "RequestBuilder", "own_transport"]

_JSON = "application/json"


class RequestBuilder:
    """Builds the POST requests of one route's URL for the clients of one HTTP library
    (httpx or httpx2), whose clients all carry the same headers.

    The request carries its body as a stream with its ``Host`` and ``Content-Length``
    headers set here (``Request(content=...)`` would copy and search the header list again
    to add them)."""

    __slots__ = ("_make", "_pairs", "_stream", "_target", "_url")

    def __init__(self, module: ModuleType, client: Any, url: str) -> None:
        self._url = url
        self._target = module.URL(url)
        self._make = module.Request
        self._stream = module.ByteStream
        headers = client.headers.copy()
        headers["content-type"] = _JSON
        pairs: list[tuple[bytes, bytes]] = [(b"Host", self._target.netloc), *headers.raw]
        self._pairs = tuple(pairs)

    def build(
        self,
        client: Any,
        body: bytes,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """The request of one call: ``body`` (JSON), the call's ``headers`` over the
        client's, every one of the library's timeouts ``timeout`` seconds."""
        if params:  # rare: the client merges them into the URL as it always did
            return client.build_request(
                "POST",
                self._url,
                content=body,
                headers={"content-type": _JSON, **(headers or {})},
                params=params,
                timeout=timeout,
            )
        pairs = [*self._pairs, (b"Content-Length", b"%d" % len(body))]
        if headers:
            replaced = {key.lower().encode("ascii") for key in headers}
            pairs = [pair for pair in pairs if pair[0].lower() not in replaced]
            pairs += [(key.encode("ascii"), value.encode()) for key, value in headers.items()]
        timeouts = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        request = self._make(
            "POST",
            self._target,
            headers=pairs,
            stream=self._stream(body),
            extensions={"timeout": timeouts},
        )
        request.read()  # its content readable, as a Request(content=...) is (one chunk)
        cookies = client.cookies
        if cookies:  # a provider set one (a load balancer's, a bot filter's): sent back
            cookies.set_cookie_header(request)
        return request


def own_transport(module: ModuleType, limits: Any, *, asynchronous: bool, url: str) -> Any:
    """A transport with ``limits`` for a client the provider makes to send to ``url``: the
    provider's own, for an async client of ``module`` (httpx or httpx2)
    :class:`~._ahttp11.AnyioTransport`, for the sync client (always httpx's)
    :class:`~._http11.StdlibTransport`, through the ``http://``
    proxy the environment names for ``url`` where it names one. ``None`` where the client
    must make its transports itself: an async client where the environment names proxies, a
    sync one whose proxy is ``https://`` or SOCKS."""
    proxies = urllib.request.getproxies()
    named = any(proxies.get(scheme) for scheme in ("http", "https", "all"))
    if asynchronous:
        return None if named else AnyioTransport(module, limits)
    if not named:
        return StdlibTransport(limits)  # sync clients are httpx's: the standard library's HTTP/1.1
    try:
        proxy = environment_proxy(httpx.URL(url))
    except LookupError:  # a later httpx: its client reads the environment
        return None
    if proxy is None or proxy.url.scheme == "http":
        return StdlibTransport(limits, proxy=proxy)
    return None


class Pool:
    """A client of one HTTP library and the transport its requests go to directly (``None``:
    through ``client.send``)."""

    __slots__ = ("_connect_error", "_request_error", "client", "transport")

    def __init__(self, module: ModuleType, client: Any, transport: Any) -> None:
        self.client = client
        self.transport = transport
        self._request_error: type[Exception] = module.RequestError
        self._connect_error: type[Exception] = module.ConnectError

    def send(self, request: Any) -> Any:
        """The response to ``request``, its body not read yet.

        Raises:
            ConnectError: (the library's) the call was aborted (a hedge race's loser, a
                shadow's call a Guard's close abandoned): nothing is sent.
        """
        if aborted():  # (a call that registered nothing with its abort: it notices here)
            raise self._connect_error(ABANDONED)
        if self.transport is None:
            return self.client.send(request, stream=True)
        self._check_open()
        try:
            response = self.transport.handle_request(request)
        except self._request_error as exc:
            exc.request = request  # type: ignore[attr-defined]  # as client.send sets it
            raise
        return self._received(request, response)

    async def asend(self, request: Any) -> Any:
        """Async twin of :meth:`send`."""
        if self.transport is None:
            return await self.client.send(request, stream=True)
        self._check_open()
        try:
            response = await self.transport.handle_async_request(request)
        except self._request_error as exc:
            exc.request = request  # type: ignore[attr-defined]
            raise
        return self._received(request, response)

    def _check_open(self) -> None:
        if self.client.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")

    def _received(self, request: Any, response: Any) -> Any:
        response.request = request
        if "set-cookie" in response.headers:  # kept in the client's jar, sent back later
            self.client.cookies.extract_cookies(response)
        return response
