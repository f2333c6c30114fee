"""A provider for any OpenAI-compatible chat-completions endpoint, over httpx.

OpenAI itself, Azure OpenAI, OpenRouter, Together, Groq, vLLM, llama.cpp's server, Ollama and
LiteLLM's proxy all speak this protocol. Requests and responses are turned into the SDK's
models by pure functions; the sync and async classes only do the I/O, so both behave alike.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ContextLengthExceededError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    StreamInterruptedError,
)
from ..models import ChatRequest, ChatResponse, StreamChunk, Usage
from .headers import retry_after_seconds
from .sse import SSEDecoder

__all__ = ["OpenAICompatibleProvider", "error_from_status", "usage_from_payload"]

_MAX_BODY_BYTES = 32 * 1024 * 1024
_CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
)


class OpenAICompatibleProvider:
    """Chat completions against an OpenAI-compatible HTTP API, sync and async.

    Args:
        base_url: the API root including its version path, e.g. ``https://api.openai.com/v1``.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        model: the model this route serves; ``None`` uses each request's ``model``.
        name: the route name shown in responses and errors (default: the URL's host:port).
        headers: extra headers sent with every request.
        max_connections: size of the connection pool (one pool per client, kept between calls).
        transport, async_transport: httpx transports, for tests or custom networking.

    Connections are pooled and reused; call :meth:`close` / :meth:`aclose` (or let the
    :class:`~llmguard_sdk.Guard` do it) when you are done.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_connections: int = 100,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"base_url must be an http(s) URL such as https://api.openai.com/v1, "
                f"got {base_url!r}"
            )
        if max_connections < 1:
            raise ConfigurationError("max_connections must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = name or parts.netloc
        self._url = self.base_url + "/chat/completions"
        self._headers = {"accept": "application/json", **dict(headers or {})}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._transport = transport
        self._async_transport = async_transport
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(name={self.name!r}, base_url={self.base_url!r})"

    # -- clients -------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                headers=self._headers, limits=self._limits, transport=self._transport
            )
        return self._client

    def _async_client(self) -> httpx.AsyncClient:
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(
                headers=self._headers, limits=self._limits, transport=self._async_transport
            )
        return self._aclient

    def close(self) -> None:
        """Close the sync connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close the async connection pool (and the sync one)."""
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None
        self.close()

    # -- calls -------------------------------------------------------------------------------

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Send one non-streaming chat completion and parse its answer.

        The body is read in pieces with the deadline checked between them, so a server that
        trickles bytes cannot hold the call past its deadline.
        """
        payload = build_payload(request, model=model, stream=False)
        timeout = _timeout_until(deadline, self.name)
        client = self._sync_client()
        try:
            with client.stream("POST", self._url, json=payload, timeout=timeout) as response:
                body = _Body(self.name, deadline)
                for piece in response.iter_bytes():
                    body.add(piece)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.name) from exc
        return parse_completion(response, body.data, route=self.name)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete`."""
        payload = build_payload(request, model=model, stream=False)
        timeout = _timeout_until(deadline, self.name)
        client = self._async_client()
        try:
            async with client.stream("POST", self._url, json=payload, timeout=timeout) as response:
                body = _Body(self.name, deadline)
                async for piece in response.aiter_bytes():
                    body.add(piece)
        except httpx.HTTPError as exc:
            raise _transport_error(exc, self.name) from exc
        return parse_completion(response, body.data, route=self.name)

    def stream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> Generator[StreamChunk, None, None]:
        """Stream a chat completion (server-sent events), asking for usage in the last chunk.

        ``idle_timeout`` bounds the silence before the first and between later pieces.
        """
        payload = build_payload(request, model=model, stream=True)
        timeout = _timeout_until(deadline, self.name, idle_timeout)
        state = _StreamState(self.name, deadline)
        client = self._sync_client()
        try:
            with client.stream("POST", self._url, json=payload, timeout=timeout) as response:
                if not state.accept(response):
                    response.read()
                    raise state.http_error(response)
                for raw in response.iter_bytes():
                    yield from state.feed(raw)
                    if state.done:
                        return
        except httpx.HTTPError as exc:
            raise state.broken(exc) from exc
        state.check_ended()

    async def astream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`stream`."""
        payload = build_payload(request, model=model, stream=True)
        timeout = _timeout_until(deadline, self.name, idle_timeout)
        state = _StreamState(self.name, deadline)
        client = self._async_client()
        try:
            async with client.stream("POST", self._url, json=payload, timeout=timeout) as response:
                if not state.accept(response):
                    await response.aread()
                    raise state.http_error(response)
                async for raw in response.aiter_bytes():
                    for chunk in state.feed(raw):
                        yield chunk
                    if state.done:
                        return
        except httpx.HTTPError as exc:
            raise state.broken(exc) from exc
        state.check_ended()


# -- pure request / response mapping ------------------------------------------------------


def build_payload(request: ChatRequest, *, model: str, stream: bool) -> dict[str, Any]:
    """The JSON body of a chat-completions call for ``request``."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": [m.model_dump(exclude_none=True) for m in request.messages],
    }
    optional = request.model_dump(
        include={
            "max_tokens",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "tools",
            "tool_choice",
            "response_format",
        },
        exclude_none=True,
    )
    payload.update(optional)
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    if request.extra_body:
        payload.update(request.extra_body)
    return payload


def parse_completion(response: httpx.Response, body: bytes, *, route: str) -> ChatResponse:
    """Turn an HTTP response and its body into a :class:`ChatResponse`, or raise its error."""
    headers = dict(response.headers)
    if response.status_code != 200:
        text = body.decode("utf-8", errors="replace")
        raise error_from_status(response.status_code, headers, text, route=route)
    data = _json_body(response, body, route)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed("response has no choices", response, body, route)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _malformed("response choice has no message", response, body, route)
    content = message.get("content")
    tool_calls = message.get("tool_calls")
    if content is not None and not isinstance(content, str):
        raise _malformed("message content is not a string", response, body, route)
    if content is None and not tool_calls:
        raise _malformed("message has neither content nor tool_calls", response, body, route)
    usage, cost = usage_from_payload(data.get("usage"))
    return ChatResponse(
        text=content or "",
        finish_reason=_str_or_none(choices[0].get("finish_reason")),
        usage=usage,
        model=str(data.get("model") or ""),
        route=route,
        id=_str_or_none(data.get("id")),
        tool_calls=tool_calls if isinstance(tool_calls, list) else None,
        cost_usd=cost,
        cost_source="reported" if cost is not None else None,
        headers=headers,
    )


def usage_from_payload(raw: object) -> tuple[Usage | None, float | None]:
    """Read a usage object, OpenAI-shaped or Anthropic-shaped, and any reported cost.

    OpenAI reports ``prompt_tokens`` (cached tokens included) with
    ``prompt_tokens_details.cached_tokens``; Anthropic reports ``input_tokens`` *without* the
    ``cache_read_input_tokens``, so those are added to make ``input_tokens`` mean the same
    thing for both. Returns ``(None, None)`` when there is no usable usage.
    """
    if not isinstance(raw, dict):
        return None, None
    cost = raw.get("cost")
    reported_cost = float(cost) if isinstance(cost, (int, float)) and cost >= 0 else None
    if "prompt_tokens" in raw or "completion_tokens" in raw:
        details = raw.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
        fields = (raw.get("prompt_tokens", 0), raw.get("completion_tokens", 0), cached or 0)
        anthropic_cache = 0
    elif "input_tokens" in raw or "output_tokens" in raw:
        cached = raw.get("cache_read_input_tokens") or 0
        fields = (raw.get("input_tokens", 0), raw.get("output_tokens", 0), cached)
        anthropic_cache = cached if isinstance(cached, int) else 0
    else:
        return None, reported_cost
    if not all(isinstance(v, int) and v >= 0 for v in fields):
        return None, reported_cost
    input_tokens, output_tokens, cached_tokens = (int(v) for v in fields)
    usage = Usage(
        input_tokens=input_tokens + anthropic_cache,
        output_tokens=output_tokens,
        cached_input_tokens=cached_tokens,
    )
    return usage, reported_cost


def error_from_status(
    status: int, headers: Mapping[str, str], body: str, *, route: str
) -> ProviderError:
    """The typed error for an HTTP error answer (429, 5xx, 4xx ...)."""
    message = _error_message(body) or f"provider answered HTTP {status}"
    common: dict[str, Any] = {
        "route": route,
        "status_code": status,
        "headers": headers,
        "retry_after": retry_after_seconds(headers),
        "body": body[:2000],
    }
    if status == 429:
        return RateLimitedError(message, **common)
    if status in (401, 403):
        return AuthenticationError(message, **common)
    if status == 408:
        return ProviderTimeoutError(message, **common)
    if status >= 500:
        return ProviderUnavailableError(message, **common)
    if 400 <= status < 500:
        lowered = body.lower()
        if any(marker in lowered for marker in _CONTEXT_LENGTH_MARKERS):
            return ContextLengthExceededError(message, **common)
        return BadRequestError(message, **common)
    return MalformedResponseError(f"unexpected HTTP status {status}", **common)


# -- streaming ----------------------------------------------------------------------------


class _StreamState:
    """What the sync and async stream loops share: decoding, chunk mapping, end checks."""

    def __init__(self, route: str, deadline: float) -> None:
        self.route = route
        self.deadline = deadline
        self.decoder = SSEDecoder()
        self.done = False
        self.partial: list[str] = []
        self.headers: dict[str, str] = {}
        self.finished = False

    def accept(self, response: httpx.Response) -> bool:
        """Whether ``response`` is a 200 event stream (else read it and raise http_error)."""
        self.headers = dict(response.headers)
        if response.status_code != 200:
            return False
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            raise MalformedResponseError(
                f"stream answered with content type {content_type!r}, not text/event-stream",
                route=self.route,
                status_code=200,
                headers=self.headers,
            )
        return True

    def http_error(self, response: httpx.Response) -> ProviderError:
        return error_from_status(
            response.status_code, self.headers, response.text, route=self.route
        )

    def feed(self, raw: bytes) -> Generator[StreamChunk, None, None]:
        for event in self.decoder.feed(raw):
            if event.data.strip() == "[DONE]":
                self.done = True
                return
            chunk = self._chunk(event.data)
            if chunk.text:
                self.partial.append(chunk.text)
            if chunk.finish_reason:
                self.finished = True
            yield chunk
        if time.monotonic() > self.deadline:
            raise self._failure(
                ProviderTimeoutError, "the call's deadline passed during the stream"
            )

    def _chunk(self, data: str) -> StreamChunk:
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            raise self._failure(MalformedResponseError, "stream event is not JSON") from None
        if not isinstance(event, dict):
            raise self._failure(MalformedResponseError, "stream event is not a JSON object")
        if "error" in event:
            message = _error_message(data) or "provider reported an error in the stream"
            raise self._failure(ProviderUnavailableError, message)
        usage, _cost = usage_from_payload(event.get("usage"))
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise self._failure(MalformedResponseError, "stream event has no choices list")
        text, finish, tool_calls = "", None, None
        if choices:
            choice = choices[0] if isinstance(choices[0], dict) else {}
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise self._failure(MalformedResponseError, "stream delta is not an object")
            content = delta.get("content")
            text = content if isinstance(content, str) else ""
            finish = _str_or_none(choice.get("finish_reason"))
            tool_calls = (
                delta.get("tool_calls") if isinstance(delta.get("tool_calls"), list) else None
            )
        return StreamChunk(
            text=text,
            finish_reason=finish,
            usage=usage,
            tool_calls=tool_calls,
            model=str(event.get("model") or ""),
            route=self.route,
            id=_str_or_none(event.get("id")),
        )

    def check_ended(self) -> None:
        """The body ended: fine after [DONE] (or a finish with nothing pending), else a cut."""
        if self.done or (self.finished and not self.decoder.pending):
            return
        raise self._failure(ProviderUnavailableError, "stream ended before it was complete")

    def broken(self, exc: httpx.HTTPError) -> ProviderError:
        if isinstance(exc, httpx.TimeoutException):
            return self._failure(ProviderTimeoutError, f"stream timed out: {exc!r}")
        return self._failure(ProviderUnavailableError, f"stream broke: {exc!r}")

    def _failure(self, kind: type[ProviderError], message: str) -> ProviderError:
        """``kind`` before any content was delivered; StreamInterruptedError after."""
        if self.partial:
            return StreamInterruptedError(
                message,
                partial_text="".join(self.partial),
                route=self.route,
                status_code=200,
                headers=self.headers,
            )
        return kind(message, route=self.route, status_code=200, headers=self.headers)


# -- helpers -------------------------------------------------------------------------------


def _timeout_until(deadline: float, route: str, idle: float | None = None) -> httpx.Timeout:
    """httpx timeouts for one request: nothing may wait past the deadline (or ``idle``)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProviderTimeoutError("the call's deadline passed before the request", route=route)
    return httpx.Timeout(remaining if idle is None else min(remaining, idle))


class _Body:
    """Collects a response body, enforcing the deadline and a size cap between pieces."""

    def __init__(self, route: str, deadline: float) -> None:
        self.route = route
        self.deadline = deadline
        self._pieces: list[bytes] = []
        self._size = 0

    def add(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size > _MAX_BODY_BYTES:
            raise MalformedResponseError(
                f"response body is larger than {_MAX_BODY_BYTES} bytes", route=self.route
            )
        if time.monotonic() > self.deadline:
            raise ProviderTimeoutError(
                "the call's deadline passed while reading the answer", route=self.route
            )

    @property
    def data(self) -> bytes:
        return b"".join(self._pieces)


def _transport_error(exc: httpx.HTTPError, route: str) -> ProviderError:
    if isinstance(exc, httpx.TimeoutException):
        return ProviderTimeoutError(f"no answer in time: {exc!r}", route=route)
    if isinstance(exc, httpx.DecodingError):
        return MalformedResponseError(f"undecodable response: {exc!r}", route=route)
    return ProviderUnavailableError(f"connection failed: {exc!r}", route=route)


def _json_body(response: httpx.Response, body: bytes, route: str) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    if "json" not in content_type:
        raise _malformed(f"content type {content_type!r} is not JSON", response, body, route)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _malformed("response body is not valid JSON", response, body, route) from None
    if not isinstance(data, dict):
        raise _malformed("response body is not a JSON object", response, body, route)
    return data


def _malformed(
    message: str, response: httpx.Response, body: bytes, route: str
) -> MalformedResponseError:
    return MalformedResponseError(
        message,
        route=route,
        status_code=response.status_code,
        headers=dict(response.headers),
        body=body[:2000].decode("utf-8", errors="replace"),
    )


def _error_message(body: str) -> str | None:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, TypeError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
