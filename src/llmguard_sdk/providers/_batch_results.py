"""What a batch's answers say, as :class:`~llmguard_sdk.providers.batch.BatchProvider`
hands them on: a call's answer at the batch tier (and as a stream's one chunk), and why a
call may have no result row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import ChatResponse, StreamChunk

__all__ = ["as_chunk", "batch_tier", "missing_note", "openai_errors"]


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
    """``response`` as the one chunk of a stream."""
    return StreamChunk(
        text=response.text,
        finish_reason=response.finish_reason or "stop",
        usage=response.usage,
        tool_calls=response.tool_calls,
        model=response.model,
        route=response.route,
        id=response.id,
    )
