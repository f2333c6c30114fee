"""What a batch's answers say, as :class:`~llmguard_sdk.providers.batch.BatchProvider`
hands them on: the outcome each result row gives its call (its answer at the batch tier, or
the typed error of a row that errored, was never run or is malformed), a call's answer as a
stream's one chunk, and why a call may have no result row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import (
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..models import ChatResponse, StreamChunk
from ._error_kinds import judged_error
from .anthropic import parse_anthropic_message
from .wire import parse_completion

__all__ = [
    "Outcome",
    "anthropic_row",
    "as_chunk",
    "batch_tier",
    "errored_row",
    "missing",
    "missing_note",
    "not_run",
    "openai_errors",
    "openai_row",
    "timed_out",
]

Outcome = ChatResponse | BaseException
"""What a call of a batch is handed: its answer, or the error it fails with."""

_JSON = {"content-type": "application/json"}
_EXPIRED = {"expired", "batch_expired", "request_timeout"}  # not run in time: a timeout
_CANCELLED = {"canceled", "batch_cancelled"}  # someone cancelled the batch at the provider


def missing_note(unread: int) -> str:
    """Why a call may have no result row: ``unread`` rows named no call."""
    if not unread:
        return ""
    return f"{unread} result row{'' if unread == 1 else 's'} could not be read"


def openai_errors(status: Mapping[str, Any]) -> str:
    """What an OpenAI batch that did not complete said: its status and its ``errors``'
    messages (a batch refused whole, say: ``failed``, "Enqueued token limit reached")."""
    if status.get("status") == "completed":
        return ""
    errors = status.get("errors")
    data = errors.get("data") if isinstance(errors, Mapping) else None
    said = [
        e["message"] for e in data or () if isinstance(e, Mapping) and _is_text(e.get("message"))
    ]
    return f"batch {status.get('status')}" + (f": {'; '.join(said[:5])}" if said else "")


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def batch_tier(response: ChatResponse) -> ChatResponse:
    """The answer of a batch: its usage says so, whatever the body's ``service_tier``."""
    if response.usage is None:
        return response
    usage = response.usage.model_copy(update={"service_tier": "batch"})
    return response.model_copy(update={"usage": usage})


def as_chunk(response: ChatResponse) -> StreamChunk:
    """``response`` as the one chunk of a stream (its metadata too: a refusal, logprobs)."""
    return StreamChunk(
        text=response.text,
        metadata=response.metadata,
        finish_reason=response.finish_reason or "stop",
        usage=response.usage,
        tool_calls=response.tool_calls,
        model=response.model,
        route=response.route,
        id=response.id,
    )


def openai_row(route: str, row: Mapping[str, Any]) -> Outcome:
    """The outcome a row of an OpenAI batch's output or error file gives its call."""
    response = row.get("response") or {}
    if not response and row.get("error"):  # an error file's row: never answered
        return errored_row(route, row["error"])
    code = response.get("status_code") if isinstance(response, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return malformed_row(route, "its response has no status_code")
    body = json.dumps(response.get("body") or row.get("error") or {}).encode()
    try:
        return batch_tier(parse_completion(code, _JSON, body, route=route))
    except ProviderError as exc:
        return exc


def anthropic_row(route: str, row: Mapping[str, Any]) -> Outcome:
    """The outcome a row of a Claude batch's results gives its call."""
    result = row.get("result")
    if not isinstance(result, dict):
        return malformed_row(route, "it has no result object")
    kind = result.get("type")
    if kind == "errored":
        error = result.get("error")  # {"type": "error", "error": {"type": ..., "message"}}
        return errored_row(route, error.get("error", error) if isinstance(error, dict) else error)
    if kind in _EXPIRED or kind in _CANCELLED:
        return not_run(route, str(kind), None)
    if kind != "succeeded":
        return ProviderError(f"the batch did not answer this call ({kind})", route=route)
    body = json.dumps(result.get("message") or {}).encode()
    try:
        return batch_tier(parse_anthropic_message(200, _JSON, body, route=route))
    except ProviderError as exc:
        return exc


def errored_row(route: str, error: object) -> ProviderError:
    """The typed error a result's ``error`` names (a rate limit, an overload, a refused
    request, a request the batch never ran ...), with its message: the error, status
    and retry verdict of the same failure answered as an HTTP error, as a row with its
    ``status_code`` has."""
    said = error.get("message") if isinstance(error, Mapping) else None
    text = said if isinstance(said, str) and said else "errored"
    code = error.get("code") if isinstance(error, Mapping) else None
    if code in _EXPIRED or code in _CANCELLED:
        return not_run(route, str(code), text)

    def build(kind: type[ProviderError], status: int) -> ProviderError:
        message = f"the batch did not answer this call: {text}"
        return kind(message, route=route, status_code=None if status == 200 else status)

    return judged_error(error, build)  # a spent quota is not retried


def not_run(route: str, kind: str, said: str | None) -> ProviderError:
    """The error of a request the batch never ran (unbilled). Expired (the batch's
    window ended first) or timed out: a :class:`ProviderTimeoutError`, which another
    batch may serve. Cancelled: someone cancelled the batch at the provider (this
    route cancels only batches nobody waits for), so it is not sent again, neither
    retried nor moved on to the next route: a :class:`ProviderUnavailableError` (the
    route served no answer) that is not retryable."""
    text = f"the batch did not run this call ({kind})" + (f": {said}" if said else "")
    if kind in _EXPIRED:
        return ProviderTimeoutError(text, route=route)
    error = ProviderUnavailableError(text, route=route)
    error.retryable = False
    return error


def malformed_row(route: str, why: str) -> MalformedResponseError:
    """The error of a result row that does not say what it should."""
    return MalformedResponseError(
        f"the batch's result row for this call is malformed: {why}", route=route
    )


def missing(route: str, note: str) -> ProviderError:
    """The error of a call the ended batch has no result row for (``note``: why there
    may be none: rows that named no call, the batch's own failure)."""
    said = f" ({note})" if note else ""
    return ProviderError(f"the batch ended without this call's result{said}", route=route)


def timed_out(route: str) -> ProviderTimeoutError:
    """The error of a call whose batch did not end within its deadline."""
    return ProviderTimeoutError("the batch did not end within the call's deadline", route=route)
