"""One route's HTTP requests, built without the client's per-call merging.

``client.stream("POST", url, headers=..., timeout=...)`` parses the URL, merges the client's
headers with the call's and normalises every header again on each call: about 40 % of a
small call's client-side CPU over an in-process transport (less on a real socket).
:class:`RequestBuilder` does that once per route and
client library (the URL parsed, the client's headers merged with the JSON content type), so
a call copies one header list and adds its own headers (the idempotency key). The request is
then sent with ``client.send(request, stream=True)``, as ``client.stream`` sends it.

The cookies a provider set are sent back as the client sends them (its jar adds the
``Cookie`` header); a call with query parameters is built by the client as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = ["RequestBuilder"]

_JSON = "application/json"


class RequestBuilder:
    """Builds the POST requests of one route's URL for the clients of one HTTP library
    (httpx or httpx2), whose clients all carry the same headers."""

    __slots__ = ("_headers", "_make", "_target", "_url")

    def __init__(self, module: ModuleType, client: Any, url: str) -> None:
        self._url = url
        self._target = module.URL(url)
        self._make = module.Request
        headers = client.headers.copy()
        headers["content-type"] = _JSON
        self._headers = headers

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
        merged = self._headers.copy()
        if headers:
            for key, value in headers.items():
                merged[key] = value
        timeouts = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        request = self._make(
            "POST", self._target, headers=merged, content=body, extensions={"timeout": timeouts}
        )
        cookies = client.cookies
        if cookies:  # a provider set one (a load balancer's, a bot filter's): sent back
            cookies.set_cookie_header(request)
        return request
