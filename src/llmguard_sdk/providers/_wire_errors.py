"""How the chat-completions wire format reads an answer that is no answer: the typed error of
an HTTP error answer (its status and body's words: :mod:`._error_kinds`), the JSON object of
a 200 answer or the :class:`~llmguard_sdk.errors.MalformedResponseError` of one that is not,
and an error body's message. Re-exported by :mod:`~llmguard_sdk.providers.wire`; the stream
half (:mod:`._wire_stream`) reads its error events and error bodies with them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import MalformedResponseError, ProviderError
from ._error_kinds import body_error, body_object, judged_error
from .headers import server_wait_hint

__all__ = [
    "JSON_ERRORS",
    "MAX_ERROR_BODY_BYTES",
    "checked_answer",
    "error_from_status",
    "error_message",
    "http_error",
    "json_answer",
    "str_or_none",
]

MAX_ERROR_BODY_BYTES = 64 * 1024
"""How much of an error answer is read (enough for any provider's error JSON)."""

# Parsing untrusted JSON can fail in more ways than JSONDecodeError: 100k nested brackets
# raise RecursionError, a 5,000-digit integer raises ValueError.
JSON_ERRORS = (ValueError, RecursionError)


def json_answer(
    headers: Mapping[str, str], body: bytes, problem: Callable[[str], MalformedResponseError]
) -> dict[str, Any]:
    """The JSON object of a 200 answer; ``problem(message)`` makes the error when it is not."""
    content_type = headers.get("content-type", "")
    if "json" not in content_type:
        raise problem(f"content type {content_type!r} is not JSON")
    try:
        data = json.loads(body)
    except JSON_ERRORS:
        raise problem("response body is not valid JSON") from None
    if not isinstance(data, dict):
        raise problem("response body is not a JSON object")
    return data


def error_from_status(
    status: int, headers: Mapping[str, str], body: str, *, route: str
) -> ProviderError:
    """The typed error for an HTTP error answer (429, 5xx, 4xx ...:
    :func:`~llmguard_sdk.providers._error_kinds.judged_error`, its kind told by the status
    and the body's words, a spent quota not retried, ``x-should-retry`` the server's word);
    an answer of a status under 400 here is malformed."""
    common = _common(status, headers, body, route)

    def build(kind: type[ProviderError], _status: int) -> ProviderError:
        if status < 400:  # no error status: malformed, whatever its body says
            return MalformedResponseError(f"unexpected HTTP status {status}", **common)
        return kind(error_message(body) or f"provider answered HTTP {status}", **common)

    return judged_error(body_error(body), build, answered=status, headers=headers, text=body)


def _common(status: int, headers: Mapping[str, str], body: str, route: str) -> dict[str, Any]:
    return {
        "route": route,
        "status_code": status,
        "headers": headers,
        "retry_after": server_wait_hint(headers),
        "body": body[:2000],
    }


def checked_answer(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> tuple[dict[str, Any], Callable[[str], MalformedResponseError]]:
    """The JSON object of a 200 answer, and the function making the answer's
    :class:`MalformedResponseError` (with its headers and the start of its body) from a
    message; any other status raises its typed error."""
    if status != 200:
        raise http_error(status, headers, body, route=route)
    problem = _Problem(route, headers, body)
    return json_answer(headers, body, problem), problem


def http_error(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> ProviderError:
    """The typed error of an HTTP error answer, from its raw body."""
    text = body[:MAX_ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    return error_from_status(status, headers, text, route=route)


class _Problem:
    """Builds the MalformedResponseError of one answer, with its status, headers and body."""

    def __init__(self, route: str, headers: Mapping[str, str], body: bytes) -> None:
        self.route = route
        self.headers = headers
        self.body = body

    def __call__(self, message: str) -> MalformedResponseError:
        return MalformedResponseError(
            message,
            route=self.route,
            status_code=200,
            headers=self.headers,
            body=self.body[:2000].decode("utf-8", errors="replace"),
        )


def error_message(body: str) -> str | None:
    """An error body's message: OpenAI's and Anthropic's ``error.message``, an ``error``
    string (Ollama's, TGI's), a list of one error (Gemini's OpenAI-compatible endpoint), a
    top-level ``message`` (vLLM's error object) or ``detail`` (FastAPI's)."""
    data = body_object(body)
    if data is None:
        return None
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    for key in ("message", "detail"):
        if isinstance(data.get(key), str) and data[key]:
            return str(data[key])
    return None


def str_or_none(value: object) -> str | None:
    """``value`` where it is a string, else ``None``."""
    return value if isinstance(value, str) else None
