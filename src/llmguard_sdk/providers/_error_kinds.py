"""Which typed error an error answer is, where its HTTP status alone does not settle it.

- ``x-should-retry: true|false`` is the server's own word on retrying (OpenAI sends it;
  openai-python obeys it over the status): it sets the error's ``retryable``.
- An error event inside a stream (OpenAI's ``{"error": {...}}``, Anthropic's ``error``
  event), or a 200 answer that is an error object (a router's whose model failed), names
  its kind in ``type`` or ``code`` (a router's: the HTTP status): a rate limit is a
  :class:`~llmguard_sdk.errors.RateLimitedError`, a refused request a
  :class:`~llmguard_sdk.errors.BadRequestError` (not retried: it would fail again), an
  unknown or server-side kind a :class:`~llmguard_sdk.errors.ProviderUnavailableError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..errors import (
    AuthenticationError,
    BadRequestError,
    ContextLengthExceededError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)

__all__ = [
    "CONTEXT_LENGTH_MARKERS",
    "UNAVAILABLE_4XX",
    "body_error",
    "error_answer",
    "error_status",
    "judge_retry",
    "quota_spent",
    "server_says_retry",
    "status_error_kind",
    "stream_error_kind",
]

UNAVAILABLE_4XX = frozenset({409, 425})
"""4xx statuses that say "not now" rather than "not this request", so another attempt may
succeed: :class:`~llmguard_sdk.errors.ProviderUnavailableError`, retryable. 409 Conflict is a
lock timeout at OpenAI and Anthropic (openai-python and anthropic-sdk-python retry it unless
``x-should-retry: false``); 425 Too Early was not processed, send it again later."""

CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
    "prompt is too long",  # Anthropic
)
_RATE_LIMITED = ("rate_limit", "insufficient_quota")
_QUOTA_SPENT = "insufficient_quota"  # OpenAI's: a billing state, not back within the call
_REFUSED = (
    "invalid_request",
    "not_found",
    "request_too_large",
    "invalid_prompt",
    "bad_request",
)
_DENIED = ("authentication", "permission", "invalid_api_key")


def server_says_retry(headers: Mapping[str, str]) -> bool | None:
    """``x-should-retry``'s verdict: True or False, ``None`` when absent or unclear."""
    for name, value in headers.items():
        if name.lower() == "x-should-retry":
            verdict = value.strip().lower()
            return True if verdict == "true" else False if verdict == "false" else None
    return None


def body_error(body: str) -> object:
    """The ``error`` member of an error answer's JSON body; ``None`` without one."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return None
    return data.get("error") if isinstance(data, dict) else None


def quota_spent(error: object) -> bool:
    """Whether an error object names a spent quota or credit (OpenAI's 429
    ``insufficient_quota``): a billing state that no wait within the call ends, so the
    :class:`~llmguard_sdk.errors.RateLimitedError` is not retryable and the chain moves on."""
    if not isinstance(error, Mapping):
        return False
    return any(error.get(field) == _QUOTA_SPENT for field in ("type", "code"))


def judge_retry(error: ProviderError, headers: Mapping[str, str], error_object: object) -> None:
    """Set ``error.retryable`` where the answer says more than its status: a spent quota
    (:func:`quota_spent` of its ``error_object``) is not retried; ``x-should-retry``, the
    server's own word, wins over both."""
    if isinstance(error, RateLimitedError) and quota_spent(error_object):
        error.retryable = False
    verdict = server_says_retry(headers)
    if verdict is not None:
        error.retryable = verdict


def stream_error_kind(error: object) -> type[ProviderError]:
    """The typed error for a stream's error event's ``error`` object."""
    if not isinstance(error, Mapping):
        return ProviderUnavailableError
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return status_error_kind(code)  # a router's (OpenRouter's): the HTTP status of the failure
    words = " ".join(
        str(error.get(field)).lower()
        for field in ("type", "code", "message")
        if isinstance(error.get(field), str)
    )
    named = " ".join(
        str(error.get(field)).lower()
        for field in ("type", "code")
        if isinstance(error.get(field), str)
    )
    if any(marker in named for marker in _RATE_LIMITED):  # the named kind before the words
        return RateLimitedError
    if any(marker in named for marker in _DENIED):
        return AuthenticationError
    if any(marker in words for marker in CONTEXT_LENGTH_MARKERS):
        return ContextLengthExceededError
    if any(marker in named for marker in _REFUSED):
        return BadRequestError
    return ProviderUnavailableError


def error_answer(
    error: object,
    headers: Mapping[str, str],
    body: bytes,
    *,
    route: str,
    default: str = "the provider answered an error",
) -> ProviderError:
    """The typed error of a 200 answer whose JSON is an ``error`` object (``default``: its
    message where the error has none), with the answer's headers and body; its status is
    :func:`error_status`'s."""
    said = error.get("message") if isinstance(error, dict) else error
    text = body[:2000].decode("utf-8", errors="replace")
    answer = stream_error_kind(error)(
        said if isinstance(said, str) and said else default,
        route=route,
        status_code=error_status(error, 200),
        headers=headers,
        body=text,
    )
    judge_retry(answer, headers, error)
    return answer


def error_status(error: object, answered: int) -> int:
    """The ``status_code`` of an error object that came in an answer of status ``answered``
    (a 200, a stream's): its numeric ``code`` where that is an HTTP status (a router's: the
    status of the failure behind it), so the error is read as that answer's would be (a 402
    or 404 moves the call to the next route, a 408 is no attempt that stalled, whose prompt
    the budget counts); else ``answered``."""
    code = error.get("code") if isinstance(error, Mapping) else None
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    return answered


def status_error_kind(status: int) -> type[ProviderError]:
    """The error of an HTTP error status (400-599 and beyond), whether an answer's or a
    numeric ``code`` in an error object (the HTTP status of a router's failure); a
    context-length refusal, which its words tell, is the caller's to find."""
    if status == 429:
        return RateLimitedError
    if status in (401, 403):
        return AuthenticationError
    if status == 408:
        return ProviderTimeoutError
    if status >= 500 or status in UNAVAILABLE_4XX:
        return ProviderUnavailableError
    return BadRequestError
