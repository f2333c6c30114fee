"""What the transport reads and writes: requests an SDK sent, answers in the shape it expects.

Written once for every protocol the seam speaks (OpenAI chat completions, OpenAI responses,
the model list): a :class:`Wire` turns an incoming body into :meth:`Guard.chat` arguments and
a Guard answer (or stream chunk, or error) back into bytes and headers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._ids import UniqueIds
from ..errors import (
    AllRoutesFailedError,
    AuthenticationError,
    BadRequestError,
    BudgetExceededError,
    ContentPolicyError,
    ContextLengthExceededError,
    InputTooLargeError,
    LLMGuardError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitedError,
    RateLimitExceededError,
    RefusedError,
    RequestValidationError,
    UnknownModelError,
)
from ..models import ChatResponse, StreamChunk
from ..providers._anthropic_only import HEADERS as CLAUDE_OWN_HEADERS
from ..providers._error_kinds import body_error
from ._controls import OWN_PREFIX, SCOPE_HEADERS, cache_controls
from ._overflow import anthropic_overflow

# Headers an SDK sets for itself: never forwarded to the provider. (An ``Idempotency-Key``
# is the caller's: openai's and anthropic's SDKs set none, and the Guard's call keeps a
# caller's key in place of its own.)
_OWN_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "authorization",
        "connection",
        "content-length",
        "content-type",
        "host",
        "transfer-encoding",
        "user-agent",
        "x-api-key",
        "anthropic-version",
    }
)
_OWN_PREFIXES = ("x-stainless-", "openai-", OWN_PREFIX, "anthropic-")
# ... but Claude's own (anthropic's `betas=[...]`, its messages.create's user_profile_id and
# workspace_id), though an SDK sets them, say what the caller asked for: forwarded, to
# Anthropic routes alone (_chat.guard_arguments names them under ANTHROPIC_ONLY_KEY)
_CALLER_HEADERS = CLAUDE_OWN_HEADERS
# The provider's headers an answer passes on to the SDK (OpenAI's names, then Anthropic's).
_REQUEST_ID_HEADERS = frozenset({"x-request-id", "request-id"})
_RATE_LIMIT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
_JSON = "application/json"
_SSE = "text/event-stream"
# OpenAI's wording for an overflow, with its code: what frameworks look for in the error's
# text (LangChain's ContextOverflowError, which its agents trim the messages and retry on)
_OVERFLOW = (
    " (context_length_exceeded: this model's maximum context length is exceeded by your"
    " messages. Please reduce the length of the messages.)"
)
_LONGEST_RETRY_AFTER_S = 1e9  # (about 31 years) what an error answer's retry-after-ms says at most


class NotServedError(RequestValidationError):
    """A path, method or model the seam does not serve: answered 404 (``NotFoundError`` in
    the SDKs), as OpenAI and Anthropic answer an unknown URL; ``code`` goes in OpenAI's
    error body (``model_not_found`` for an unknown model)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Incoming:
    """One HTTP request as an SDK sent it (library-neutral)."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    timeout: float | None = None  # the SDK's read timeout for this request, if any


@dataclass
class Answer:
    """What the transport answers: a JSON body or an SSE stream of byte strings."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    response: ChatResponse | None = None
    error: LLMGuardError | None = None
    events: Any = None  # Iterator[bytes] or AsyncIterator[bytes]
    # closes the Guard's stream (sync, or async for an AsyncIterator) even when ``events``
    # was never started: closing an unstarted generator does not run its ``finally``
    close: Any = None


class Writer(Protocol):
    """Turns one stream's chunks into server-sent events."""

    def event(self, chunk: StreamChunk) -> bytes: ...

    def end(self) -> bytes: ...

    def failure(self, exc: LLMGuardError) -> bytes: ...


class Wire(Protocol):
    """One protocol the transport speaks."""

    def arguments(self, body: dict[str, Any], incoming: Incoming) -> dict[str, Any]: ...

    def user(self, body: Mapping[str, Any]) -> str | None: ...

    def answer(self, response: ChatResponse, request: Mapping[str, Any]) -> dict[str, Any]: ...

    def writer(self, arguments: Mapping[str, Any], body: Mapping[str, Any]) -> Writer: ...

    def error(self, exc: LLMGuardError) -> dict[str, Any]: ...


@dataclass
class Call:
    """A parsed request: the Guard's arguments, whether it streams, the wire to answer in,
    the request's body."""

    wire: Wire
    arguments: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    body: dict[str, Any] = field(default_factory=dict)


def load_object(body: bytes) -> dict[str, Any]:
    """The request's JSON object, or a :class:`RequestValidationError`."""
    try:
        data = json.loads(body or b"null")
    except (ValueError, RecursionError):
        raise RequestValidationError("request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise RequestValidationError("request body is not a JSON object")
    return data


def dumps(data: object) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event carrying ``data`` as JSON."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + dumps(data) + b"\n\n"


def passthrough(incoming: Incoming) -> dict[str, Any]:
    """Headers, query parameters, scope and cache controls (``x-llmguard-cache*``, see
    :mod:`._controls`) the SDK's caller added, as Guard arguments."""
    extra: dict[str, Any] = {}
    headers = {
        name: value
        for name, value in incoming.headers.items()
        if name in _CALLER_HEADERS
        or (name not in _OWN_HEADERS and not name.startswith(_OWN_PREFIXES))
    }
    if headers:
        extra["extra_headers"] = headers
    if incoming.query:
        extra["extra_query"] = dict(incoming.query)
    extra.update(scope(incoming))
    extra.update(cache_controls(incoming.headers))
    return extra


def scope(incoming: Incoming) -> dict[str, str]:
    """The call's ``tenant`` and ``feature`` the SDK's caller set in its headers."""
    return {
        key: incoming.headers[header]
        for key, header in SCOPE_HEADERS.items()
        if header in incoming.headers
    }


def name_only(arguments: dict[str, Any], key: str, names: Sequence[str]) -> None:
    """Name ``names`` under ``metadata[key]`` of the Guard ``arguments`` (in place, after
    those named there already): what only the routes of one API send (``key``:
    :data:`~llmguard_sdk.providers.wire.ANTHROPIC_ONLY_KEY`, ``RESPONSES_ONLY_KEY``). A
    ``metadata`` that is no object is left as it is, for the request's check to refuse."""
    tags = arguments.get("metadata")
    if not names or not isinstance(tags, (Mapping, type(None))):
        return
    tags = dict(tags or {})
    had = [name for name in str(tags.get(key, "")).split(",") if name]
    tags[key] = ",".join(dict.fromkeys([*had, *names]))
    arguments["metadata"] = tags


def json_answer(body: dict[str, Any], response: ChatResponse) -> Answer:
    """A 200 JSON answer with the Guard's view in ``x-llmguard-*`` headers."""
    return Answer(200, [("content-type", _JSON), *served_headers(response)], dumps(body), response)


def stream_headers(first: StreamChunk | None) -> list[tuple[str, str]]:
    """Headers of a streamed answer (the route is known from its first chunk)."""
    headers = [("content-type", _SSE), ("cache-control", "no-cache")]
    if first is not None:
        headers += _provider_headers(first.headers)
        headers.append(("x-llmguard-route", first.route))
    return headers


def served_headers(response: ChatResponse) -> list[tuple[str, str]]:
    """The provider's request id and rate-limit headers, and the Guard's own view."""
    return [
        *_provider_headers(response.headers),
        ("x-llmguard-route", response.route),
        ("x-llmguard-attempts", str(response.attempts)),
    ]


def _provider_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The serving provider's request id and rate-limit headers, whatever its API: OpenAI's
    ``x-request-id`` and ``x-ratelimit-*``, Anthropic's ``request-id`` and
    ``anthropic-ratelimit-*``."""
    return [
        (name, value)
        for name, value in headers.items()
        if name.lower() in _REQUEST_ID_HEADERS or name.lower().startswith(_RATE_LIMIT_PREFIXES)
    ]


def error_answer(wire: Wire, exc: LLMGuardError) -> Answer:
    """``exc`` as the status and error body the SDK expects; ``x-should-retry: false`` keeps the
    SDK from retrying what the Guard has already retried (one retry loop: the Guard's). A
    wait goes in ``retry-after-ms`` and ``retry-after`` (whole seconds, rounded up). The
    provider's request id and rate-limit headers (of the last route's error) come along."""
    status, last = status_of(exc), _last(exc)
    headers = [
        ("content-type", _JSON),
        ("x-should-retry", "false"),
        ("x-llmguard-error", _public_name(exc)),
    ]
    if isinstance(last, ProviderError):
        headers += _provider_headers(last.headers)
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, (int, float)) and retry_after >= 0:  # (NaN: none)
        # a provider's Retry-After of 1e306 s is finite, its milliseconds are not
        seconds = min(retry_after, _LONGEST_RETRY_AFTER_S)
        headers.append(("retry-after-ms", str(int(seconds * 1000))))
        # whole seconds, rounded up, for whoever reads Retry-After (HTTP's delta-seconds)
        headers.append(("retry-after", str(math.ceil(seconds))))
    return Answer(status, headers, dumps(wire.error(exc)), error=exc)


def _public_name(exc: LLMGuardError) -> str:
    """The name of ``exc``'s class among the public errors (the seam's own are private)."""
    for kind in type(exc).__mro__:
        if kind.__module__ == RequestValidationError.__module__:
            return kind.__name__
    return type(exc).__name__


def _last(exc: LLMGuardError) -> BaseException | None:
    """The error an answer speaks for: every route failed, the last route's."""
    if isinstance(exc, AllRoutesFailedError):
        return list(exc.errors.values())[-1] if exc.errors else None
    return exc


_KEPT = frozenset({400, 401, 403, 404, 422})  # a provider's client errors the SDKs tell apart


def status_of(exc: LLMGuardError) -> int:
    """The HTTP status an SDK maps back to the closest error of its own (429 for the
    provider's rate limits, the Guard's and its budgets); a provider's own client error
    (400, 401, 403, 404, 422) or server error (500, 502, Claude's 529 ...) keeps its status,
    as the SDK pointed at the provider would have seen it."""
    if isinstance(exc, AllRoutesFailedError):
        last = _last(exc)
        return status_of(last) if isinstance(last, LLMGuardError) else 503
    table: Sequence[tuple[type[LLMGuardError], int]] = (
        (NotServedError, 404),
        (UnknownModelError, 404),  # as OpenAI answers a model it does not serve
        (RequestValidationError, 400),
        (BadRequestError, 400),
        (AuthenticationError, 401),
        (BudgetExceededError, 429),
        (RateLimitedError, 429),
        (RateLimitExceededError, 429),  # the Guard's own limits: a rate limit all the same
        (ProviderTimeoutError, 504),
        (MalformedResponseError, 502),
        (RefusedError, 503),
        (ProviderError, 503),
    )
    for kind, status in table:
        if isinstance(exc, kind):
            own = exc.status_code if isinstance(exc, ProviderError) else None
            if own is not None and (own in _KEPT or (status >= 500 and 500 <= own <= 599)):
                return own
            return status
    return 500


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for a status."""
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "invalid_request_error",  # OpenAI's, for an unknown URL or model
        429: "rate_limit_error",
    }.get(status, "server_error")


def overflows(exc: LLMGuardError) -> bool:
    """Whether ``exc`` refuses an input too large: a route's context window (the provider's
    overflow, or a window the Guard knows) or the Guard's ``max_input_tokens``, which an SDK
    and the frameworks over it treat alike (an input to trim)."""
    return isinstance(_last(exc), (ContextLengthExceededError, InputTooLargeError))


def overflow_message(exc: LLMGuardError) -> str:
    """An overflow's message in Anthropic's words (see :mod:`._overflow`): the numbers of the
    refusal the answer speaks for (every route failed: the last route's), the Guard's own
    text after them."""
    last = _last(exc)
    return anthropic_overflow(last if last is not None else exc, str(exc))


def _provider_said(last: BaseException | None) -> dict[str, str | None]:
    """The ``code``, ``param`` and ``type`` of the provider's own error object, where ``last``
    is a provider's error whose body has one (an HTTP error answer's, a stream's error
    event's: OpenAI's 429 ``insufficient_quota`` or ``rate_limit_exceeded``, 401
    ``invalid_api_key`` ...); ``None`` for each it lacks."""
    error = body_error(last.body) if isinstance(last, ProviderError) and last.body else None
    said = error if isinstance(error, Mapping) else {}
    return {k: v if isinstance(v := said.get(k), str) else None for k in ("code", "param", "type")}


def openai_error(exc: LLMGuardError) -> dict[str, Any]:
    """OpenAI's error body for ``exc``; a content filter's refusal (every route failed: the
    last route's) with the code the provider gave it; where the Guard has no code of its own,
    the provider's ``code``, ``param`` and ``type`` as it gave them (so ``e.code`` tells a
    spent quota from a rate limit, and ``e.type`` says ``insufficient_quota`` or ``tokens``,
    as a direct call's do; else the ``type`` of the status)."""
    status, last = status_of(exc), _last(exc)
    said = _provider_said(last)
    own = (
        last.code  # the provider's own (content_policy_violation, content_filter ...)
        if isinstance(last, ContentPolicyError)
        else "insufficient_quota"
        if isinstance(exc, BudgetExceededError)
        else "context_length_exceeded"  # what frameworks tell an overflow by
        if overflows(exc)
        else exc.code
        if isinstance(exc, NotServedError)
        else "model_not_found"
        if isinstance(exc, UnknownModelError)
        else None
    )
    code = own or said["code"]
    kind = said["type"] if own is None and said["type"] else error_type(status)
    message = str(exc) + (_OVERFLOW if code == "context_length_exceeded" else "")
    return {"error": {"message": message, "type": kind, "param": said["param"], "code": code}}


def new_id(prefix: str) -> str:
    """An id for an answer whose route gave none (a local model ...): ``prefix``, then
    ``-llmguard-`` and 32 hex digits no other answer of any process has (a clock's
    nanoseconds were shared by two processes' answers of the same instant)."""
    return f"{prefix}-{_ANSWER_IDS.next()}"


_ANSWER_IDS = UniqueIds("llmguard-")
