"""What a chat-completions choice carries besides its finish: a message's (or a stream
chunk's delta's) text, tool calls, reasoning, refusal and logprobs, read from the JSON an
OpenAI-compatible server sent. Pure functions, shared by the plain answer and the stream
(:mod:`~llmguard_sdk.providers.wire`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "COMPLETION_FIELDS",
    "MESSAGE_FIELDS",
    "READ_ANSWER",
    "choice_metadata",
    "content_text",
    "created_of",
    "kept_fields",
    "other_fields",
    "reasoning",
    "tool_calls_of",
]

MESSAGE_FIELDS = "message_fields"
"""The metadata key of a message's (a delta's) other fields, as the provider sent them."""

COMPLETION_FIELDS = "completion_fields"
"""The metadata key of an answer's (a chunk's) other top-level fields, as sent."""

_READ_MESSAGE = frozenset({"role", "content", "tool_calls", "refusal"})
READ_ANSWER = frozenset({"id", "object", "model", "choices", "usage", "error"})
"""An answer's (a chunk's) top-level fields the Guard reads itself."""


def other_fields(sent: Mapping[str, Any], read: frozenset[str]) -> dict[str, Any]:
    """The fields of ``sent`` the Guard does not read itself (not in ``read``), as sent,
    those that are ``null`` left out."""
    return {k: v for k, v in sent.items() if k not in read and v is not None}


def reasoning(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message's (or a delta's) reasoning, where an OpenAI-compatible server sends it
    beside the content (``reasoning_content``: DeepSeek, vLLM, llama.cpp; ``reasoning``:
    OpenRouter, Ollama) or in it (Mistral's ``thinking`` chunks, see :func:`content_text`),
    as ``{"reasoning": text}``: never the content's text."""
    keys = [message[k] for k in ("reasoning_content", "reasoning") if _is_text(message.get(k))]
    pieces = keys[:1]  # (a server that sends both sends the same text twice)
    content = message.get("content")
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") == "thinking":
            inner = part.get("thinking")
            chunks = inner if isinstance(inner, list) else [{"text": inner}]
            pieces += [c["text"] for c in chunks if isinstance(c, dict) and _is_text(c.get("text"))]
    text = "".join(pieces)
    return {"reasoning": text} if text else {}


def content_text(content: object) -> str | None:
    """A message's (or a delta's) content as text: a string as it is, a list of typed
    chunks (Mistral's reasoning models: ``text`` chunks, and ``thinking`` chunks, which are
    reasoning) as its text chunks' text joined; ``None`` for anything else."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return None
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and _is_text(part.get("text"))
    )


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def choice_metadata(choice: Mapping[str, Any], message: Mapping[str, Any]) -> dict[str, Any]:
    """What a choice adds to the answer besides its content, from the choice and its
    ``message`` (a stream chunk's: its ``delta``): OpenAI's refusal (beside the content, or
    in its place), the logprobs (asked for with ``logprobs=True``), each as the provider
    sent it, and the model's reasoning (see :func:`reasoning`); a stream's assembly joins
    its chunks' pieces (see :class:`~llmguard_sdk.models.StreamChunk`). The message's
    other fields (``audio``, ``annotations``, ``reasoning_content`` ...), as sent, in
    ``message_fields``, so an answer in OpenAI's shape gives them back."""
    metadata: dict[str, Any] = reasoning(message)
    fields = other_fields(message, _READ_MESSAGE)
    if fields:
        metadata[MESSAGE_FIELDS] = fields
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        metadata["refusal"] = refusal
    if isinstance(choice.get("logprobs"), dict):
        metadata["logprobs"] = choice["logprobs"]
    return metadata


def tool_calls_of(raw: object, problem: Any) -> list[dict[str, Any]] | None:
    """A message's (or a delta's) ``tool_calls`` as sent (``None`` for none or an empty
    list); anything but a list of objects raises ``problem(message)``, its malformed-answer
    error."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(call, dict) for call in raw):
        raise problem("tool_calls is not a list of objects")
    return raw or None


def kept_fields(metadata: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The provider's fields an answer's (a chunk's) ``metadata`` keeps under ``key``
    (:data:`MESSAGE_FIELDS`, :data:`COMPLETION_FIELDS`); none where there are none."""
    fields = metadata.get(key)
    return {str(k): v for k, v in fields.items()} if isinstance(fields, Mapping) else {}


def created_of(fields: Mapping[str, Any], default: int) -> int:
    """The answer's ``created`` as the provider gave it in ``fields``, else ``default``."""
    created = fields.get("created")
    return created if isinstance(created, int) and not isinstance(created, bool) else default
